"""A known journal (three loops, mixed outcomes) and its hand-computed aggregates.

Shared by the unit tests of the pure aggregation and the Kafka integration
tests of the faust app: both must produce exactly these numbers. Every
expected value below is written out from the plan, not computed with the
code under test.

Timeline (1 s gap before each turn; windows are 1 minute):

* A (model ``claude-x``): LoopStarted 12:00:00; A1 done 12:00:01-02.5;
  A2 failed/provider 03.5-04.3; A3 done 05.3-09.3.
* B (model ``gpt-y``): LoopStarted 12:00:10; B1 interrupted 11-13.5;
  B2 failed/tool_limit 14.5 - 12:01:15.5 (ends in the next window).
* C (no LoopStarted, model ``unknown``): C1 done 12:02:01-01.3;
  C2 failed/provider 02.3-02.8 with no steps.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from turnstream.analytics.aggregate import TerminalKind
from turnstream.analytics.sample import LoopPlan, TurnPlan, build_journal
from turnstream.content import Usage
from turnstream.events import EnduringEvent, FailureKind
from turnstream.wire.analytics_codec import AnalyticsSnapshot, SnapshotAggregates

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
LOOP_A = uuid.UUID("00000000-0000-4000-8000-00000000000a")
LOOP_B = uuid.UUID("00000000-0000-4000-8000-00000000000b")
LOOP_C = uuid.UUID("00000000-0000-4000-8000-00000000000c")
DONE = TerminalKind.DONE
FAILED = TerminalKind.FAILED
INTERRUPTED = TerminalKind.INTERRUPTED


def u(i: int, o: int) -> Usage:
    return Usage(input_tokens=i, output_tokens=o)


PLANS = [
    LoopPlan(
        loop_id=LOOP_A,
        model="claude-x",
        start=T0,
        turns=[
            TurnPlan(
                DONE,
                steps=2,
                tool_calls_per_step=1,
                latency_ms=1500,
                step_usage=u(100, 20),
            ),
            TurnPlan(FAILED, steps=1, latency_ms=800, step_usage=u(50, 10)),
            TurnPlan(
                DONE,
                steps=3,
                tool_calls_per_step=2,
                latency_ms=4000,
                step_usage=u(10, 5),
            ),
        ],
    ),
    LoopPlan(
        loop_id=LOOP_B,
        model="gpt-y",
        start=T0 + timedelta(seconds=10),
        turns=[
            TurnPlan(
                INTERRUPTED,
                steps=1,
                tool_calls_per_step=1,
                latency_ms=2500,
                step_usage=u(30, 3),
            ),
            TurnPlan(
                FAILED,
                steps=2,
                tool_calls_per_step=3,
                latency_ms=61_000,
                step_usage=u(7, 7),
                failure=FailureKind.TOOL_LIMIT,
            ),
        ],
    ),
    LoopPlan(
        loop_id=LOOP_C,
        model=None,
        start=T0 + timedelta(minutes=2),
        turns=[
            TurnPlan(DONE, steps=1, latency_ms=300, step_usage=u(1, 1)),
            TurnPlan(FAILED, steps=0, latency_ms=500),
        ],
    ),
]
EVENTS_PER_LOOP = {LOOP_A: 16, LOOP_B: 10, LOOP_C: 7}
TOTAL_EVENTS = 33


def journal(seed: int = 11) -> list[EnduringEvent]:
    """The known journal's events, in ``created_at`` order."""
    return build_journal(PLANS, seed=seed)


def latencies(
    aggregates: SnapshotAggregates,
) -> tuple[int, float, float | None, float | None]:
    lat = aggregates.latency
    return lat.count, lat.sum_ms, lat.min_ms, lat.max_ms


def check_known_totals(snap: AnalyticsSnapshot) -> None:
    """Assert the snapshot's totals are exactly the known journal's."""
    totals = snap.totals
    assert snap.loops == 3
    assert snap.open_turns == 0
    assert snap.late_events == 0
    assert (totals.turns_started, totals.turns_done) == (7, 3)
    assert (totals.turns_failed, totals.turns_interrupted) == (3, 1)
    assert totals.failure_kinds == {"provider": 2, "tool_limit": 1}
    assert latencies(totals) == (7, 70_600.0, 300.0, 61_000.0)
    # Nearest-rank over [300, 500, 800, 1500, 2500, 4000, 61000], within 1 %.
    assert totals.latency.p50_ms == pytest.approx(1_500, rel=0.01)
    assert totals.latency.p90_ms == pytest.approx(61_000, rel=0.01)
    assert totals.latency.p99_ms == pytest.approx(61_000, rel=0.01)
    assert (totals.steps.turns, totals.steps.total, totals.steps.max) == (7, 10, 3)
    assert (
        totals.tool_calls.turns,
        totals.tool_calls.total,
        totals.tool_calls.max,
    ) == (7, 15, 6)
    assert totals.usage_by_model == {
        "claude-x": u(280, 65),
        "gpt-y": u(44, 17),
        "unknown": u(1, 1),
    }
    assert totals.usage_by_loop == {
        str(LOOP_A): u(280, 65),
        str(LOOP_B): u(44, 17),
        str(LOOP_C): u(1, 1),
    }


def check_known_windows(snap: AnalyticsSnapshot) -> None:
    """Assert the snapshot's 1-minute windows are exactly the known journal's."""
    windows = {w.start: w for w in snap.windows}
    assert sorted(windows) == [T0, T0 + timedelta(minutes=1), T0 + timedelta(minutes=2)]

    w0 = windows[T0].aggregates
    assert windows[T0].end == T0 + timedelta(minutes=1)
    assert (w0.turns_started, w0.turns_done, w0.turns_failed) == (5, 2, 1)
    assert w0.turns_interrupted == 1
    assert w0.failure_kinds == {"provider": 1}
    assert latencies(w0) == (4, 8_800.0, 800.0, 4_000.0)
    assert (w0.steps.total, w0.tool_calls.total) == (7, 9)
    assert w0.usage_by_model == {"claude-x": u(280, 65), "gpt-y": u(30, 3)}

    w1 = windows[T0 + timedelta(minutes=1)].aggregates  # B2 started in w0, ended here
    assert (w1.turns_started, w1.turns_failed) == (0, 1)
    assert w1.failure_kinds == {"tool_limit": 1}
    assert latencies(w1) == (1, 61_000.0, 61_000.0, 61_000.0)
    assert w1.usage_by_loop == {str(LOOP_B): u(14, 14)}

    w2 = windows[T0 + timedelta(minutes=2)].aggregates
    assert (w2.turns_started, w2.turns_done, w2.turns_failed) == (2, 1, 1)
    assert latencies(w2) == (2, 800.0, 300.0, 500.0)
    assert w2.usage_by_model == {"unknown": u(1, 1)}
