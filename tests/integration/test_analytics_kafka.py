"""The analytics faust app against the real broker.

A known journal (three loops, mixed outcomes; ``tests/unit/analytics/known_journal``)
is produced with the real codec inside a Kafka transaction, next to an aborted
transaction (which read_committed must hide) and an undecodable record (which
must be counted and skipped). The worker runs in-process (``AnalyticsApp.start``
in this event loop) with per-test topics, app id and data directory, and is
always stopped at the end. Results are read from the analytics topic (Avro), the
web views (JSON) and the app itself.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from tests.support.eventually import assert_eventually
from tests.support.kafka import KafkaNames, consume_all, create_topic
from tests.unit.analytics.known_journal import (
    T0,
    TOTAL_EVENTS,
    check_known_totals,
    check_known_windows,
    journal,
)

from turnstream.analytics.aggregate import TerminalKind
from turnstream.analytics.app import STATS_PATH, WINDOWS_PATH, AnalyticsApp
from turnstream.analytics.report import totals_view, windows_view
from turnstream.analytics.sample import LoopPlan, TurnPlan, build_journal
from turnstream.analytics.settings import AnalyticsSettings, Guarantee
from turnstream.events import EnduringEvent
from turnstream.wire.analytics_codec import AnalyticsSnapshot, unmarshal_snapshot
from turnstream.wire.codec import marshal_event

pytestmark = [
    pytest.mark.kafka,
    # faust 0.15.3 leaves resources behind when an in-process app stops: under
    # exactly-once its transactional AIOKafkaProducers' sockets stay open
    # ("Unclosed AIOKafkaProducer"), and mode cancels a not-yet-started
    # asyncio.sleep task. Both surface as warnings when garbage-collected;
    # `running()` collects them inside these tests so they are matched here.
    pytest.mark.filterwarnings("ignore:unclosed:ResourceWarning"),
    pytest.mark.filterwarnings(
        "ignore:coroutine 'sleep' was never awaited:RuntimeWarning"
    ),
]

PARTITIONS = 3
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
IO_TIMEOUT = 20.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def records_of(events: Sequence[EnduringEvent]) -> list[tuple[bytes, bytes]]:
    return [(str(e.header.loop_id).encode(), marshal_event(e)) for e in events]


async def produce(
    bootstrap: str,
    topic: str,
    records: Sequence[tuple[bytes, bytes]],
    transactional_id: str,
    *,
    abort: bool = False,
) -> None:
    """Write ``records`` in one transaction (committed, or aborted)."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=transactional_id
    )
    async with asyncio.timeout(IO_TIMEOUT):
        await producer.start()
        try:
            await producer.begin_transaction()
            for key, value in records:
                await producer.send(topic, key=key, value=value)
            if abort:
                await producer.abort_transaction()
            else:
                await producer.commit_transaction()
        finally:
            await producer.stop()


async def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    async with asyncio.timeout(IO_TIMEOUT):
        await admin.start()
        try:
            offsets = await admin.list_consumer_group_offsets(group)
        finally:
            await admin.close()
    return {
        tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic
    }


def settings_for(
    names: KafkaNames, bootstrap: str, data_dir: Path, guarantee: Guarantee
) -> AnalyticsSettings:
    prefix = names.prefix()  # every topic the app creates starts with it (cleanup)
    return AnalyticsSettings(
        bootstrap=bootstrap,
        app_id=f"{prefix}app",
        events_topic=f"{prefix}events",
        analytics_topic=f"{prefix}analytics",
        partitions=PARTITIONS,
        publish_interval_s=0.2,
        web_port=free_port(),
        data_dir=data_dir,
        guarantee=guarantee,
    )


@asynccontextmanager
async def running(app: AnalyticsApp) -> AsyncIterator[AnalyticsApp]:
    """Start the worker in this loop; always stop it."""
    try:
        async with asyncio.timeout(START_TIMEOUT):
            await app.start()
        yield app
    finally:
        async with asyncio.timeout(STOP_TIMEOUT):
            await app.stop()
        gc.collect()  # surface faust's leftovers under this module's filters


def settled(
    app: AnalyticsApp, *, applied: int, duplicates: int = 0
) -> AnalyticsSnapshot:
    snap = app.snapshot()
    assert (snap.events_applied, snap.duplicates_skipped) == (applied, duplicates)
    return snap


async def latest_published(
    bootstrap: str, topic: str, applied: int
) -> AnalyticsSnapshot:
    records = await consume_all(bootstrap, topic, isolation_level="read_committed")
    assert records, "no snapshot published yet"
    assert records[-1].value is not None
    snap = unmarshal_snapshot(records[-1].value)
    assert snap.events_applied == applied, f"latest covers {snap.events_applied} events"
    return snap


def aborted_loop() -> list[EnduringEvent]:
    """A whole extra loop, produced only in an aborted transaction."""
    plan = LoopPlan(
        turns=[TurnPlan(TerminalKind.DONE), TurnPlan(TerminalKind.FAILED)],
        model="never-committed",
        start=T0 + timedelta(seconds=30),
        loop_id=uuid.UUID(int=0xAB, version=4),
    )
    return build_journal([plan], seed=99)


@pytest.mark.parametrize(
    "guarantee",
    [
        pytest.param(Guarantee.AT_LEAST_ONCE, id="at-least-once"),
        pytest.param(Guarantee.EXACTLY_ONCE, id="exactly-once"),
    ],
)
async def test_analytics_app_counts_a_known_journal_exactly(
    kafka_bootstrap: str, kafka_names: KafkaNames, tmp_path: Path, guarantee: Guarantee
):
    """Committed journal -> exact aggregates in the app, the topic and the web views.

    The aborted transaction is invisible (read_committed) and the undecodable
    record is counted and skipped without stopping the worker.
    """
    settings = settings_for(kafka_names, kafka_bootstrap, tmp_path, guarantee)
    await create_topic(kafka_bootstrap, settings.events_topic, partitions=PARTITIONS)
    committed = [*records_of(journal()), (b"poison", b"\x00not an avro frame")]
    await produce(
        kafka_bootstrap,
        settings.events_topic,
        committed,
        kafka_names.transactional_id(),
    )
    await produce(
        kafka_bootstrap,
        settings.events_topic,
        records_of(aborted_loop()),
        kafka_names.transactional_id(),
        abort=True,
    )

    async with running(AnalyticsApp(settings)) as app:
        assert app.isolation_level() == "read_committed"
        snap = await assert_eventually(
            lambda: settled(app, applied=TOTAL_EVENTS),
            timeout=60,
            message="journal folded",
        )
        check_known_totals(snap)
        check_known_windows(snap)
        assert snap.undecodable == 1
        assert snap.partitions == (0, 1, 2)
        assert "never-committed" not in snap.totals.usage_by_model

        published = await assert_eventually(
            lambda: latest_published(
                kafka_bootstrap, settings.analytics_topic, TOTAL_EVENTS
            ),
            timeout=30,
            message="snapshot published",
        )
        check_known_totals(published)
        check_known_windows(published)
        assert published.undecodable == 1

        base = f"http://{settings.web_host}:{settings.web_port}"
        async with httpx.AsyncClient(base_url=base, timeout=IO_TIMEOUT) as client:
            stats = (await client.get(STATS_PATH)).raise_for_status().json()
            windows = (await client.get(WINDOWS_PATH)).raise_for_status().json()
        current = app.snapshot()
        assert stats == totals_view(current)
        assert windows == windows_view(current)
        assert stats["totals"]["turns_done"] == 3
        assert stats["totals"]["failure_kinds"] == {"provider": 2, "tool_limit": 1}
        assert [w["turns_started"] for w in windows["windows"]] == [5, 0, 2]


@pytest.mark.parametrize(
    "guarantee",
    [
        pytest.param(Guarantee.EXACTLY_ONCE, id="exactly-once"),
        pytest.param(Guarantee.AT_LEAST_ONCE, id="at-least-once"),
    ],
)
async def test_analytics_app_restart_resumes_from_changelog_without_double_counting(
    kafka_bootstrap: str, kafka_names: KafkaNames, tmp_path: Path, guarantee: Guarantee
):
    """Stop, produce the rest plus re-published old events, restart: counts stay exact.

    The group's committed offsets sit at the end of the first phase when the
    second worker starts, so the first phase's counts can only come from the
    table's changelog; the re-published events (same event ids, new offsets)
    are skipped as duplicates.
    """
    settings = settings_for(kafka_names, kafka_bootstrap, tmp_path, guarantee)
    await create_topic(kafka_bootstrap, settings.events_topic, partitions=PARTITIONS)
    events = journal()
    first, rest = events[:20], events[20:]
    txn = kafka_names.transactional_id()
    await produce(kafka_bootstrap, settings.events_topic, records_of(first), txn)

    async with running(AnalyticsApp(settings)) as app:
        before = await assert_eventually(
            lambda: settled(app, applied=len(first)), timeout=60, message="first phase"
        )
    assert before.totals.turns_started == 4  # A1-A3 and B1
    committed = await committed_offsets(
        kafka_bootstrap, settings.app_id, settings.events_topic
    )
    assert sum(committed.values()) == len(first)  # the restart resumes after them

    replayed = first[:8]  # re-published by a producer: same event ids, new offsets
    await produce(
        kafka_bootstrap, settings.events_topic, records_of([*rest, *replayed]), txn
    )

    async with running(AnalyticsApp(settings)) as app:
        snap = await assert_eventually(
            lambda: settled(app, applied=TOTAL_EVENTS, duplicates=len(replayed)),
            timeout=60,
            message="second phase",
        )
        check_known_totals(snap)
        check_known_windows(snap)
        published = await assert_eventually(
            lambda: latest_published(
                kafka_bootstrap, settings.analytics_topic, TOTAL_EVENTS
            ),
            timeout=30,
            message="snapshot published",
        )
        check_known_totals(published)
