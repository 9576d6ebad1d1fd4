"""Restore on Kafka: sequence F, snapshot-only restore, redelivery deduplication.

A crash is made faithful without killing the test process: a producer with the
partition's transactional id is initialised (what a new owner does), so the running
service is fenced and can write nothing more, then it is stopped. The next service
of the group restores from the compacted loops topic plus the journal tail and closes
the open turn with a durable ``TurnInterrupted`` (harness contract §8.2, §10.3 F).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from uuid import uuid4

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
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

from turnstream.content import AIMessage, TextChunk, ToolResultMessage, UserMessage
from turnstream.events import TurnInterrupted, TurnStarted
from turnstream.ids import LoopId
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.actor.writer import transactional_id
from turnstream.kafka.topology import TopicNames
from turnstream.testing import (
    FunctionTool,
    Hang,
    ScriptedModel,
    call,
    text_step,
    tool_step,
)

pytestmark = pytest.mark.kafka


@pytest.fixture
async def topics(kafka_bootstrap: str) -> AsyncIterator[tuple[str, TopicNames]]:
    prefix = unique_prefix("restore")
    names = await apply_topic_set(kafka_bootstrap, prefix, partitions=2)
    try:
        yield prefix, names
    finally:
        await delete_topic_set(kafka_bootstrap, prefix)


async def _fence(bootstrap: str, txn_id: str) -> None:
    """Initialise a producer with ``txn_id``: the previous owner is fenced."""
    zombie_killer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=txn_id
    )
    async with asyncio.timeout(30):
        await zombie_killer.start()
        await zombie_killer.stop()


def _lookup() -> FunctionTool:
    return FunctionTool("lookup", lambda _input, _ctx: "42")


async def test_sequence_f_restore_closes_the_crashed_turn(
    kafka_bootstrap: str, topics: tuple[str, TopicNames]
) -> None:
    """F: a crash after one step; the next owner appends TurnInterrupted, goes on."""
    prefix, names = topics
    group = f"{prefix}actors"
    loop_id = LoopId(uuid4())
    before = Models(tools=(_lookup(),))
    before.by_loop[loop_id] = ScriptedModel([tool_step(call("lookup")), [Hang()]])
    first_owner = service_for(kafka_bootstrap, names, group_id=group, models=before)
    session = await connect(kafka_bootstrap, names)
    try:
        subscription = session.subscribe_events(loop_filter(loop_id))
        async with running(first_owner):
            first = await session.submit("first", loop_id=loop_id)
            await collect_until(subscription, count_type("StepDone"))
            partition = session.partition_of(loop_id)
            await _fence(
                kafka_bootstrap,
                transactional_id("it", group, names.commands, partition),
            )
        assert first_owner.metrics.fenced >= 1  # its handover could write nothing
        crashed = [e.type_name for e in await session.replay(loop_id)]
        assert crashed == [
            "LoopStarted",
            "TurnStarted",
            "PermissionDecided",
            "StepDone",
        ]

        after = Models(tools=(_lookup(),))
        model = ScriptedModel([text_step("back again")])
        after.by_loop[loop_id] = model
        metrics = ServiceMetrics()
        second_owner = service_for(
            kafka_bootstrap, names, group_id=group, models=after, metrics=metrics
        )
        async with running(second_owner):
            journal = await session.replay(loop_id)
            assert [e.type_name for e in journal][-1] == "TurnInterrupted"
            second = await session.submit("second", loop_id=loop_id)
            await collect_until(subscription, count_type("LoopIdle"))

        journal = await session.replay(loop_id)
        assert [e.type_name for e in journal] == [
            "LoopStarted",
            "TurnStarted",
            "PermissionDecided",
            "StepDone",
            "TurnInterrupted",
            "TurnStarted",
            "StepDone",
            "TurnDone",
            "LoopIdle",
        ]
        starts = [e for e in journal if isinstance(e, TurnStarted)]
        closing = next(e for e in journal if isinstance(e, TurnInterrupted))
        assert [s.reply_to() for s in starts] == [first, second]
        assert [s.turn_index for s in starts] == [1, 2]
        assert closing.turn_index == 1
        assert closing.header.turn_id == starts[0].header.turn_id
        # History survived the crash: user message and the committed step, no
        # partial step, then the new input.
        history = model.requests[0].messages
        assert [type(m) for m in history] == [
            UserMessage,
            AIMessage,
            ToolResultMessage,
            UserMessage,
        ]
        assert metrics.restores["snapshot+tail"] == 1
    finally:
        await session.close()


async def test_idle_loop_restores_from_snapshot_and_skips_redelivered_input(
    kafka_bootstrap: str, topics: tuple[str, TopicNames]
) -> None:
    """An idle loop restores from its snapshot alone; replayed commands are no-ops."""
    prefix, names = topics
    group = f"{prefix}actors"
    loop_id = LoopId(uuid4())
    session = await connect(kafka_bootstrap, names)
    try:
        subscription = session.subscribe_events(loop_filter(loop_id))
        models = Models()
        models.by_loop[loop_id] = ScriptedModel([text_step("one")])
        async with running(
            service_for(kafka_bootstrap, names, group_id=group, models=models)
        ):
            first = await session.submit("first", loop_id=loop_id)
            await collect_until(subscription, count_type("LoopIdle"))
        before = await session.replay(loop_id)

        # Rewind the group to the first command: every command is delivered again.
        rewind = AIOKafkaConsumer(
            bootstrap_servers=kafka_bootstrap, group_id=group, enable_auto_commit=False
        )
        async with asyncio.timeout(30):
            await rewind.start()
            try:
                tps = [TopicPartition(names.commands, p) for p in range(2)]
                rewind.assign(tps)
                await rewind.commit({tp: 0 for tp in tps})
            finally:
                await rewind.stop()

        models = Models()
        model = ScriptedModel([text_step("two")])
        models.by_loop[loop_id] = model
        metrics = ServiceMetrics()
        service = service_for(
            kafka_bootstrap, names, group_id=group, models=models, metrics=metrics
        )
        async with running(service):
            second = await session.submit("second", loop_id=loop_id)
            await collect_until(subscription, count_type("LoopIdle"))
            await assert_eventually(lambda: metrics.duplicates == 1, timeout=10)

        journal = await session.replay(loop_id)
        assert journal[: len(before)] == before
        added = [e.type_name for e in journal[len(before) :]]
        assert added == ["TurnStarted", "StepDone", "TurnDone", "LoopIdle"]
        started = [e for e in journal if isinstance(e, TurnStarted)]
        assert [s.reply_to() for s in started] == [first, second]
        assert metrics.restores["snapshot"] == 1
        assert "snapshot+tail" not in metrics.restores
        assert len(model.requests[0].messages) == 3  # user, answer, new user
    finally:
        await session.close()


async def test_a_failed_writer_rebuilds_its_partition_from_kafka(
    kafka_bootstrap: str, topics: tuple[str, TopicNames]
) -> None:
    """A writer that gave up: loops stop unwritten, restore, queued input re-runs."""
    prefix, names = topics
    loop_id = LoopId(uuid4())
    models = Models(tools=(_lookup(),))
    models.by_loop[loop_id] = ScriptedModel(
        [[TextChunk(text="stuck"), Hang()], text_step("second answer")]
    )
    metrics = ServiceMetrics()
    service = service_for(
        kafka_bootstrap,
        names,
        group_id=f"{prefix}actors",
        models=models,
        metrics=metrics,
    )
    session = await connect(kafka_bootstrap, names)
    try:
        subscription = session.subscribe_events(loop_filter(loop_id))
        async with running(service):
            first = await session.submit("first", loop_id=loop_id)
            queued = await session.submit("second", loop_id=loop_id, no_fold=True)
            await collect_until(subscription, count_type("InputQueued"))
            # What a commit that finally failed does (the broker is fine here):
            # the partition's writer refuses everything from now on.
            partition = session.partition_of(loop_id)
            service._runners[partition].writer.fail()
            await collect_until(subscription, count_type("LoopIdle"))
        journal = await session.replay(loop_id)
        assert [e.type_name for e in journal] == [
            "LoopStarted",
            "TurnStarted",
            "TurnInterrupted",
            "TurnStarted",
            "StepDone",
            "TurnDone",
            "LoopIdle",
        ]
        starts = [e for e in journal if isinstance(e, TurnStarted)]
        assert [s.reply_to() for s in starts] == [first, queued]
        assert [s.turn_index for s in starts] == [1, 2]
        assert metrics.restores["snapshot+tail"] >= 1
    finally:
        await session.close()
