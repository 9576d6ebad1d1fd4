"""Tool side effects of continuing turns under kill -9 churn, on the real broker.

Three loop-actor processes host ``tests.support.ledger_agents:ledger``
(``on_restore="continue"``): 20 loops run 4-step tool turns back to back
(an idempotent ``refund`` applied once per idempotency key, a non-idempotent
``notify``), while one actor is killed with SIGKILL every 3 s for 20 s and
replaced at once. The ledger the tools write outside the actors and the
journal must show no refund applied twice, no notify run twice, each unknown
outcome reported to the model once, every turn ``TurnDone`` and every submit
answered once. Every call also stages a Kafka record: the effect topic must
hold, ``read_committed``, exactly one per committed call that ran and none
other. ``bench/resume_churn_bench.py`` runs the same at full size.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    apply_topic_set,
    collect_garbage,
    collect_garbage_late,
    delete_topic_set,
    unique_prefix,
)
from tests.support.ledger_churn import run_ledger_churn

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(240)]

PARTITIONS = 6


async def test_continuing_turns_under_kill_nine_churn_apply_each_effect_once(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Kill -9 every 3 s: 0 duplicate effects, 0 re-runs, 0 turns lost."""
    prefix = unique_prefix("ledger-churn")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=PARTITIONS)
    try:
        report = await run_ledger_churn(
            kafka_bootstrap,
            prefix,
            topics,
            ledger_path=tmp_path / "ledger.sqlite",
            duration=20,
            partitions=PARTITIONS,
            loops=20,
            settle=90,
            kafka_effects=True,
        )
    finally:
        await delete_topic_set(kafka_bootstrap, prefix)
    assert report.journal_invariants == "ok"
    assert report.zero_counts() == dict.fromkeys(report.zero_counts(), 0), report
    assert report.kills >= 5
    assert report.terminals == {"TurnDone": report.turns}
    assert report.turns == report.submits
    # Every logical call left one effect: refunds once per call, whatever ran.
    assert report.refund_effects == report.refund_calls == 2 * report.turns
    assert report.notify_runs == report.notify_calls
    assert report.kafka_effects_checked
    assert report.kafka_effects == 4 * report.turns - report.unknown_reported
