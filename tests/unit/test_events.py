"""The event model: classes, scope, Reply-ness, terminals, error projection.

Mirrors the contract's TestEventClass, TestEventScope, TestEventEndsTurn,
TestReplyImplementations / TestReplyToZeroCausation and the error-projection
tests (TestMarshalEventTurnFailedErrProjection, ...ErrReMarshalFixedPoint).
"""

from __future__ import annotations

import typing
from uuid import UUID, uuid4

import pytest
from pydantic import TypeAdapter, ValidationError
from tests.unit.wire.golden import BUILDERS, live_header, step_header, turn_header

from turnstream import errors
from turnstream.content import AIMessage, TextBlock, ToolResultMessage, UserMessage
from turnstream.events import (
    ENDURING_EVENT_TYPES,
    EPHEMERAL_EVENT_TYPES,
    EVENT_TYPES,
    MAX_FAILURE_MESSAGE,
    REPLY_EVENT_TYPES,
    TERMINAL_EVENT_TYPES,
    AnyEvent,
    Cause,
    Delivery,
    Event,
    EventBase,
    FailureInfo,
    FailureKind,
    GateOpened,
    GateResolved,
    Header,
    InputCancelled,
    InputQueued,
    LoopDeleted,
    LoopIdle,
    LoopStarted,
    LoopStopped,
    PermissionDecided,
    PermissionRequested,
    Profile,
    Scope,
    StepDone,
    TerminalEvent,
    TokenDelta,
    ToolCallCompleted,
    ToolCallStarted,
    TurnDone,
    TurnFailed,
    TurnFoldedInto,
    TurnInterrupted,
    TurnRejected,
    TurnResumed,
    TurnStarted,
    failure_from_error,
)

E, D, T = Delivery.EPHEMERAL, Delivery.ENDURING, Delivery.TERMINAL

# type, delivery, profile, reply, ends_turn -- the contract's summary table (1.9).
EVENT_TABLE = [
    (LoopStarted, D, Profile.LOOP, False),
    (LoopIdle, D, Profile.LOOP, False),
    (InputQueued, E, Profile.LOOP, True),
    (TurnRejected, D, Profile.LOOP, True),
    (TurnStarted, D, Profile.TURN, True),
    (TurnFoldedInto, D, Profile.TURN, True),
    (InputCancelled, D, Profile.INPUT_CANCELLED, True),
    (TokenDelta, E, Profile.STEP, False),
    (StepDone, D, Profile.STEP, False),
    (TurnDone, T, Profile.TURN, False),
    (TurnFailed, T, Profile.TURN, False),
    (TurnInterrupted, T, Profile.TURN, False),
    (ToolCallStarted, E, Profile.TOOL, False),
    (ToolCallCompleted, E, Profile.TOOL, False),
    (PermissionDecided, D, Profile.TOOL, False),
    (PermissionRequested, D, Profile.TOOL, False),
    (GateOpened, D, Profile.STEP, False),
    (GateResolved, D, Profile.STEP, False),
    (LoopStopped, D, Profile.LOOP, False),
    (TurnResumed, D, Profile.TURN, False),
    (LoopDeleted, D, Profile.LOOP, True),
]


def _example(event_type: type[EventBase]) -> EventBase:
    return next(b() for b in BUILDERS.values() if type(b()) is event_type)


def test_table_covers_every_event_type() -> None:
    assert [row[0] for row in EVENT_TABLE] == list(EVENT_TYPES)


@pytest.mark.parametrize(
    ("event_type", "delivery", "profile", "reply"),
    [pytest.param(*row, id=row[0].__name__) for row in EVENT_TABLE],
)
def test_event_class_scope_profile_and_reply(
    event_type: type[EventBase], delivery: Delivery, profile: Profile, reply: bool
) -> None:
    """TestEventClass / TestEventScope: declared per type, read per instance."""
    event = _example(event_type)
    assert event_type.DELIVERY is delivery
    assert event_type.PROFILE is profile
    assert event_type.SCOPE is Scope.LOOP  # no session-scoped events yet
    assert event_type.REPLY is reply
    assert event.is_enduring() is (delivery is not Delivery.EPHEMERAL)
    assert event.type_name == event_type.__name__ == event.type  # type: ignore[attr-defined]


@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=lambda t: t.__name__)
def test_only_the_three_terminals_end_a_turn(event_type: type[EventBase]) -> None:
    """TestEventEndsTurn: TurnDone, TurnFailed, TurnInterrupted and no other."""
    ends = event_type in (TurnDone, TurnFailed, TurnInterrupted)
    assert _example(event_type).ends_turn() is ends
    if ends:
        assert _example(event_type).is_enduring()  # terminal ⇒ enduring


def test_type_tuples_partition_the_events() -> None:
    assert set(ENDURING_EVENT_TYPES) | set(EPHEMERAL_EVENT_TYPES) == set(EVENT_TYPES)
    assert not set(ENDURING_EVENT_TYPES) & set(EPHEMERAL_EVENT_TYPES)
    assert set(EPHEMERAL_EVENT_TYPES) == {
        TokenDelta,
        ToolCallStarted,
        ToolCallCompleted,
        InputQueued,
    }
    assert set(TERMINAL_EVENT_TYPES) == set(typing.get_args(TerminalEvent))
    assert set(typing.get_args(AnyEvent)) == set(EVENT_TYPES)


def test_reply_implementations() -> None:
    """TestReplyImplementations: the five turn-relevant Replies and LoopDeleted."""
    assert set(REPLY_EVENT_TYPES) == {
        InputQueued,
        TurnRejected,
        TurnStarted,
        TurnFoldedInto,
        InputCancelled,
        LoopDeleted,
    }


@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=lambda t: t.__name__)
def test_reply_to_is_the_cause_command_id_verbatim(event_type: type[EventBase]) -> None:
    event = _example(event_type)
    command = uuid4()
    caused = event.model_copy(
        update={
            "header": event.header.model_copy(
                update={"cause": Cause(command_id=command)}
            )
        }
    )
    assert caused.reply_to() == (command if event_type.REPLY else None)


@pytest.mark.parametrize("event_type", REPLY_EVENT_TYPES, ids=lambda t: t.__name__)
def test_reply_to_zero_causation(event_type: type[EventBase]) -> None:
    """TestReplyToZeroCausation: no cause → None; a zero id is returned as is."""
    event = _example(event_type)
    bare = event.model_copy(
        update={"header": event.header.model_copy(update={"cause": None})}
    )
    assert bare.reply_to() is None
    zero = event.model_copy(
        update={
            "header": event.header.model_copy(
                update={"cause": Cause(command_id=UUID(int=0))}
            )
        }
    )
    assert zero.reply_to() == UUID(int=0)


# --------------------------------------------------------------- StepDone shape


@pytest.mark.parametrize(
    "messages",
    [
        pytest.param((), id="empty"),
        pytest.param((ToolResultMessage(tool_use_id="t"),), id="tool-first"),
        pytest.param((AIMessage(), AIMessage()), id="two-ai"),
        pytest.param(
            (AIMessage(), ToolResultMessage(tool_use_id="t"), AIMessage()),
            id="ai-after-tool",
        ),
        pytest.param((UserMessage(),), id="user"),
    ],
)
def test_step_done_group_shape_is_enforced(messages: tuple[object, ...]) -> None:
    """TestStepDoneMessageGroupValidation: AI first, then tool results only."""
    with pytest.raises(ValidationError):
        StepDone(header=step_header(), messages=messages)  # type: ignore[arg-type]


def test_step_done_accepts_ai_then_tool_results() -> None:
    ai = AIMessage(blocks=(TextBlock(text="x"),))
    event = StepDone(
        header=step_header(),
        messages=(
            ai,
            ToolResultMessage(tool_use_id="a"),
            ToolResultMessage(tool_use_id="b"),
        ),
    )
    assert event.ai_message is ai


# --------------------------------------------------------------- failures


TYPED_ERRORS = [
    pytest.param(errors.EmptyResponseError(), FailureKind.EMPTY_RESPONSE, id="empty"),
    pytest.param(
        errors.ToolLimitError(iterations=1, max_iterations=1, calls=2, max_calls=1),
        FailureKind.TOOL_LIMIT,
        id="tool_limit",
    ),
    pytest.param(
        errors.StructuredOutputError("invalid_json"),
        FailureKind.STRUCTURED_OUTPUT,
        id="so",
    ),
    pytest.param(
        errors.HookDeniedError("tool_call", denied=True),
        FailureKind.HOOK_DENIED,
        id="hook",
    ),
    pytest.param(
        errors.ProviderError("anthropic", "overloaded", 529),
        FailureKind.PROVIDER,
        id="provider",
    ),
    pytest.param(errors.TurnPanicError("KeyError"), FailureKind.TURN_PANIC, id="panic"),
    pytest.param(
        errors.UsageOverflowError("input_tokens", 1, 2),
        FailureKind.USAGE_OVERFLOW,
        id="overflow",
    ),
    pytest.param(RuntimeError("boom"), FailureKind.UNKNOWN, id="untyped"),
    pytest.param(
        errors.TransportError("send", "down", retriable=True),
        FailureKind.UNKNOWN,
        id="non-turn",
    ),
]


@pytest.mark.parametrize(("error", "kind"), TYPED_ERRORS)
def test_each_error_projects_to_its_kind(
    error: BaseException, kind: FailureKind
) -> None:
    info = failure_from_error(error)
    assert info.kind is kind
    assert info.message == str(error)
    restored = info.to_error()
    assert isinstance(restored, errors.RestoredError)
    assert isinstance(restored, errors.TurnError)
    assert restored.restored_kind == kind.value
    assert restored.message == str(error)


@pytest.mark.parametrize(("error", "kind"), TYPED_ERRORS)
def test_restored_error_reprojection_is_a_fixed_point(
    error: BaseException, kind: FailureKind
) -> None:
    """No "kind: " prefix accretes when a restored error is projected again."""
    once = failure_from_error(error)
    twice = failure_from_error(once.to_error())
    assert twice == once
    assert failure_from_error(twice.to_error()) == once


def test_none_projects_to_unknown_with_empty_message() -> None:
    assert failure_from_error(None) == FailureInfo(kind=FailureKind.UNKNOWN, message="")


def test_restored_error_of_an_unknown_kind_projects_to_unknown() -> None:
    info = failure_from_error(errors.RestoredError("from_the_future", "m"))
    assert (info.kind, info.message) == (FailureKind.UNKNOWN, "m")


def test_projected_message_is_bounded() -> None:
    long = errors.StructuredOutputError("schema_mismatch", detail="x" * 10_000)
    assert len(failure_from_error(long).message) == MAX_FAILURE_MESSAGE


def test_turn_failed_restored_error_lets_a_consumer_branch_on_kind() -> None:
    event = TurnFailed(
        header=turn_header(),
        turn_index=1,
        error=failure_from_error(errors.EmptyResponseError()),
    )
    restored = event.restored_error()
    assert restored.restored_kind == errors.EmptyResponseError.kind
    assert restored == errors.RestoredError(
        "empty_response", "empty response from provider"
    )
    assert hash(restored) == hash(
        errors.RestoredError("empty_response", "empty response from provider")
    )


# --------------------------------------------------------------- model rules


@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=lambda t: t.__name__)
def test_events_are_frozen_and_forbid_extra_fields(event_type: type[EventBase]) -> None:
    event = _example(event_type)
    with pytest.raises(ValidationError):
        event.header = Header()  # type: ignore[misc]
    with pytest.raises(ValidationError):
        event_type.model_validate({**event.model_dump(), "surprise": 1})


@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=lambda t: t.__name__)
def test_event_union_parses_every_event_from_json(event_type: type[EventBase]) -> None:
    """The discriminated ``Event`` union routes by ``type``."""
    event = _example(event_type)
    parsed = TypeAdapter(Event).validate_json(event.model_dump_json())
    assert type(parsed) is event_type
    assert parsed == event


def test_turn_index_starts_at_one() -> None:
    with pytest.raises(ValidationError):
        TurnInterrupted(header=turn_header(), turn_index=0)
    assert InputCancelled.model_fields["turn_index"].default == 0


def test_live_events_need_no_event_id() -> None:
    delta = TokenDelta(
        header=live_header(), turn_index=1, chunk={"type": "text", "text": "x"}
    )  # type: ignore[arg-type]
    assert delta.header.event_id is None
    assert not delta.is_enduring()
