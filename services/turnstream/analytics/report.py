"""Roll per-loop state up into one analytics snapshot, and render it as JSON.

Owns :func:`build_snapshot` (merge :class:`~turnstream.analytics.aggregate.LoopStats`
values into an :class:`~turnstream.wire.analytics_codec.AnalyticsSnapshot`),
:func:`summarize` (one :class:`Aggregates` as its wire form) and the JSON
views the web server returns. Pure: imports the aggregation modules and the
analytics wire *types* (pydantic models; no I/O); must not import faust,
aiokafka, :mod:`turnstream.runtime` or :mod:`turnstream.kafka`.

Reported windows are the ``window_retention`` newest, relative to the newest
event time over all loops, oldest first.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from turnstream.analytics.aggregate import (
    Aggregates,
    CountStats,
    FoldConfig,
    LoopStats,
    window_start_ms,
)
from turnstream.analytics.percentiles import LatencySketch
from turnstream.wire.analytics_codec import (
    AnalyticsSnapshot,
    CountSummary,
    LatencySummary,
    SketchBucket,
    SnapshotAggregates,
    SnapshotWindow,
)

__all__ = [
    "build_snapshot",
    "datetime_of_ms",
    "summarize",
    "totals_view",
    "windows_view",
]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def datetime_of_ms(millis: int) -> datetime:
    """The UTC datetime of epoch milliseconds ``millis`` (exact)."""
    return _EPOCH + timedelta(milliseconds=millis)


def _now_ms() -> int:
    return int(datetime.now(tz=UTC).timestamp() * 1000)


def build_snapshot(
    states: Iterable[LoopStats],
    config: FoldConfig,
    *,
    app_id: str,
    partitions: Iterable[int] = (),
    undecodable: int = 0,
    generated_at_ms: int | None = None,
    snapshot_id: UUID | None = None,
) -> AnalyticsSnapshot:
    """Merge the loops' states into one snapshot.

    Args:
        states: every loop's state (e.g. the values of the faust table).
        config: the aggregation's configuration (window geometry).
        app_id: the analytics app id, recorded in the snapshot.
        partitions: the journal partitions the states cover.
        undecodable: records skipped as undecodable.
        generated_at_ms: the build time (epoch ms); defaults to now.
        snapshot_id: the snapshot's id; defaults to a fresh UUID.
    """
    totals = Aggregates.empty(config.sketch)
    windows: dict[int, Aggregates] = {}
    loops = open_turns = applied = duplicates = late = 0
    watermark_us: int | None = None
    for state in states:
        loops += 1
        open_turns += len(state.open_turns)
        applied += state.events_applied
        duplicates += state.duplicates
        late += state.late_events
        if state.watermark_us is not None and (
            watermark_us is None or state.watermark_us > watermark_us
        ):
            watermark_us = state.watermark_us
        totals.merge(state.totals)
        for start, aggregates in state.windows.items():
            window = windows.get(start)
            if window is None:
                window = windows[start] = Aggregates.empty(config.sketch)
            window.merge(aggregates)
    oldest = 0
    if watermark_us is not None:
        newest = window_start_ms(watermark_us, config.window_size_ms)
        oldest = newest - (config.window_retention - 1) * config.window_size_ms
    size = config.window_size_ms
    return AnalyticsSnapshot(
        snapshot_id=snapshot_id or uuid4(),
        app_id=app_id,
        generated_at=datetime_of_ms(
            _now_ms() if generated_at_ms is None else generated_at_ms
        ),
        partitions=tuple(sorted(set(partitions))),
        window_size_ms=size,
        watermark=None
        if watermark_us is None
        else datetime_of_ms(watermark_us // 1000),
        loops=loops,
        open_turns=open_turns,
        events_applied=applied,
        duplicates_skipped=duplicates,
        late_events=late,
        undecodable=undecodable,
        totals=summarize(totals),
        windows=tuple(
            SnapshotWindow(
                start=datetime_of_ms(start),
                end=datetime_of_ms(start + size),
                aggregates=summarize(windows[start]),
            )
            for start in sorted(windows)
            if start >= oldest
        ),
    )


def summarize(aggregates: Aggregates) -> SnapshotAggregates:
    """The wire form of one :class:`Aggregates` (percentiles computed)."""
    return SnapshotAggregates(
        turns_started=aggregates.turns_started,
        turns_done=aggregates.turns_done,
        turns_failed=aggregates.turns_failed,
        turns_interrupted=aggregates.turns_interrupted,
        failure_kinds=dict(sorted(aggregates.failure_kinds.items())),
        latency=_latency(aggregates.latency),
        steps=_count(aggregates.steps),
        tool_calls=_count(aggregates.tool_calls),
        usage_by_model=dict(sorted(aggregates.usage_by_model.items())),
        usage_by_loop=dict(sorted(aggregates.usage_by_loop.items())),
    )


def _count(stats: CountStats) -> CountSummary:
    return CountSummary(turns=stats.turns, total=stats.total, max=stats.max)


def _latency(sketch: LatencySketch) -> LatencySummary:
    params = sketch.params
    return LatencySummary(
        count=sketch.count,
        sum_ms=sketch.sum,
        min_ms=sketch.min,
        max_ms=sketch.max,
        p50_ms=sketch.quantile(0.5),
        p90_ms=sketch.quantile(0.9),
        p99_ms=sketch.quantile(0.99),
        relative_accuracy=params.relative_accuracy,
        min_value_ms=params.min_value,
        max_value_ms=params.max_value,
        zero_count=sketch.zero_count,
        buckets=tuple(
            SketchBucket(index=i, count=sketch.buckets[i])
            for i in sorted(sketch.buckets)
        ),
    )


# --------------------------------------------------------------------------
# JSON views (what the web server returns)
# --------------------------------------------------------------------------


def _aggregates_json(aggregates: SnapshotAggregates) -> dict[str, Any]:
    data = aggregates.model_dump(mode="json")
    steps, calls = aggregates.steps, aggregates.tool_calls
    data["turns_ended"] = (
        aggregates.turns_done + aggregates.turns_failed + aggregates.turns_interrupted
    )
    data["steps"]["mean"] = steps.total / steps.turns if steps.turns else None
    data["tool_calls"]["mean"] = calls.total / calls.turns if calls.turns else None
    del data["latency"]["buckets"]
    return data


def _meta_json(snapshot: AnalyticsSnapshot) -> dict[str, Any]:
    data = snapshot.model_dump(mode="json", exclude={"totals", "windows"})
    data["windows"] = len(snapshot.windows)
    return data


def totals_view(snapshot: AnalyticsSnapshot) -> dict[str, Any]:
    """``/turnstream/stats/``: the snapshot's metadata and totals.

    Latency buckets are left out (they are in the Avro snapshot); step and
    tool-call means and ``turns_ended`` are added.
    """
    return {**_meta_json(snapshot), "totals": _aggregates_json(snapshot.totals)}


def windows_view(snapshot: AnalyticsSnapshot) -> dict[str, Any]:
    """``/turnstream/stats/windows/``: the retained windows, oldest first."""
    return {
        **_meta_json(snapshot),
        "windows": [
            {
                "start": w.start.isoformat(),
                "end": w.end.isoformat(),
                **_aggregates_json(w.aggregates),
            }
            for w in snapshot.windows
        ],
    }
