"""A named interrupt is answered by an owner that does not hold its loop live.

Only an input restores a loop on a new owner, so after a takeover (or once an
idle loop was passivated) an interrupt naming a turn that ended earlier reaches
a partition where its loop has no actor. Its sender still waits for an answer:
``TurnRejected{turn_ended}`` for a stored loop, ``TurnRejected{unknown_loop}``
for a loop stored nowhere. The test runs a turn on one service, stops it, and
sends both interrupts to a second service of the same group.
"""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID, uuid4

import pytest
from tests.support.eventually import assert_eventually
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    Models,
    apply_topic_set,
    collect_garbage,
    collect_garbage_late,
    connect,
    delete_topic_set,
    running,
    service_for,
    unique_prefix,
)

from turnstream.commands import Interrupt
from turnstream.events import Agency, RejectReason, TurnRejected
from turnstream.ids import LoopId, TurnId
from turnstream.kafka.client.session import KafkaSession
from turnstream.kafka.client.turns import TurnStatus

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

WAIT = 30.0


async def _interrupt(session: KafkaSession, loop_id: LoopId, turn_id: UUID) -> UUID:
    """Send an interrupt naming ``turn_id``; its command id."""
    command = Interrupt(
        command_id=uuid4(),
        session_id=session.session_id,
        loop_id=loop_id,
        created_at=datetime.now(UTC),
        agency=Agency.USER,
        turn_id=turn_id,
    )
    await session.send(command)
    return command.command_id


async def _answer(session: KafkaSession, loop_id: LoopId, command_id: UUID) -> str:
    """The reason of the rejection that answers ``command_id``."""

    async def answered() -> str:
        replies = [
            e
            for e in await session.replay(loop_id)
            if isinstance(e, TurnRejected) and e.reply_to() == command_id
        ]
        assert len(replies) == 1, replies
        return replies[0].reason.value

    return await assert_eventually(answered, timeout=WAIT, interval=0.2)


async def test_a_named_interrupt_is_answered_where_its_loop_is_not_live(
    kafka_bootstrap: str,
) -> None:
    prefix = unique_prefix("interrupt-answer")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    group = f"{prefix}actors"
    loop_id = LoopId(uuid4())
    try:
        first = service_for(kafka_bootstrap, topics, group_id=group, models=Models())
        async with running(first):
            session = await connect(kafka_bootstrap, topics)
            async with session:
                outcome = await session.submit_and_wait(
                    "What is 12 + 30?", loop_id=loop_id, timeout=WAIT
                )
        assert outcome.status is TurnStatus.DONE, outcome.status
        assert outcome.turn_id is not None
        ended = TurnId(outcome.turn_id)

        second = service_for(kafka_bootstrap, topics, group_id=group, models=Models())
        async with running(second):
            session = await connect(kafka_bootstrap, topics)
            async with session:
                stored = await _interrupt(session, loop_id, ended)
                elsewhere = LoopId(uuid4())
                unknown = await _interrupt(session, elsewhere, uuid4())
                assert await _answer(session, loop_id, stored) == (
                    RejectReason.TURN_ENDED.value
                )
                assert await _answer(session, elsewhere, unknown) == (
                    RejectReason.UNKNOWN_LOOP.value
                )
    finally:
        await delete_topic_set(kafka_bootstrap, prefix)
