"""Event validation: the per-type coordinate profiles.

Owns :func:`validate_event`. It is enforced on every durable write and on
every decode of a journal record, so a record that could not be restored is
never written. Live ephemeral events are not validated on publish (they carry
no event id). Imports only value types and errors.
"""

from __future__ import annotations

from uuid import UUID

from turnstream.errors import InvalidEventError
from turnstream.events import EVENT_TYPES, EventBase, Profile

__all__ = ["validate_event"]

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


def _is_set(value: UUID | None) -> bool:
    return value is not None and value != _ZERO_UUID


def validate_event(event: EventBase) -> None:
    """Check ``event`` against its type's coordinate profile.

    Order: known type, ``event_id``, ``session_id``, then loop ▸ turn ▸ step ▸
    ``tool_execution_id``, plus the universal rule *step set ⇒ turn set*.

    Raises:
        InvalidEventError: the first violation, naming event, field and rule.
    """
    name = type(event).__name__
    if type(event) not in EVENT_TYPES:
        raise InvalidEventError(name, "type", "is not a known event type")
    header = event.header
    if not _is_set(header.event_id):
        raise InvalidEventError(name, "event_id", "must be set")
    if not _is_set(header.session_id):
        raise InvalidEventError(name, "session_id", "must be set")
    loop_rule, turn_rule, step_rule = _PROFILES[event.PROFILE]
    for field, rule in (
        ("loop_id", loop_rule),
        ("turn_id", turn_rule),
        ("step_id", step_rule),
    ):
        value = getattr(header, field)
        if rule == _REQUIRED and not _is_set(value):
            raise InvalidEventError(name, field, "must be set")
        if rule == _ZERO and _is_set(value):
            raise InvalidEventError(name, field, "must be zero")
    if _is_set(header.step_id) and not _is_set(header.turn_id):
        raise InvalidEventError(name, "turn_id", "must be set")
    if event.PROFILE is Profile.TOOL and not _is_set(
        getattr(event, "tool_execution_id", None)
    ):
        raise InvalidEventError(name, "tool_execution_id", "must be set")
