"""The broker is a real Kafka: idempotence, transactions and compaction behave."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest
from aiokafka import AIOKafkaProducer
from tests.support.eventually import assert_eventually
from tests.support.kafka import KafkaNames, consume_all, create_topic

pytestmark = pytest.mark.kafka

TIMEOUT = 20.0


async def test_idempotent_producer_delivers_once_in_order(
    kafka_bootstrap: str, kafka_names: KafkaNames
) -> None:
    """enable_idempotence=True: every record arrives exactly once, in send order."""
    topic = kafka_names.topic("idempotent")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, enable_idempotence=True, linger_ms=5
    )
    async with asyncio.timeout(TIMEOUT):
        await producer.start()
        try:
            pending = [
                await producer.send(topic, f"v{i}".encode(), key=b"loop-1")
                for i in range(200)
            ]
            sent = await asyncio.gather(*pending)
        finally:
            await producer.stop()
    assert [m.offset for m in sent] == list(range(200))
    records = await consume_all(kafka_bootstrap, topic)
    assert [r.value for r in records] == [f"v{i}".encode() for i in range(200)]
    assert [r.offset for r in records] == list(range(200))


async def test_read_committed_hides_an_aborted_transaction(
    kafka_bootstrap: str, kafka_names: KafkaNames
) -> None:
    """Committed records are read_committed-visible; aborted ones only uncommitted."""
    topic = kafka_names.topic("txn")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap,
        transactional_id=kafka_names.transactional_id(),
    )
    async with asyncio.timeout(TIMEOUT * 2):
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait(topic, b"committed-1", key=b"k")
                await producer.send_and_wait(topic, b"committed-2", key=b"k")
            await producer.begin_transaction()
            await producer.send_and_wait(topic, b"aborted-1", key=b"k")
            await producer.send_and_wait(topic, b"aborted-2", key=b"k")
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.send_and_wait(topic, b"committed-3", key=b"k")
        finally:
            await producer.stop()

    committed = await consume_all(
        kafka_bootstrap, topic, isolation_level="read_committed"
    )
    assert [r.value for r in committed] == [
        b"committed-1",
        b"committed-2",
        b"committed-3",
    ]

    # The aborted records really are in the log: isolation, not a lost write.
    uncommitted = await consume_all(kafka_bootstrap, topic)
    assert [r.value for r in uncommitted] == [
        b"committed-1",
        b"committed-2",
        b"aborted-1",
        b"aborted-2",
        b"committed-3",
    ]


@pytest.mark.slow
async def test_compacted_topic_keeps_latest_value_per_key(
    kafka_bootstrap: str, kafka_names: KafkaNames
) -> None:
    """After cleaning, a read from the start shows one record per key: the latest."""
    topic = kafka_names.topic("compacted")
    await create_topic(
        kafka_bootstrap,
        topic,
        partitions=1,
        config={
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "100",
            "min.compaction.lag.ms": "0",
        },
    )
    keys = [f"loop-{k}".encode() for k in range(5)]
    versions = 6
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, enable_idempotence=True
    )
    async with asyncio.timeout(TIMEOUT):
        await producer.start()
    try:
        async with asyncio.timeout(TIMEOUT):
            for version in range(versions):
                for key in keys:
                    await producer.send_and_wait(topic, b"v%d" % version, key=key)
        latest = {key: b"v%d" % (versions - 1) for key in keys}
        fillers = 0

        async def compacted() -> None:
            nonlocal fillers
            # Segments roll only on append: each filler closes the previous segment
            # (older than segment.ms) so the cleaner may compact it.
            fillers += 1
            async with asyncio.timeout(TIMEOUT):
                await producer.send_and_wait(topic, b"f%d" % fillers, key=b"filler")
            seen: dict[bytes, list[bytes]] = defaultdict(list)
            for record in await consume_all(kafka_bootstrap, topic):
                if record.key in latest:
                    seen[record.key].append(record.value)
            assert dict(seen) == {key: [value] for key, value in latest.items()}

        await assert_eventually(
            compacted, timeout=60, interval=1.0, message="topic was not compacted"
        )
    finally:
        async with asyncio.timeout(TIMEOUT):
            await producer.stop()
