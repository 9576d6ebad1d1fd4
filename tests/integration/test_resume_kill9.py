"""kill -9 of a loop-actor process mid-turn: a continuing agent's turn goes on.

Two ``python -m turnstream.loop_actor`` processes (one partition, 6 s session
timeout) host ``tests.support.resume_agents``: its model asks for 5 ``record``
tool steps, one per step, then answers. The first actor owns the partition; its
``record`` call of step 3 holds (steps 1 and 2 committed, step 3 not) and the
test kills it with SIGKILL while it holds. The standby takes the partition over
and restores the loop:

- ``on_restore="continue"``: ``TurnResumed{steps 2}``, then steps 3-5 and the
  answer, ``TurnDone`` with 5 tool steps; steps 1 and 2 never run again, and
  step 3's call (approved, running at the kill) is not run again either: the
  model gets ``outcome unknown`` as its result -- unless its tool is
  idempotent, when it runs again with the same idempotency key;
- the default agent: ``TurnInterrupted``, exactly as before;
- a gate open at the crash: still answerable after it, and its answer runs the
  call.

The ledger the tool writes lives outside the actors, so it shows what ran.
"""

from __future__ import annotations

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
    loop_events,
    owner_and_standby,
    resume_fleet,
    resume_topics,
    tool_results,
    turn_ended,
)

from turnstream.events import (
    GateOpened,
    GateResolved,
    StepDone,
    TurnDone,
    TurnInterrupted,
    TurnResumed,
    TurnStarted,
)
from turnstream.ids import GateId, LoopId
from turnstream.runtime.tools import OUTCOME_UNKNOWN

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(300)]

AGENTS = "tests.support.resume_agents"


def _env(ledger: Path) -> dict[str, str]:
    return {"RESUME_LEDGER_DIR": str(ledger), "RESUME_HOLD_AT": "3"}


async def _crash_mid_step_three(
    fleet: ActorFleet, bootstrap: str, topics: ResumeTopics, agent: str, ledger: Path
) -> tuple[ActorProcess, LoopId, UUID]:
    """Start the 5-step turn; kill -9 its owner while step 3's call holds."""
    owner, standby = await owner_and_standby(fleet, f"{AGENTS}:{agent}", _env(ledger))
    loop_id = LoopId(uuid4())
    command = await topics.session.submit("go", loop_id=loop_id)
    await held_at_step(fleet, bootstrap, topics.names, loop_id, ledger, step=3)
    await fleet.kill(owner)  # SIGKILL while step 3 runs: nothing of it committed
    return standby, loop_id, command


async def test_continuing_agent_finishes_the_turn_after_kill_nine(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    async with (
        resume_topics(kafka_bootstrap, "resume") as topics,
        resume_fleet(kafka_bootstrap, topics.prefix) as fleet,
    ):
        standby, loop_id, command = await _crash_mid_step_three(
            fleet, kafka_bootstrap, topics, "continuing", tmp_path
        )
        events = await turn_ended(kafka_bootstrap, topics.names, loop_id, fleet)
        assert standby.partitions == {0}
        await fleet.close()
        check_journal(await read_all(kafka_bootstrap, topics.names, 1), [command])
    names = [e.type_name for e in events]
    assert names.count("TurnStarted") == 1
    resumed = [e for e in events if isinstance(e, TurnResumed)]
    assert [(r.steps, r.resumes, r.reason) for r in resumed] == [
        (2, 1, "owner_restored")
    ]
    # Two steps before the crash, TurnResumed, four after (3, 4, 5, answer).
    at = names.index("TurnResumed")
    assert names[:at].count("StepDone") == 2
    assert names[at:].count("StepDone") == 4
    assert "TurnInterrupted" not in names
    done = events[-2] if names[-1] == "LoopIdle" else events[-1]
    assert isinstance(done, TurnDone), names
    calls = [
        use.input
        for e in events
        if isinstance(e, StepDone)
        for use in e.ai_message.tool_uses()
    ]
    assert calls == [f'{{"n": {n}}}' for n in range(1, 6)]
    # Every step's call ran once: step 3's was approved and running at the
    # kill, so its outcome is unknown and it is not run again; the model
    # got that as its result.
    assert ledger_column(tmp_path) == ["1", "2", "3", "4", "5"]
    assert tool_results(events) == [
        "recorded 1",
        "recorded 2",
        OUTCOME_UNKNOWN,
        "recorded 4",
        "recorded 5",
    ]


async def test_idempotent_call_runs_again_with_its_key_after_kill_nine(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    async with (
        resume_topics(kafka_bootstrap, "resume-key") as topics,
        resume_fleet(kafka_bootstrap, topics.prefix) as fleet,
    ):
        _, loop_id, command = await _crash_mid_step_three(
            fleet, kafka_bootstrap, topics, "continuing_idempotent", tmp_path
        )
        events = await turn_ended(kafka_bootstrap, topics.names, loop_id, fleet)
        await fleet.close()
        check_journal(await read_all(kafka_bootstrap, topics.names, 1), [command])
    ended = [e for e in events if e.ends_turn()]
    assert [type(e) for e in ended] == [TurnDone]
    # Step 3's call ran again, with the key of its first attempt.
    assert ledger_column(tmp_path) == ["1", "2", "3", "3", "4", "5"]
    keys = ledger_column(tmp_path, 1)
    assert keys[2] == keys[3]
    assert len(set(keys)) == 5
    turn_id = ended[0].header.turn_id
    assert keys[2] == f"{turn_id}:2:record:0"


async def test_default_agent_still_interrupts_after_kill_nine(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    async with (
        resume_topics(kafka_bootstrap, "resume-default") as topics,
        resume_fleet(kafka_bootstrap, topics.prefix) as fleet,
    ):
        _, loop_id, command = await _crash_mid_step_three(
            fleet, kafka_bootstrap, topics, "interrupting", tmp_path
        )
        events = await turn_ended(kafka_bootstrap, topics.names, loop_id, fleet)
        await fleet.close()
        check_journal(await read_all(kafka_bootstrap, topics.names, 1), [command])
    names = [e.type_name for e in events]
    assert "TurnResumed" not in names
    assert names.count("StepDone") == 2
    assert isinstance(events[-1], TurnInterrupted), names
    assert ledger_column(tmp_path) == ["1", "2", "3"]


async def test_gate_open_at_kill_nine_is_answerable_after_it(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    async with (
        resume_topics(kafka_bootstrap, "resume-gate") as topics,
        resume_fleet(kafka_bootstrap, topics.prefix) as fleet,
    ):
        owner, standby = await owner_and_standby(
            fleet, f"{AGENTS}:continuing", _env(tmp_path)
        )
        loop_id = LoopId(uuid4())
        command = await topics.session.submit("gate", loop_id=loop_id)

        async def gate_open() -> GateOpened:
            events = await loop_events(kafka_bootstrap, topics.names, loop_id)
            opened = [e for e in events if isinstance(e, GateOpened)]
            assert opened, fleet.tails()
            return opened[0]

        opened = await assert_eventually(gate_open, timeout=60, interval=0.2)
        await fleet.kill(owner)  # the turn waits on its gate: held, not raced

        async def resumed() -> None:
            events = await loop_events(kafka_bootstrap, topics.names, loop_id)
            assert any(isinstance(e, TurnResumed) for e in events), fleet.tails()
            assert standby.partitions == {0}

        await assert_eventually(resumed, timeout=90, interval=0.5)
        await topics.session.respond_gate(
            GateId(opened.gate_id), "approve", loop_id=loop_id
        )
        events = await turn_ended(kafka_bootstrap, topics.names, loop_id, fleet)
        await fleet.close()
        check_journal(await read_all(kafka_bootstrap, topics.names, 1), [command])
    names = [e.type_name for e in events]
    assert names.count("GateOpened") == 1, names  # no second gate
    resolved = [e for e in events if isinstance(e, GateResolved)]
    assert [(r.gate_id, r.reason.value, r.action) for r in resolved] == [
        (opened.gate_id, "answered", "approve")
    ]
    ended = [e for e in events if e.ends_turn()]
    assert [type(e) for e in ended] == [TurnDone], names
    assert ledger_column(tmp_path) == ["confirm"]
    assert [type(e) for e in events if isinstance(e, TurnStarted)] == [TurnStarted]
