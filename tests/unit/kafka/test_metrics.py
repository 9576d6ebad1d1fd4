"""Service metrics: counters and a Prometheus-shaped latency histogram."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

import pytest

from turnstream.content import AIMessage, TextBlock
from turnstream.events import Header, StepDone, TurnDone, TurnInterrupted
from turnstream.kafka.actor.metrics import LatencyHistogram, ServiceMetrics


def test_metrics_histogram_is_cumulative() -> None:
    """Observations land in the first bucket that holds them; +Inf catches all."""
    histogram = LatencyHistogram(buckets=(0.1, 1.0))
    for seconds in (0.05, 0.1, 0.5, 3.0):
        histogram.observe(seconds)
    assert histogram.cumulative() == [(0.1, 2), (1.0, 3), (float("inf"), 4)]
    assert histogram.count == 4
    assert histogram.total == pytest.approx(3.65)
    assert histogram.quantile(0.5) == 0.1
    assert histogram.quantile(0.99) == float("inf")


def test_metrics_histogram_rejects_unsorted_buckets() -> None:
    """Bucket bounds must increase."""
    with pytest.raises(ValueError, match="increase"):
        LatencyHistogram(buckets=(1.0, 0.1))


def test_metrics_count_turn_events() -> None:
    """Steps and terminals by kind are counted from committed events."""
    header = Header(
        event_id=uuid4(),
        session_id=uuid4(),
        loop_id=uuid4(),
        turn_id=uuid4(),
        created_at=datetime.now(UTC),
    )
    answer = AIMessage(blocks=(TextBlock(text="a"),))
    metrics = ServiceMetrics()
    metrics.committed(
        [
            StepDone(
                header=header.model_copy(update={"step_id": uuid4()}),
                messages=(answer,),
            ),
            TurnDone(header=header, turn_index=1, message=answer),
            TurnInterrupted(header=header, turn_index=2),
        ]
    )
    assert metrics.steps_committed == 1
    assert metrics.terminals == {"TurnDone": 1, "TurnInterrupted": 1}
    metrics.consumer_lag.update({0: 3, 1: 4})
    assert metrics.total_lag == 7
