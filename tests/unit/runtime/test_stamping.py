"""``EventFactory.stamp`` copies frozen events without pydantic's ``model_copy``.

The copy must be indistinguishable from what ``model_copy(update=...)`` gives:
equal, same hash, same dump, same fields-set, still frozen; the unstamped
original untouched; a failing id source leaves nothing half stamped.
"""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID, uuid4

import pytest
from pydantic import ValidationError

from turnstream.content import AIMessage, TextBlock
from turnstream.events import Cause, TurnDone
from turnstream.ids import LoopId, SessionId
from turnstream.runtime.stamping import EventFactory
from turnstream.testing.clock import EPOCH, FixedClock, IdSourceFailure, SequentialIds


def _factory(ids: SequentialIds) -> EventFactory:
    loop = LoopId(uuid4())
    return EventFactory(
        session_id=SessionId(loop),
        loop_id=loop,
        clock=FixedClock(tick=timedelta(milliseconds=1)),
        ids=ids,
    )


def _turn_done(factory: EventFactory) -> TurnDone:
    header = factory.header(turn_id=uuid4(), cause=Cause(command_id=uuid4()))
    message = AIMessage(blocks=(TextBlock(text="done"),))
    return TurnDone(header=header, turn_index=3, message=message)


def test_stamp_equals_a_model_copy_of_the_same_event() -> None:
    factory = _factory(SequentialIds())
    event = _turn_done(factory)
    stamped = factory.stamp(event)

    update = {"event_id": UUID(int=1), "created_at": EPOCH}
    expected = event.model_copy(
        update={"header": event.header.model_copy(update=update)}
    )
    assert stamped == expected
    assert hash(stamped) == hash(expected)
    assert stamped.model_dump() == expected.model_dump()
    assert stamped.model_dump_json() == expected.model_dump_json()
    assert stamped.model_fields_set == expected.model_fields_set
    assert stamped.header.model_fields_set == expected.header.model_fields_set
    assert event.header.event_id is None  # the original is not touched
    with pytest.raises(ValidationError):
        stamped.header.event_id = UUID(int=9)  # type: ignore[misc]


def test_a_failing_id_source_stamps_nothing() -> None:
    ids = SequentialIds()
    factory = _factory(ids)
    event = _turn_done(factory)
    ids.fail_next()
    with pytest.raises(IdSourceFailure):
        factory.stamp(event)
    assert event.header.event_id is None
    assert factory.stamp(event).header.event_id == UUID(int=1)
