"""Event validation: the per-type coordinate profiles.

Owns :func:`validate_event`. It is enforced on every durable write and on
every decode of a journal record, so a record that could not be restored is
never written. Live ephemeral events are not validated on publish (they carry
no event id). Imports only value types and errors.
"""

from __future__ import annotations

from typing import NamedTuple
from uuid import UUID

from turnstream.errors import InvalidEventError
from turnstream.events import EVENT_TYPES, EventBase, Profile

__all__ = ["IdRule", "id_rules", "validate_event"]

_REQUIRED, _ZERO, _ANY = "R", "Z", "."

# loop_id, turn_id, step_id per profile (session_id and event_id always required).
_PROFILES: dict[Profile, tuple[str, str, str]] = {
    Profile.LOOP: (_REQUIRED, _ZERO, _ZERO),
    Profile.TURN: (_REQUIRED, _REQUIRED, _ZERO),
    Profile.INPUT_CANCELLED: (_REQUIRED, _ANY, _ZERO),
    Profile.STEP: (_REQUIRED, _REQUIRED, _REQUIRED),
    Profile.TOOL: (_REQUIRED, _REQUIRED, _REQUIRED),
}

_ZERO_UUID = UUID(int=0)
_KNOWN = frozenset(EVENT_TYPES)


def _is_set(value: UUID | None) -> bool:
    if value is None:
        return False
    # A UUID's own field, not its (Python-level) __eq__: this runs on every
    # journal write and read. Anything else compares as before.
    if value.__class__ is UUID:
        return value.int != 0
    return value != _ZERO_UUID


def validate_event(event: EventBase) -> None:
    """Check ``event`` against its type's coordinate profile.

    Order: known type, ``event_id``, ``session_id``, then loop ▸ turn ▸ step ▸
    ``tool_execution_id``, plus the universal rule *step set ⇒ turn set*.

    Raises:
        InvalidEventError: the first violation, naming event, field and rule.
    """
    cls = type(event)
    if cls not in _KNOWN:
        raise InvalidEventError(cls.__name__, "type", "is not a known event type")
    header = event.header
    if not _is_set(header.event_id):
        raise InvalidEventError(cls.__name__, "event_id", "must be set")
    if not _is_set(header.session_id):
        raise InvalidEventError(cls.__name__, "session_id", "must be set")
    loop_rule, turn_rule, step_rule = _PROFILES[event.PROFILE]
    turn_set = _is_set(header.turn_id)
    step_set = _is_set(header.step_id)
    for field, rule, is_set in (
        ("loop_id", loop_rule, _is_set(header.loop_id)),
        ("turn_id", turn_rule, turn_set),
        ("step_id", step_rule, step_set),
    ):
        if rule == _REQUIRED and not is_set:
            raise InvalidEventError(cls.__name__, field, "must be set")
        if rule == _ZERO and is_set:
            raise InvalidEventError(cls.__name__, field, "must be zero")
    if step_set and not turn_set:
        raise InvalidEventError(cls.__name__, "turn_id", "must be set")
    if event.PROFILE is Profile.TOOL and not _is_set(
        getattr(event, "tool_execution_id", None)
    ):
        raise InvalidEventError(cls.__name__, "tool_execution_id", "must be set")


class IdRule(NamedTuple):
    """One id :func:`validate_event` checks: where it is, and set or zero."""

    in_header: bool
    field: str
    must_be_set: bool


def id_rules(cls: type[EventBase]) -> tuple[IdRule, ...] | None:
    """The id rules :func:`validate_event` enforces on ``cls``, as data.

    For a checker elsewhere (the codec's native path) that holds exactly when
    ``validate_event`` passes; None for a type whose rules are not a plain
    list of set/zero ids (an unknown type, or an *any* step whose turn rule
    would then depend on it).
    """
    if cls not in _KNOWN:
        return None
    loop_rule, turn_rule, step_rule = _PROFILES[cls.PROFILE]
    if step_rule == _ANY and turn_rule != _REQUIRED:
        return None
    rules = [IdRule(True, "event_id", True), IdRule(True, "session_id", True)]
    for field, rule in (
        ("loop_id", loop_rule),
        ("turn_id", turn_rule),
        ("step_id", step_rule),
    ):
        if rule != _ANY:
            rules.append(IdRule(True, field, rule == _REQUIRED))
    if cls.PROFILE is Profile.TOOL:
        rules.append(IdRule(False, "tool_execution_id", True))
    return tuple(rules)
