"""A planned stop (SIGTERM) mid-turn: a continuing agent's turn goes on elsewhere.

Two ``python -m turnstream.loop_actor`` processes (one partition, 6 s session
timeout) host ``tests.support.resume_agents``: its model asks for 5 ``record``
tool steps, then answers. The first actor owns the partition; its ``record``
call of step 3 holds. The test stops the owner with SIGTERM while it holds:

- the drain waits for the current step's commit, not for the whole turn: once
  step 3's call is released, its ``StepDone`` commits and the owner stops
  without ending the turn; the standby resumes it after step 3
  (``TurnResumed{steps 3}``) and runs steps 4 and 5 -- every call ran once,
  none with an unknown outcome;
- a step that does not commit within the drain timeout is left uncommitted:
  the handover ends nothing, the standby resumes after step 2, and step 3's
  call (running at the handover, not idempotent) gets ``outcome unknown``;
- the default agent's turn still ends ``TurnInterrupted`` at the handover.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from uuid import UUID, uuid4

import pytest
from tests.support.actors import ActorFleet, ActorProcess
from tests.support.eventually import assert_eventually
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    check_journal,
    collect_garbage,
    collect_garbage_late,
    read_all,
)
from tests.support.resume_fleet import (
    ResumeTopics,
    held_at_step,
    ledger_column,
    owner_and_standby,
    resume_fleet,
    resume_topics,
    tool_results,
    turn_ended,
)

from turnstream.events import EnduringEvent, TurnDone, TurnInterrupted, TurnResumed
from turnstream.ids import LoopId
from turnstream.runtime.tools import OUTCOME_UNKNOWN

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(300)]

AGENTS = "tests.support.resume_agents"


async def _held_at_step_three(
    fleet: ActorFleet,
    bootstrap: str,
    topics: ResumeTopics,
    agent: str,
    *,
    env: dict[str, str],
    ledger: Path,
) -> tuple[ActorProcess, LoopId, UUID]:
    """Start the 5-step turn on the owner; return once step 3's call holds."""
    owner, _ = await owner_and_standby(fleet, f"{AGENTS}:{agent}", env)
    loop_id = LoopId(uuid4())
    command = await topics.session.submit("go", loop_id=loop_id)
    await held_at_step(fleet, bootstrap, topics.names, loop_id, ledger, step=3)
    return owner, loop_id, command


async def _past_the_drain_timeout(
    bootstrap: str, ledger: Path, stem: str, agent: str
) -> list[EnduringEvent]:
    """SIGTERM the owner while step 3 holds, with a 2 s drain timeout; the loop's
    events once its turn ended elsewhere (the journal checked whole).
    """
    env = {"RESUME_LEDGER_DIR": str(ledger), "RESUME_HOLD_AT": "3"}
    async with (
        resume_topics(bootstrap, stem) as topics,
        resume_fleet(bootstrap, topics.prefix, "--drain-timeout", "2.0") as fleet,
    ):
        owner, loop_id, command = await _held_at_step_three(
            fleet, bootstrap, topics, agent, env=env, ledger=ledger
        )
        assert await fleet.terminate(owner, timeout=90) == 0, fleet.tails(20)
        events = await turn_ended(bootstrap, topics.names, loop_id, fleet)
        await fleet.close()
        check_journal(await read_all(bootstrap, topics.names, 1), [command])
    return events


async def test_drain_commits_the_current_step_and_leaves_the_turn_to_continue(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """SIGTERM waits for step 3's commit only; the standby runs steps 4 and 5."""
    env = {
        "RESUME_LEDGER_DIR": str(tmp_path),
        "RESUME_HOLD_AT": "3",
        "RESUME_RELEASE": "1",
    }
    async with (
        resume_topics(kafka_bootstrap, "resume-drain") as topics,
        resume_fleet(
            kafka_bootstrap, topics.prefix, "--drain-timeout", "60.0"
        ) as fleet,
    ):
        owner, loop_id, command = await _held_at_step_three(
            fleet, kafka_bootstrap, topics, "continuing", env=env, ledger=tmp_path
        )
        stop = asyncio.ensure_future(fleet.terminate(owner, timeout=90))

        async def draining() -> None:
            assert any("draining" in line for line in owner.lines), fleet.tails()

        await assert_eventually(draining, timeout=30, interval=0.1)
        (tmp_path / "release").touch()  # step 3's call returns: it commits
        assert await stop == 0, fleet.tails(20)
        events = await turn_ended(kafka_bootstrap, topics.names, loop_id, fleet)
        await fleet.close()
        check_journal(await read_all(kafka_bootstrap, topics.names, 1), [command])
    names = [e.type_name for e in events]
    assert "TurnInterrupted" not in names, names
    resumed = [e for e in events if isinstance(e, TurnResumed)]
    assert [(r.steps, r.resumes) for r in resumed] == [(3, 1)], names
    at = names.index("TurnResumed")
    assert names[:at].count("StepDone") == 3, names
    assert names[at:].count("StepDone") == 3, names  # 4, 5 and the answer
    assert [type(e) for e in events if e.ends_turn()] == [TurnDone]
    assert ledger_column(tmp_path) == ["1", "2", "3", "4", "5"]
    assert tool_results(events) == [f"recorded {n}" for n in range(1, 6)]


async def test_drain_timeout_hands_a_continuing_turn_over_open(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A step running past the drain timeout is dropped; the turn is not ended."""
    events = await _past_the_drain_timeout(
        kafka_bootstrap, tmp_path, "resume-drain-late", "continuing"
    )
    names = [e.type_name for e in events]
    assert "TurnInterrupted" not in names, names
    resumed = [e for e in events if isinstance(e, TurnResumed)]
    assert [(r.steps, r.resumes) for r in resumed] == [(2, 1)], names
    assert [type(e) for e in events if e.ends_turn()] == [TurnDone]
    assert ledger_column(tmp_path) == ["1", "2", "3", "4", "5"]
    assert tool_results(events) == [
        "recorded 1",
        "recorded 2",
        OUTCOME_UNKNOWN,
        "recorded 4",
        "recorded 5",
    ]


async def test_drain_timeout_still_interrupts_the_default_agent(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The default agent's turn ends ``TurnInterrupted`` at the handover, as before."""
    events = await _past_the_drain_timeout(
        kafka_bootstrap, tmp_path, "resume-drain-default", "interrupting"
    )
    names = [e.type_name for e in events]
    assert "TurnResumed" not in names
    assert names.count("StepDone") == 2
    assert [type(e) for e in events if e.ends_turn()] == [TurnInterrupted]
    assert ledger_column(tmp_path) == ["1", "2", "3"]
