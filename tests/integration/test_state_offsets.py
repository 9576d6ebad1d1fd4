"""A loop's state snapshots name the right journal offset, whatever else writes there.

The partition writer sends each transaction's state records together with its
events, on offsets predicted from its previous commit, and checks the events'
real offsets before committing. These tests put foreign records into the
events partition between turns -- a misrouted plain record, another producer's
committed transaction, another producer's aborted one -- and assert after each
turn that every committed snapshot of the loop points just past its own
transaction's last event of the loop (the ``TurnStarted`` when the snapshot
holds the turn open: restore reads the journal tail from there), that each
foreign write cost exactly one transaction written again (counted), and that a
restarted service restores the loop from its snapshot and goes on. With the
check of the real offsets left out, the snapshot committed with the first
``TurnStarted`` after a foreign write names the foreign record's offset.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaProducer, TopicPartition
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    Models,
    apply_topic_set,
    check_snapshots,
    clients_for,
    collect_garbage,
    collect_until,
    committed_state_records,
    committed_state_records_at,
    connect,
    count_type,
    delete_topic_set,
    enduring_types,
    loop_filter,
    running,
    service_for,
    unique_prefix,
)

from turnstream.ids import LoopId
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.actor.service import LoopActorService
from turnstream.kafka.client.session import KafkaSession
from turnstream.kafka.reader import read_journal
from turnstream.kafka.topology import TopicNames
from turnstream.state import LoopState
from turnstream.testing import ScriptedModel, text_step
from turnstream.wire import default_codec

pytestmark = [pytest.mark.kafka, pytest.mark.asyncio(loop_scope="module")]


@dataclass
class Lane:
    bootstrap: str
    topics: TopicNames
    prefix: str


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def lane(kafka_bootstrap: str) -> AsyncIterator[Lane]:
    prefix = unique_prefix("stateoffs")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    try:
        yield Lane(kafka_bootstrap, topics, prefix)
    finally:
        await delete_topic_set(kafka_bootstrap, prefix)


async def turn(session: KafkaSession, loop_id: LoopId, text: str) -> list[str]:
    """Submit ``text`` and wait for the turn's ``LoopIdle``; its enduring events."""
    subscription = session.subscribe_events(loop_filter(loop_id))
    await session.submit(text, loop_id=loop_id)
    events = await collect_until(subscription, count_type("LoopIdle"))
    subscription.close()
    return enduring_types(events)


async def committed_snapshots(lane: Lane) -> list[LoopState]:
    """Every committed state record of the loops partition, in order."""
    records = await committed_state_records(lane.bootstrap, lane.topics.loops)
    return [state for _, state in records]


async def check_loop_snapshots(lane: Lane, loop_id: LoopId) -> None:
    """The loop's snapshots against its journal, read once.

    The latest names the offset just after the loop's last event. Every
    committed one names the offset after its own transaction's last event of
    the loop: the event just before it is the loop's, and it is the
    ``TurnStarted`` of the turn a snapshot holds open (restore reads the tail
    from there).
    """
    entries = await read_journal(
        clients_for(lane.bootstrap),
        default_codec(),
        TopicPartition(lane.topics.events, 0),
    )
    latest = await check_snapshots(lane.bootstrap, lane.topics, 1, entries)
    last = max(e.offset for e in entries if e.loop_id == loop_id)
    assert latest[loop_id].journal_offset == last + 1
    at = {e.offset: e for e in entries}
    ours = [s for s in await committed_snapshots(lane) if s.loop_id == loop_id]
    assert ours
    for state in ours:
        before = at.get(state.journal_offset - 1)
        assert before is not None, f"nothing of the loop at {state.journal_offset - 1}"
        assert before.loop_id == loop_id
        if state.open_turn is not None:
            assert before.event.type_name == "TurnStarted"


def start_service(
    lane: Lane, models: Models, metrics: ServiceMetrics
) -> LoopActorService:
    """An in-process service on the lane's topics (one group for every test)."""
    return service_for(
        lane.bootstrap,
        lane.topics,
        group_id=f"{lane.prefix}actors",
        models=models,
        metrics=metrics,
    )


async def plain_record(lane: Lane, topic: str | None = None) -> None:
    """A record the service never wrote (misrouted, not Avro), not transactional."""
    producer = AIOKafkaProducer(bootstrap_servers=lane.bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(
            topic or lane.topics.events, b"not an event", key=b"stray", partition=0
        )
    finally:
        await producer.stop()


def foreign_transaction(
    *, commit: bool, history: bool = False
) -> Callable[[Lane], Awaitable[None]]:
    """Another transactional producer's record, committed or aborted."""

    async def write(lane: Lane) -> None:
        topic = lane.topics.history if history else lane.topics.events
        producer = AIOKafkaProducer(
            bootstrap_servers=lane.bootstrap,
            transactional_id=f"{lane.prefix}foreign-{uuid.uuid4().hex[:8]}",
        )
        await producer.start()
        try:
            await producer.begin_transaction()
            await (await producer.send(topic, b"foreign", key=b"stray", partition=0))
            if commit:
                await producer.commit_transaction()
            else:
                await producer.abort_transaction()
        finally:
            await producer.stop()

    return write


async def test_snapshots_point_past_the_loop_journal_despite_foreign_writes(
    lane: Lane,
) -> None:
    loop_id = LoopId(uuid.uuid4())
    script = [text_step(f"answer {i}") for i in range(8)]
    models = Models(by_loop={loop_id: ScriptedModel(script)})
    metrics = ServiceMetrics()
    async with running(start_service(lane, models, metrics)):
        session = await connect(lane.bootstrap, lane.topics)
        try:
            # Two turns: the first commit has no prediction, the rest do.
            for text in ("one", "two"):
                await turn(session, loop_id, text)
                await check_loop_snapshots(lane, loop_id)
            assert metrics.offset_mispredictions == 0
            foreign = (
                plain_record,
                foreign_transaction(commit=True),
                foreign_transaction(commit=False),
            )
            for count, write in enumerate(foreign, start=1):
                await write(lane)
                assert await turn(session, loop_id, f"after {count}") == [
                    "TurnStarted",
                    "StepDone",
                    "TurnDone",
                    "LoopIdle",
                ]
                await check_loop_snapshots(lane, loop_id)
                # Only the first transaction after the foreign write missed.
                assert metrics.offset_mispredictions == count
        finally:
            await session.close()

    # A new service restores the loop from that snapshot and goes on.
    models.by_loop[loop_id] = ScriptedModel([text_step("restored")])
    restored = ServiceMetrics()
    async with running(start_service(lane, models, restored)):
        session = await connect(lane.bootstrap, lane.topics)
        try:
            assert await turn(session, loop_id, "still here") == [
                "TurnStarted",
                "StepDone",
                "TurnDone",
                "LoopIdle",
            ]
            # Restored on its first command, from the snapshot alone (idle).
            assert restored.restores["snapshot"] == 1
            await check_loop_snapshots(lane, loop_id)
        finally:
            await session.close()


async def check_history_offsets(lane: Lane, loop_id: LoopId) -> LoopState:
    """The loop's latest head names where its history records really are."""
    heads = [s for s in await committed_snapshots(lane) if s.loop_id == loop_id]
    head = heads[-1]
    placed = {
        state.history_records - 1: (offset, state)
        for offset, _, state in await committed_state_records_at(
            lane.bootstrap, lane.topics.history, key_prefix=str(loop_id).encode()
        )
    }
    numbers = range(head.history_records)
    assert head.history_first_offset == placed[0][0]
    assert head.history_last_offset == placed[head.history_records - 1][0]
    assert [placed[n][1].history_previous_offset for n in numbers] == [
        -1,
        *(placed[n][0] for n in numbers[:-1]),
    ]
    return head


async def test_heads_name_their_history_records_despite_foreign_writes(
    lane: Lane,
) -> None:
    """The history partition's offsets are predicted as the events' are: a
    foreign write there costs one transaction written again, and every head
    still names where its records are, so a new owner restores the loop by
    fetching them by position."""
    loop_id = LoopId(uuid.uuid4())
    script = [text_step(f"answer {i}") for i in range(8)]
    models = Models(by_loop={loop_id: ScriptedModel(script)})
    metrics = ServiceMetrics()
    async with running(start_service(lane, models, metrics)):
        session = await connect(lane.bootstrap, lane.topics)
        try:
            for text in ("one", "two"):
                await turn(session, loop_id, text)
                await check_history_offsets(lane, loop_id)
            missed = metrics.offset_mispredictions

            async def plain_history(lane: Lane) -> None:
                await plain_record(lane, lane.topics.history)

            foreign = (
                plain_history,
                foreign_transaction(commit=True, history=True),
                foreign_transaction(commit=False, history=True),
            )
            for count, write in enumerate(foreign, start=1):
                await write(lane)
                await turn(session, loop_id, f"after {count}")
                await check_history_offsets(lane, loop_id)
                assert metrics.offset_mispredictions == missed + count
        finally:
            await session.close()

    after = ScriptedModel([text_step("restored")])
    models.by_loop[loop_id] = after
    restored = ServiceMetrics()
    async with running(start_service(lane, models, restored)):
        session = await connect(lane.bootstrap, lane.topics)
        try:
            await turn(session, loop_id, "still here")
            assert restored.restores["snapshot"] == 1
            # The model saw all five earlier turns, fetched by position.
            assert len(after.requests[0].messages) == 11
        finally:
            await session.close()
