"""``submit_and_wait`` across a kill -9 takeover of the loop's actor.

Two ``python -m turnstream.loop_actor`` processes share a group (the demo model
slowed down, 6 s session timeout, the example agent ``support``; the harness of
``test_crash_kill9``). The owner of the loop is killed with SIGKILL while a followed
turn waits on its approval gate (held, so the kill always lands mid-turn) and
another input waits behind it. The survivor restores the loop: the followed turn's
outcome is ``INTERRUPTED`` (the restore's ``TurnInterrupted``), the queued input and
one sent while nobody owned the partition end ``DONE``; no wait hangs.
"""

from __future__ import annotations

import asyncio

import pytest
from tests.integration.test_crash_kill9 import _actors, _loop_on, _spawn
from tests.support.eventually import assert_eventually
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    apply_topic_set,
    collect_garbage,
    collect_garbage_late,
    connect,
    delete_topic_set,
    unique_prefix,
)

from turnstream.events import GateOpened, TokenDelta, TurnInterrupted
from turnstream.kafka.client import TurnStatus

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(240)]

WAIT = 120.0


async def test_submit_and_wait_across_a_kill_nine_takeover(
    kafka_bootstrap: str,
) -> None:
    prefix = unique_prefix("wait-takeover")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=2)
    session = await connect(kafka_bootstrap, topics)
    try:
        async with _actors(kafka_bootstrap, prefix) as actors:
            first = await _spawn("first", kafka_bootstrap, prefix)
            actors.append(first)
            await assert_eventually(
                lambda: first.partitions == {0, 1}, timeout=60, message="not ready"
            )
            second = await _spawn("second", kafka_bootstrap, prefix)
            actors.append(second)

            def split() -> None:
                assert first.partitions is not None
                assert second.partitions is not None
                assert len(first.partitions) == len(second.partitions) == 1

            await assert_eventually(split, timeout=60, message="no split assignment")
            assert first.partitions is not None
            loop = _loop_on(session, next(iter(first.partitions)))

            turn = await session.submit_turn(
                "count these four words", loop_id=loop, tokens=True
            )
            behind = asyncio.create_task(
                session.submit_and_wait(
                    "add 10 20", loop_id=loop, no_fold=True, timeout=WAIT
                )
            )
            streamed: list[str] = []
            async with asyncio.timeout(60):
                async for event in turn:  # mid-turn, held on the approval gate
                    streamed.append(event.type_name)
                    if isinstance(event, GateOpened):
                        break
            first.process.kill()  # SIGKILL: no handover, nothing flushed
            await first.process.wait()
            during = asyncio.create_task(
                session.submit_and_wait(
                    "add 2 3", loop_id=loop, no_fold=True, timeout=WAIT
                )
            )

            async with asyncio.timeout(WAIT):
                interrupted = await turn.outcome()
            assert interrupted.status is TurnStatus.INTERRUPTED, interrupted
            assert isinstance(interrupted.terminal, TurnInterrupted)
            assert interrupted.terminal.header.turn_id == interrupted.turn_id
            assert "TokenDelta" in streamed or any(
                isinstance(e, TokenDelta) for e in interrupted.events
            )
            queued, late = await behind, await during
            assert queued.status is TurnStatus.DONE, queued
            assert late.status is TurnStatus.DONE, late
            indexes = [interrupted.turn_index, queued.turn_index, late.turn_index]
            assert indexes == [1, 2, 3]
            assert second.partitions == {0, 1}
    finally:
        await session.close()
        await delete_topic_set(kafka_bootstrap, prefix)
