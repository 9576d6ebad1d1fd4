"""validate_event: the coordinate fill matrix per profile.

Mirrors the contract's TestValidateEventValid / TestValidateEventInvalid /
TestValidateEventUnknownType: required and forbidden ids per profile, the
universal "step set ⇒ turn set" rule, the InputCancelled exceptions, and
tool_execution_id on tool events. Only the first violation is reported.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest
from tests.unit.wire.golden import BUILDERS, EVENT, LOOP, SESSION, STEP, TURN

from turnstream.errors import ContractError, InvalidEventError
from turnstream.events import (
    EVENT_TYPES,
    EventBase,
    Header,
    InputCancelled,
    LoopIdle,
    LoopStarted,
    PermissionDecided,
    Profile,
    StepDone,
    TokenDelta,
    ToolCallStarted,
    TurnDone,
    TurnStarted,
)
from turnstream.validation import validate_event

ZERO = UUID(int=0)
FULL = {
    "event_id": EVENT,
    "session_id": SESSION,
    "loop_id": LOOP,
    "turn_id": TURN,
    "step_id": STEP,
}


def _example(event_type: type[EventBase]) -> EventBase:
    return next(b() for b in BUILDERS.values() if type(b()) is event_type)


def _with(event: EventBase, **header: Any) -> EventBase:
    return event.model_copy(update={"header": event.header.model_copy(update=header)})


def _minimal(event_type: type[EventBase]) -> EventBase:
    """The example with exactly its profile's required coordinates."""
    required = {
        Profile.LOOP: ("loop_id",),
        Profile.TURN: ("loop_id", "turn_id"),
        Profile.INPUT_CANCELLED: ("loop_id",),
        Profile.STEP: ("loop_id", "turn_id", "step_id"),
        Profile.TOOL: ("loop_id", "turn_id", "step_id"),
    }[event_type.PROFILE]
    ids = {k: FULL[k] for k in ("event_id", "session_id", *required)}
    header = Header(**ids)
    return _example(event_type).model_copy(update={"header": header})


@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=lambda t: t.__name__)
def test_every_type_is_valid_with_its_profile_coordinates(
    event_type: type[EventBase],
) -> None:
    """TestValidateEventValid (journal events *and* stamped live ones)."""
    validate_event(_minimal(event_type))


@pytest.mark.parametrize(
    ("event_type", "header", "field", "rule"),
    [
        # every type: event id, then session id
        pytest.param(
            LoopIdle, {"event_id": None}, "event_id", "must be set", id="no-event-id"
        ),
        pytest.param(
            LoopIdle, {"event_id": ZERO}, "event_id", "must be set", id="zero-event-id"
        ),
        pytest.param(
            TurnDone,
            {"event_id": ZERO, "session_id": None},
            "event_id",
            "must be set",
            id="event-id-first",
        ),
        pytest.param(
            TurnDone, {"session_id": None}, "session_id", "must be set", id="no-session"
        ),
        pytest.param(
            TurnDone,
            {"session_id": ZERO},
            "session_id",
            "must be set",
            id="zero-session",
        ),
        # loop profile
        pytest.param(
            LoopStarted, {"loop_id": None}, "loop_id", "must be set", id="loop-no-loop"
        ),
        pytest.param(
            LoopStarted,
            {"turn_id": TURN},
            "turn_id",
            "must be zero",
            id="loop-forbids-turn",
        ),
        pytest.param(
            LoopIdle,
            {"step_id": STEP},
            "step_id",
            "must be zero",
            id="loop-forbids-step",
        ),
        # turn profile
        pytest.param(
            TurnStarted, {"turn_id": None}, "turn_id", "must be set", id="turn-no-turn"
        ),
        pytest.param(
            TurnStarted,
            {"turn_id": ZERO},
            "turn_id",
            "must be set",
            id="turn-zero-turn",
        ),
        pytest.param(
            TurnDone,
            {"step_id": STEP},
            "step_id",
            "must be zero",
            id="turn-forbids-step",
        ),
        pytest.param(
            TurnDone, {"loop_id": None}, "loop_id", "must be set", id="turn-no-loop"
        ),
        # step profile and the universal step ⇒ turn rule
        pytest.param(
            StepDone, {"step_id": None}, "step_id", "must be set", id="step-no-step"
        ),
        pytest.param(
            StepDone,
            {"turn_id": None},
            "turn_id",
            "must be set",
            id="step-without-turn",
        ),
        pytest.param(
            TokenDelta,
            {"turn_id": ZERO},
            "turn_id",
            "must be set",
            id="delta-step-without-turn",
        ),
        # input-cancelled profile: turn optional, step must be zero
        pytest.param(
            InputCancelled,
            {"step_id": STEP},
            "step_id",
            "must be zero",
            id="cancelled-step-zero",
        ),
        pytest.param(
            InputCancelled,
            {"loop_id": None},
            "loop_id",
            "must be set",
            id="cancelled-no-loop",
        ),
        # tool profile
        pytest.param(
            PermissionDecided,
            {"step_id": None},
            "step_id",
            "must be set",
            id="tool-no-step",
        ),
        pytest.param(
            ToolCallStarted,
            {"turn_id": None},
            "turn_id",
            "must be set",
            id="tool-no-turn",
        ),
    ],
)
def test_coordinate_violations_name_field_and_rule(
    event_type: type[EventBase], header: dict[str, Any], field: str, rule: str
) -> None:
    """TestValidateEventInvalid: the first violation, with event, field, rule."""
    event = _with(_minimal(event_type), **header)
    with pytest.raises(InvalidEventError) as info:
        validate_event(event)
    assert (info.value.event, info.value.field, info.value.rule) == (
        event_type.__name__,
        field,
        rule,
    )
    assert isinstance(info.value, ContractError)
    assert str(info.value) == f"event {event_type.__name__}: {field} {rule}"


@pytest.mark.parametrize("turn_id", [None, ZERO, TURN], ids=["none", "zero", "set"])
def test_input_cancelled_turn_id_is_optional(turn_id: UUID | None) -> None:
    """A retract carries no turn; a turn's end carries that turn."""
    validate_event(_with(_minimal(InputCancelled), turn_id=turn_id))


@pytest.mark.parametrize(
    "event_type",
    [t for t in EVENT_TYPES if t.PROFILE is Profile.TOOL],
    ids=lambda t: t.__name__,
)
def test_tool_execution_id_is_required_on_tool_events(
    event_type: type[EventBase],
) -> None:
    """The field is typed as required; the zero id is what "unset" looks like."""
    event = _minimal(event_type).model_copy(update={"tool_execution_id": ZERO})
    with pytest.raises(InvalidEventError) as info:
        validate_event(event)
    assert (info.value.field, info.value.rule) == ("tool_execution_id", "must be set")


def test_unknown_event_types_fail_secure() -> None:
    """TestValidateEventUnknownType: a subclass is not a known type."""

    class Rogue(LoopIdle):
        pass

    with pytest.raises(InvalidEventError) as info:
        validate_event(Rogue(header=_minimal(LoopIdle).header))
    assert (info.value.field, info.value.rule) == ("type", "is not a known event type")


def test_turn_done_usage_is_not_validated() -> None:
    """Reasoning above output never invalidates a completed turn."""
    done = _minimal(TurnDone)
    assert isinstance(done, TurnDone)
    odd = done.usage.model_copy(update={"output_tokens": 1, "reasoning_tokens": 9})
    validate_event(done.model_copy(update={"usage": odd}))
