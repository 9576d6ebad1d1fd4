"""The analytics worker stopped mid-stream: every committed event still counts once.

A generated journal (60 loops, mixed outcomes, about 12,000 events in several
transactions) is folded by ``python -m turnstream.analytics`` in a child
process. Once the group has committed part of it -- and not all -- the child
gets SIGKILL (no stop, no final commit, an open transaction under
exactly-once) or SIGTERM (a graceful stop, which must exit 0 promptly). A
fresh worker in this process then resumes from the changelog and the
committed offsets, and its totals and windows must equal the pure fold of the
whole journal: nothing lost from the table, nothing counted twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

import pytest
from aiokafka.errors import KafkaError
from tests.integration.test_analytics_kafka import (
    PARTITIONS,
    committed_offsets,
    produce,
    records_of,
    running,
    settings_for,
)
from tests.integration.test_analytics_kafka import (
    pytestmark as analytics_kafka_marks,
)
from tests.support.eventually import assert_eventually
from tests.support.kafka import KafkaNames, create_topic

from turnstream.analytics.aggregate import TerminalKind, fold_journal
from turnstream.analytics.app import AnalyticsApp
from turnstream.analytics.report import build_snapshot
from turnstream.analytics.sample import LoopPlan, TurnPlan, build_journal
from turnstream.analytics.settings import AnalyticsSettings, Guarantee
from turnstream.events import EnduringEvent, FailureKind
from turnstream.wire.analytics_codec import AnalyticsSnapshot

# kafka, and the filters for faust's leftovers after an in-process stop.
pytestmark = analytics_kafka_marks

OUTCOMES = (TerminalKind.DONE, TerminalKind.FAILED, TerminalKind.INTERRUPTED)
TRANSACTION_SIZE = 500


def big_journal() -> list[EnduringEvent]:
    plans = [
        LoopPlan(
            model=f"model-{i % 4}",
            turns=[
                TurnPlan(
                    OUTCOMES[(i + t) % len(OUTCOMES)],
                    steps=1 + (i + t) % 3,
                    tool_calls_per_step=(i * t) % 2,
                    latency_ms=400 + 53 * ((i * 5 + t) % 40),
                    failure=FailureKind.PROVIDER if t % 2 else FailureKind.TOOL_LIMIT,
                )
                for t in range(40)
            ],
        )
        for i in range(60)
    ]
    return build_journal(plans, seed=11)


def reference(
    events: list[EnduringEvent], settings: AnalyticsSettings
) -> AnalyticsSnapshot:
    """The pure fold of the whole journal, merged like the worker merges it."""
    config = settings.fold_config()
    states = fold_journal(events, config)
    return build_snapshot(states.values(), config, app_id=settings.app_id)


async def spawn_worker(settings: AnalyticsSettings) -> asyncio.subprocess.Process:
    argv = [
        sys.executable,
        "-m",
        "turnstream.analytics",
        "--bootstrap",
        settings.bootstrap,
        "--app-id",
        settings.app_id,
        "--events-topic",
        settings.events_topic,
        "--analytics-topic",
        settings.analytics_topic,
        "--partitions",
        str(settings.partitions),
        "--data-dir",
        str(settings.data_dir / "child"),
        "--guarantee",
        settings.guarantee.value,
        "--no-web",
        # The dead member's partitions are reassigned after its session
        # times out: 6 s (the broker's minimum) instead of 60.
        "--session-timeout",
        "6",
        "--log-level",
        "WARNING",
    ]
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


STOP_TIMEOUT = 30.0


@pytest.mark.parametrize(
    "guarantee",
    [
        pytest.param(Guarantee.EXACTLY_ONCE, id="exactly-once"),
        pytest.param(Guarantee.AT_LEAST_ONCE, id="at-least-once"),
    ],
)
@pytest.mark.parametrize(
    "stop_signal",
    [
        pytest.param(signal.SIGKILL, id="kill-9"),
        pytest.param(signal.SIGTERM, id="sigterm"),
    ],
)
async def test_analytics_worker_stopped_mid_stream_counts_every_event_once(
    kafka_bootstrap: str,
    kafka_names: KafkaNames,
    tmp_path: Path,
    guarantee: Guarantee,
    stop_signal: signal.Signals,
):
    settings = settings_for(kafka_names, kafka_bootstrap, tmp_path, guarantee)
    await create_topic(kafka_bootstrap, settings.events_topic, partitions=PARTITIONS)
    events = big_journal()
    records = records_of(events)
    txn = kafka_names.transactional_id()
    for start in range(0, len(records), TRANSACTION_SIZE):
        chunk = records[start : start + TRANSACTION_SIZE]
        await produce(kafka_bootstrap, settings.events_topic, chunk, txn)

    child = await spawn_worker(settings)
    try:

        async def partly_committed() -> int:
            assert child.returncode is None, "the worker exited by itself"
            try:
                offsets = await committed_offsets(
                    kafka_bootstrap, settings.app_id, settings.events_topic
                )
            except KafkaError as exc:
                # A fresh broker creates __consumer_offsets on the first group:
                # "coordinator not available" until then.
                if not exc.retriable:
                    raise
                raise AssertionError(f"no group coordinator yet: {exc!r}") from exc
            done = sum(offsets.values())
            assert done > 0, "nothing committed yet"
            return done

        committed_before = await assert_eventually(
            partly_committed, timeout=90, interval=0.05, message="first commit"
        )
        child.send_signal(stop_signal)
        async with asyncio.timeout(STOP_TIMEOUT):
            returncode = await child.wait()
    finally:
        if child.returncode is None:
            child.kill()
            with contextlib.suppress(ProcessLookupError):
                await child.wait()
    # Offsets count transaction markers too, so the journal's end is above
    # len(events); the kill must have come before the worker reached it.
    assert committed_before < len(events), "the stop came after the last commit"
    # SIGTERM is a clean stop (exit 0); SIGKILL leaves -9.
    assert returncode == (0 if stop_signal is signal.SIGTERM else -signal.SIGKILL)

    expected = reference(events, settings)
    async with running(AnalyticsApp(settings)) as app:
        snap = await assert_eventually(
            lambda: _settled(app, len(events)), timeout=120, message="resumed"
        )
    assert snap.duplicates_skipped == 0
    assert snap.loops == expected.loops == 60
    assert snap.open_turns == expected.open_turns
    assert snap.totals == expected.totals
    assert snap.windows == expected.windows
    assert snap.totals.turns_started == 60 * 40


def _settled(app: AnalyticsApp, applied: int) -> AnalyticsSnapshot:
    snap = app.snapshot()
    assert snap.events_applied == applied, f"{snap.events_applied} of {applied}"
    return snap
