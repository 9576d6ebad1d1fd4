"""Kafka helpers for integration tests: unique names, topic admin, draining reads.

Each test gets its own topics, consumer groups and transactional ids (uuid-suffixed),
so tests never see each other's records and can run against a shared broker. The
``kafka_names`` fixture in ``tests/conftest.py`` hands out a ``KafkaNames`` and deletes
the topics it named when the test ends.

Every network call here runs under a timeout.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from tests.support.eventually import assert_eventually

__all__ = [
    "DEFAULT_TIMEOUT",
    "KafkaNames",
    "consume_all",
    "create_topic",
    "delete_topics",
    "list_topics",
    "partitions_of",
    "unique_name",
    "wait_for_topic",
]

DEFAULT_TIMEOUT = 20.0
_ILLEGAL = re.compile(r"[^A-Za-z0-9._-]+")


def unique_name(prefix: str) -> str:
    """``<prefix>-<12 hex chars>``, with characters Kafka forbids replaced by ``-``."""
    clean = _ILLEGAL.sub("-", prefix).strip("-") or "t"
    return f"{clean[:180]}-{uuid.uuid4().hex[:12]}"


@dataclass
class KafkaNames:
    """Unique topic names, group ids and transactional ids for one test.

    Attributes:
        test: a readable stem (the test's name) included in every name.
        topics: every topic name handed out (deleted at teardown by the fixture).
        prefixes: every topic-set prefix handed out (topics starting with one are
            deleted at teardown).
    """

    test: str
    topics: list[str] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)

    def topic(self, base: str = "topic") -> str:
        """A fresh topic name, e.g. ``test-compaction.topic-1a2b3c4d5e6f``."""
        name = unique_name(f"test-{self.test}.{base}")
        self.topics.append(name)
        return name

    def group(self, base: str = "group") -> str:
        """A fresh consumer group id."""
        return unique_name(f"test-{self.test}.{base}")

    def transactional_id(self, base: str = "txn") -> str:
        """A fresh transactional id."""
        return unique_name(f"test-{self.test}.{base}")

    def prefix(self) -> str:
        """A fresh topic-name prefix (ends with ``.``) for a whole topic set."""
        value = unique_name(f"test-{self.test}") + "."
        self.prefixes.append(value)
        return value

    def owns(self, topic: str) -> bool:
        """Whether ``topic`` was named by this object (directly or by prefix)."""
        return topic in self.topics or any(topic.startswith(p) for p in self.prefixes)


async def _admin(bootstrap: str, timeout: float) -> AIOKafkaAdminClient:
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=int(timeout * 1000)
    )
    try:
        async with asyncio.timeout(timeout):
            await admin.start()
    except BaseException:
        await admin.close()
        raise
    return admin


async def create_topic(
    bootstrap: str,
    name: str,
    *,
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> None:
    """Create one topic (replication factor 1) and check the broker's error code.

    Raises:
        AssertionError: the broker answered with a non-zero error code.
    """
    admin = await _admin(bootstrap, timeout)
    try:
        async with asyncio.timeout(timeout):
            response = await admin.create_topics(
                [NewTopic(name, partitions, 1, topic_configs=dict(config or {}))],
                timeout_ms=int(timeout * 1000),
            )
    finally:
        await admin.close()
    errors = [
        (e["topic"], e["error_code"], e["error_message"])
        for e in response.to_object()["topic_errors"]
        if e["error_code"] != 0
    ]
    assert not errors, f"create_topics failed: {errors}"
    await wait_for_topic(bootstrap, name, partitions=partitions, timeout=timeout)


async def wait_for_topic(
    bootstrap: str, name: str, *, partitions: int, timeout: float = DEFAULT_TIMEOUT
) -> None:
    """Wait until the broker's metadata lists ``name`` with every partition led.

    CreateTopics returns once the controller committed the topic; the broker's
    metadata cache catches up a moment later.
    """
    admin = await _admin(bootstrap, timeout)
    try:

        async def visible() -> None:
            async with asyncio.timeout(timeout):
                (entry,) = await admin.describe_topics([name])
            assert entry["error_code"] == 0, f"{name}: error {entry['error_code']}"
            leaders = [p["leader"] for p in entry["partitions"]]
            assert len(leaders) == partitions, f"{name}: {len(leaders)} partitions"
            assert all(leader >= 0 for leader in leaders), f"{name}: leaderless"

        await assert_eventually(
            visible, timeout=timeout, interval=0.1, message=f"topic {name} not visible"
        )
    finally:
        await admin.close()


async def partitions_of(
    bootstrap: str, topic: str, *, timeout: float = DEFAULT_TIMEOUT
) -> list[int]:
    """The partition ids of ``topic``, waiting until the broker's metadata has it."""
    admin = await _admin(bootstrap, timeout)
    try:

        async def known() -> list[int]:
            async with asyncio.timeout(timeout):
                (entry,) = await admin.describe_topics([topic])
            assert entry["error_code"] == 0, f"{topic}: error {entry['error_code']}"
            assert entry["partitions"], f"{topic} has no partitions in metadata"
            return sorted(p["partition"] for p in entry["partitions"])

        return await assert_eventually(
            known, timeout=timeout, message=f"topic {topic} not in metadata"
        )
    finally:
        await admin.close()


async def list_topics(bootstrap: str, *, timeout: float = DEFAULT_TIMEOUT) -> list[str]:
    """Names of all topics on the cluster."""
    admin = await _admin(bootstrap, timeout)
    try:
        async with asyncio.timeout(timeout):
            return list(await admin.list_topics())
    finally:
        await admin.close()


async def delete_topics(
    bootstrap: str, names: Iterable[str], *, timeout: float = DEFAULT_TIMEOUT
) -> None:
    """Delete topics; missing ones are ignored by the broker's per-topic error."""
    targets = list(names)
    if not targets:
        return
    admin = await _admin(bootstrap, timeout)
    try:
        async with asyncio.timeout(timeout):
            await admin.delete_topics(targets, timeout_ms=int(timeout * 1000))
    finally:
        await admin.close()


async def consume_all(
    bootstrap: str,
    topic: str,
    *,
    isolation_level: str = "read_uncommitted",
    timeout: float = DEFAULT_TIMEOUT,
) -> list[ConsumerRecord[bytes, bytes]]:
    """Read every record of ``topic`` from the beginning up to the current end.

    The end is the high watermark (``read_uncommitted``) or the last stable offset
    (``read_committed``), captured once at the start, so the call always returns.
    Records come back partition by partition, each in offset order.
    """
    partitions = await partitions_of(bootstrap, topic, timeout=timeout)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation_level,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=int(timeout * 1000),
    )
    records: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]] = {}
    async with asyncio.timeout(timeout):
        await consumer.start()
        try:
            assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
            consumer.assign(assigned)
            await consumer.seek_to_beginning(*assigned)
            end = await consumer.end_offsets(assigned)
            pending = {tp for tp in assigned if end[tp] > 0}
            while pending:
                batch = await consumer.getmany(*pending, timeout_ms=500)
                for tp, got in batch.items():
                    records.setdefault(tp, []).extend(got)
                for tp in list(pending):
                    if await consumer.position(tp) >= end[tp]:
                        pending.discard(tp)
        finally:
            await consumer.stop()
    return [r for tp in sorted(records, key=lambda t: t.partition) for r in records[tp]]
