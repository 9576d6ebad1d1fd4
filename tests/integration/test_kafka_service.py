"""The loop-actor service's edges on a real broker: dead letters, fencing, topology."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from uuid import uuid4

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import InvalidProducerEpoch, ProducerFenced
from tests.support.eventually import assert_eventually
from tests.support.kafka import KafkaNames, consume_all, create_topic
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    Models,
    apply_topic_set,
    clients_for,
    collect_garbage,
    collect_garbage_late,
    collect_until,
    connect,
    count_type,
    delete_topic_set,
    loop_filter,
    read_all,
    running,
    service_for,
    unique_prefix,
)

from turnstream.errors import ConfigError
from turnstream.events import Header, LoopStarted
from turnstream.ids import LoopId
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.actor.writer import PartitionWriter, WriterSettings, WriterState
from turnstream.kafka.faults import PartitionFencedError
from turnstream.kafka.records import (
    DLQ_OFFSET,
    DLQ_PARTITION,
    DLQ_REASON,
    DLQ_TOPIC,
    loop_key,
)
from turnstream.kafka.topology import TopicNames, check_copartitioned
from turnstream.testing import ScriptedModel, text_step
from turnstream.wire import default_codec

pytestmark = pytest.mark.kafka


@pytest.fixture
async def topics(kafka_bootstrap: str) -> AsyncIterator[tuple[str, TopicNames]]:
    prefix = unique_prefix("service")
    names = await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    try:
        yield prefix, names
    finally:
        await delete_topic_set(kafka_bootstrap, prefix)


async def test_undecodable_commands_go_to_the_dead_letter_topic(
    kafka_bootstrap: str, topics: tuple[str, TopicNames]
) -> None:
    """Bad bytes (and a key naming another loop) are dead-lettered; the next runs."""
    prefix, names = topics
    group = f"{prefix}actors"
    loop_id = LoopId(uuid4())
    models = Models()
    models.by_loop[loop_id] = ScriptedModel([text_step("fine")])
    metrics = ServiceMetrics()
    session = await connect(kafka_bootstrap, names)
    raw = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    try:
        subscription = session.subscribe_events(loop_filter(loop_id))
        async with running(
            service_for(
                kafka_bootstrap, names, group_id=group, models=models, metrics=metrics
            )
        ):
            async with asyncio.timeout(30):
                await raw.start()
                await raw.send_and_wait(
                    names.commands,
                    b"\x00not avro at all",
                    key=loop_key(loop_id),
                    headers=[("origin", b"test")],
                )
                other = default_codec().marshal_command(
                    _submit(LoopId(uuid4()), session.session_id)
                )
                await raw.send_and_wait(names.commands, other, key=loop_key(loop_id))
            command_id = await session.submit("after the garbage", loop_id=loop_id)
            live = await collect_until(subscription, count_type("LoopIdle"))
            assert next(e for e in live if e.type_name == "TurnStarted").reply_to() == (
                command_id
            )
            await assert_eventually(lambda: metrics.dead_letters == 2, timeout=15)

        dead = await consume_all(
            kafka_bootstrap, names.dead_letters, isolation_level="read_committed"
        )
        assert [r.value for r in dead] == [b"\x00not avro at all", other]
        first = dict(dead[0].headers)
        assert first["origin"] == b"test"
        assert first[DLQ_TOPIC] == names.commands.encode()
        assert first[DLQ_PARTITION] == b"0"
        assert first[DLQ_OFFSET] == b"0"
        assert b"cannot decode command" in first[DLQ_REASON]
        assert b"does not name its loop" in dict(dead[1].headers)[DLQ_REASON]
        # Both offsets were committed with the dead letters: nothing is re-read.
        checker = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=group)
        async with asyncio.timeout(30):
            await checker.start()
            try:
                committed = await checker.committed(TopicPartition(names.commands, 0))
            finally:
                await checker.stop()
        assert committed == 3
    finally:
        await raw.stop()
        await session.close()


def _submit(loop_id: LoopId, session_id: object) -> object:
    from turnstream.commands import SubmitInput
    from turnstream.content import TextBlock, UserMessage

    return SubmitInput(
        command_id=uuid4(),
        session_id=session_id,  # type: ignore[arg-type]
        loop_id=loop_id,
        created_at=datetime.now(UTC),
        message=UserMessage(blocks=(TextBlock(text="misrouted"),)),
    )


def _loop_started(loop_id: LoopId) -> LoopStarted:
    return LoopStarted(
        header=Header(
            event_id=uuid4(),
            session_id=uuid4(),
            loop_id=loop_id,
            created_at=datetime.now(UTC),
            agent_name="it",
        ),
        model="m",
    )


async def test_a_fenced_writer_never_appends(
    kafka_bootstrap: str, topics: tuple[str, TopicNames]
) -> None:
    """Two writers, one transactional id: the older is fenced, its records invisible."""
    prefix, names = topics
    broken: list[PartitionWriter] = []

    def writer() -> PartitionWriter:
        return PartitionWriter(
            partition=0,
            clients=clients_for(kafka_bootstrap),
            topics=names,
            group_id=f"{prefix}group",
            txn_id=f"{prefix}txn-0",
            codec=default_codec(),
            metrics=ServiceMetrics(),
            settings=WriterSettings(commit_deadline=10.0),
            still_owner=lambda: True,
            on_broken=broken.append,
        )

    loop_id = LoopId(uuid4())
    old, new = writer(), writer()
    await old.start()
    old_task = asyncio.create_task(old.run())
    try:
        before = _loop_started(loop_id)
        await old.append(loop_id, [before], None)
        await new.start()  # InitProducerId bumps the epoch: the old writer is fenced
        new_task = asyncio.create_task(new.run())
        zombie = _loop_started(loop_id)
        with pytest.raises(PartitionFencedError):
            await old.append(loop_id, [zombie], None)
        assert old.state is WriterState.FENCED
        assert broken == [old]
        with pytest.raises(PartitionFencedError):
            await old.append(loop_id, [_loop_started(loop_id)], None)
        after = _loop_started(loop_id)
        await new.append(loop_id, [after], None)
        await new.close()
        await asyncio.wait_for(new_task, 30)
    finally:
        await old.close()
        await asyncio.wait_for(old_task, 30)
    journal = await read_all(kafka_bootstrap, names, 1)
    assert [e.event.header.event_id for e in journal] == [
        before.header.event_id,
        after.header.event_id,
    ]


async def test_raw_zombie_transaction_fails_with_producer_fenced(
    kafka_bootstrap: str, kafka_names: KafkaNames
) -> None:
    """aiokafka level: the old producer's commit is fenced; read_committed hides it."""
    topic = kafka_names.topic("fence")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    txn_id = kafka_names.transactional_id()
    old = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=txn_id)
    new = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=txn_id)
    async with asyncio.timeout(60):
        await old.start()
        try:
            await old.begin_transaction()
            await old.send_and_wait(topic, b"zombie", partition=0)
            await new.start()
            with pytest.raises((ProducerFenced, InvalidProducerEpoch)):
                await old.commit_transaction()
            async with new.transaction():
                await new.send_and_wait(topic, b"owner", partition=0)
        finally:
            await old.stop()
            await new.stop()
    committed = await consume_all(
        kafka_bootstrap, topic, isolation_level="read_committed"
    )
    assert [r.value for r in committed] == [b"owner"]


async def test_service_refuses_topics_that_are_not_co_partitioned(
    kafka_bootstrap: str, kafka_names: KafkaNames
) -> None:
    """Commands, events and loops must share a partition count: ConfigError."""
    names = TopicNames(
        commands=kafka_names.topic("commands"),
        events=kafka_names.topic("events"),
        loops=kafka_names.topic("loops"),
        deltas=kafka_names.topic("deltas"),
        dead_letters=kafka_names.topic("dlq"),
    )
    for topic, partitions in ((names.commands, 2), (names.events, 3), (names.loops, 2)):
        await create_topic(kafka_bootstrap, topic, partitions=partitions)
    with pytest.raises(ConfigError, match="same partition count"):
        await check_copartitioned(clients_for(kafka_bootstrap), names)
    service = service_for(kafka_bootstrap, names, group_id="g", models=Models())
    with pytest.raises(ConfigError):
        await asyncio.wait_for(service.run(), 30)
