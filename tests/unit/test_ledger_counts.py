"""The side-effect ledger's counts (tests/support/ledger_churn.py), without a broker.

The churn test and benchmark report 0s only if these counts see what they
count: a refund applied twice, a notify run twice, an unknown outcome reported
twice or for an idempotent tool, a call not committed once, an effect without
a committed step. Each is made to happen here through the agent's own tools.
"""

from __future__ import annotations

import json
from pathlib import Path
from uuid import uuid4

import pytest
from tests.support.ledger_agents import Ledger, _notify, _refund
from tests.support.ledger_churn import LedgerReport, _count

from turnstream.ids import LoopId, SessionId, StepId, ToolExecutionId, TurnId
from turnstream.runtime import ToolContext
from turnstream.runtime.tools import OUTCOME_UNKNOWN


def _ctx(key: str) -> ToolContext:
    return ToolContext(
        session_id=SessionId(uuid4()),
        loop_id=LoopId(uuid4()),
        turn_id=TurnId(uuid4()),
        step_id=StepId(uuid4()),
        tool_execution_id=ToolExecutionId(uuid4()),
        tool_use_id="call_1",
        idempotency_key=key,
    )


def _call(input_id: str, step: int) -> str:
    return json.dumps({"input": input_id, "step": step})


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    path = tmp_path / "ledger.sqlite"
    monkeypatch.setenv("LEDGER_DB", str(path))
    monkeypatch.setenv("LEDGER_TOOL_DELAY", "0")
    return Ledger(path)


async def test_ledger_counts_a_clean_turn_as_zeros(ledger: Ledger) -> None:
    """Each call run once, each result committed once: every count is 0."""
    for step, tool in enumerate((_refund, _notify, _refund, _notify), start=1):
        await tool(_call("a", step), _ctx(f"t:{step}"))
    report = LedgerReport()
    results = {("a", s): [r] for s, r in enumerate(["refunded", "notified"] * 2, 1)}
    _count(results, ledger, report)
    assert report.zero_counts() == dict.fromkeys(report.zero_counts(), 0)
    assert (report.refund_effects, report.notify_runs) == (2, 2)


async def test_ledger_applies_a_key_once_and_counts_a_second_key(
    ledger: Ledger,
) -> None:
    """Same key again: one effect, a run again; another key: a duplicate."""
    await _refund(_call("a", 1), _ctx("k1"))
    await _refund(_call("a", 1), _ctx("k1"))
    await _refund(_call("b", 1), _ctx("k2"))
    await _refund(_call("b", 1), _ctx("k3"))
    report = LedgerReport()
    _count({("a", 1): ["refunded"], ("b", 1): ["refunded"]}, ledger, report)
    assert report.refund_effects == 3
    assert report.refunds_run_again_with_key == 2
    assert report.duplicate_refunds == 1


async def test_ledger_counts_notify_reruns_and_unknown_outcomes(
    ledger: Ledger,
) -> None:
    """A notify run twice; unknown twice; unknown for a refund; gaps; orphans."""
    await _notify(_call("a", 2), _ctx("k1"))
    await _notify(_call("a", 2), _ctx("k1"))
    await _notify(_call("c", 2), _ctx("k9"))  # no committed step has it
    results = {
        ("a", 1): [OUTCOME_UNKNOWN],
        ("a", 2): [OUTCOME_UNKNOWN, OUTCOME_UNKNOWN],
        ("a", 3): ["refunded"],
    }
    report = LedgerReport()
    _count(results, ledger, report)
    assert report.notify_reruns == 1  # ("a", 2) ran once more
    assert report.unknown_reported_twice == 1
    assert report.unknown_for_idempotent == 1
    assert report.calls_not_committed_once == 2  # ("a", 2) twice, ("a", 4) never
    assert report.effects_without_step == 1
