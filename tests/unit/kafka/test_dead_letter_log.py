"""Dead letters are logged one line each, rate-limited, without content."""

from __future__ import annotations

import logging

import pytest

from turnstream.kafka.actor.poison import DeadLetterLog
from turnstream.kafka.records import DeadLetterKind


def test_dead_letter_log_is_a_burst_then_one_line_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Past the burst, lines wait for the next interval and say how many were held."""
    now = [0.0]
    log = DeadLetterLog(burst=2, interval=10.0, clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger="turnstream.kafka.actor.poison")
    for offset in range(5):
        log.note(topic="t", partition=1, offset=offset, kind=DeadLetterKind.MISROUTED)
    now[0] = 10.0
    log.note(topic="t", partition=1, offset=5, kind=DeadLetterKind.UNDECODABLE)
    lines = [
        (r.offset, r.reason, getattr(r, "suppressed", 0))  # type: ignore[attr-defined]
        for r in caplog.records
    ]
    assert lines == [(0, "misrouted", 0), (1, "misrouted", 0), (5, "undecodable", 3)]
    assert {r.getMessage() for r in caplog.records} == {"record dead-lettered"}
