"""``submit_and_wait`` and the ``Turn`` handle, against the real broker.

One in-process loop-actor service; the loop's model is scripted and its ``gate``
tool blocks until the test releases it, so each input lands where the test wants
it: starting a turn, queued behind one (``no_fold``), folded into it, refused
(``queue_full`` with a one-slot inbox), interrupted, or returned when the turn it
waited behind was interrupted. Each outcome names the right status, turn and
terminal; the streamed variant yields the turn's ``TokenDelta`` chunks.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from tests.support.eventually import assert_eventually
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    Models,
    apply_topic_set,
    collect_garbage,
    collect_garbage_late,
    collect_until,
    connect,
    count_type,
    delete_topic_set,
    loop_filter,
    running,
    service_for,
    unique_prefix,
)

from turnstream.events import (
    CancelReason,
    InputCancelled,
    InputQueued,
    RejectReason,
    TokenDelta,
    TurnDone,
    TurnInterrupted,
    TurnRejected,
)
from turnstream.ids import LoopId
from turnstream.kafka.client import TurnStatus
from turnstream.kafka.client.session import KafkaSession
from turnstream.runtime.config import LoopConfig
from turnstream.runtime.session import LoopSetup
from turnstream.testing import FunctionTool, ScriptedModel, call, text_step, tool_step

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(240)]

WAIT = 45.0


@dataclass
class _Gated(Models):
    """Loops whose ``gate`` tool waits for :meth:`release`; a one-slot inbox."""

    started: int = 0
    releases: asyncio.Queue[None] = field(default_factory=asyncio.Queue)

    async def _gate(self, _input: str, _ctx: object) -> str:
        self.started += 1
        await self.releases.get()
        return "opened"

    def setup_for(self, loop_id: LoopId, _agent: str = "") -> LoopSetup:
        config = LoopConfig(
            model="test-model",
            tools=(FunctionTool(name="gate", fn=self._gate),),
            commit_timeout=45.0,
            agent_name="it",
            inbox_capacity=1,
        )
        return LoopSetup(
            config=config,
            model=self.by_loop.get(loop_id, self.default),
            access_policy=self.access_for(loop_id),
        )

    async def wait_started(self, count: int) -> None:
        await assert_eventually(
            lambda: self.started >= count, timeout=WAIT, message="gate not reached"
        )


@pytest.fixture
async def lane(kafka_bootstrap: str) -> AsyncIterator[tuple[KafkaSession, _Gated]]:
    prefix = unique_prefix("submit-wait")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    models = _Gated()
    service = service_for(
        kafka_bootstrap, topics, group_id=f"{prefix}actors", models=models
    )
    session = await connect(kafka_bootstrap, topics)
    try:
        async with running(service):
            yield session, models
    finally:
        await session.close()
        await delete_topic_set(kafka_bootstrap, prefix)


async def test_submit_and_wait_started_folded_rejected_and_queued(
    lane: tuple[KafkaSession, _Gated],
) -> None:
    """Started, folded, rejected, then queued inputs: each gets its outcome."""
    session, models = lane
    loop = session.active_loop
    models.by_loop[loop] = ScriptedModel(
        [
            tool_step(call("gate")),  # turn 1: the first input, the folded one joins
            text_step("one"),
            tool_step(call("gate")),  # turn 2: runs while the next input queues
            text_step("two"),
            text_step("th", "ree"),  # turn 3: the queued input
        ]
    )
    first = asyncio.create_task(session.submit_and_wait("go", timeout=WAIT))
    await models.wait_started(1)
    folded = asyncio.create_task(session.submit_and_wait("and this", timeout=WAIT))
    await asyncio.sleep(1.0)  # the fold candidate fills the one-slot inbox
    rejected = await session.submit_and_wait("too many", no_fold=True, timeout=WAIT)
    models.releases.put_nowait(None)
    one, joined = await first, await folded

    assert one.status is TurnStatus.DONE
    assert one.text == "one"
    assert one.turn_index == 1
    assert not one.folded
    assert isinstance(one.terminal, TurnDone)
    assert one.events[0].type_name == "TurnStarted"

    assert joined.status is TurnStatus.DONE
    assert joined.folded
    assert joined.turn_id == one.turn_id
    assert joined.terminal == one.terminal

    assert rejected.status is TurnStatus.REJECTED
    assert isinstance(rejected.answer, TurnRejected)
    assert rejected.answer.reason is RejectReason.QUEUE_FULL
    assert rejected.terminal is None
    assert rejected.turn_id is None

    second = asyncio.create_task(session.submit_and_wait("again", timeout=WAIT))
    await models.wait_started(2)
    queued = await session.submit_turn("after", no_fold=True, tokens=True)
    await asyncio.sleep(0.5)
    models.releases.put_nowait(None)
    seen = [event async for event in queued]
    behind = await queued.outcome()
    two = await second

    assert two.status is TurnStatus.DONE
    assert two.text == "two"
    assert behind.status is TurnStatus.DONE
    assert behind.text == "three"
    assert behind.turn_index == two.turn_index + 1 == 3
    assert not behind.folded
    assert isinstance(seen[0], InputQueued)  # it waited behind turn 2
    tokens = [e.chunk.text for e in seen if isinstance(e, TokenDelta)]  # type: ignore[union-attr]
    assert "".join(tokens) == "three"
    assert seen[-1] == behind.terminal


async def test_submit_and_wait_interrupted_cancelled_and_queued_behind(
    lane: tuple[KafkaSession, _Gated],
) -> None:
    """Interrupted turn: INTERRUPTED; a retracted input: CANCELLED; the next runs."""
    session, models = lane
    loop = session.active_loop
    models.by_loop[loop] = ScriptedModel([tool_step(call("gate")), text_step("after")])
    watch = session.subscribe_events(loop_filter(loop))
    running_turn = asyncio.create_task(session.submit_and_wait("go", timeout=WAIT))
    await models.wait_started(1)
    retracted = await session.submit_turn("never mind", no_fold=True)
    assert retracted.command_id is not None
    await session.retract(retracted.command_id)
    async with asyncio.timeout(WAIT):
        cancelled = await retracted.outcome()
    behind = asyncio.create_task(
        session.submit_and_wait("behind", no_fold=True, timeout=WAIT)
    )
    # The turn is held by its gate tool; interrupt it once "behind" is queued.
    await collect_until(watch, count_type("InputQueued", 2), timeout=WAIT)
    await session.interrupt(loop)
    outcome = await running_turn
    assert outcome.status is TurnStatus.INTERRUPTED
    assert isinstance(outcome.terminal, TurnInterrupted)
    assert outcome.terminal.header.turn_id == outcome.turn_id

    assert cancelled.status is TurnStatus.CANCELLED
    assert isinstance(cancelled.answer, InputCancelled)
    assert cancelled.answer.reason is CancelReason.CLIENT_RETRACTED
    assert cancelled.terminal is None

    queued = await behind  # an interrupt ends the turn, not the queue
    assert queued.status is TurnStatus.DONE
    assert queued.text == "after"
    assert queued.turn_index == 2


async def test_follow_an_input_sent_earlier_reads_the_journal(
    lane: tuple[KafkaSession, _Gated],
) -> None:
    """``follow`` finds an outcome committed before the handle existed."""
    session, models = lane
    loop = session.active_loop
    models.by_loop[loop] = ScriptedModel([text_step("done already")])
    command_id = await session.submit("hello")
    async with asyncio.timeout(WAIT):
        await session.wait_idle(loop)
        outcome = await session.follow(command_id).outcome()
    assert outcome.status is TurnStatus.DONE
    assert outcome.text == "done already"
