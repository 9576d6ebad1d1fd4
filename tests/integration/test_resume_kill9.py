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

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from uuid import UUID, uuid4

import pytest
from tests.support.actors import ActorFleet, ActorProcess
from tests.support.eventually import assert_eventually
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    apply_topic_set,
    check_journal,
    collect_garbage,
    collect_garbage_late,
    connect,
    delete_topic_set,
    read_all,
    unique_prefix,
)

from turnstream.content import ToolResultMessage, text_of
from turnstream.events import (
    EnduringEvent,
    GateOpened,
    GateResolved,
    StepDone,
    TurnDone,
    TurnInterrupted,
    TurnResumed,
    TurnStarted,
)
from turnstream.ids import GateId, LoopId
from turnstream.kafka.client.session import KafkaSession
from turnstream.kafka.topology import TopicNames
from turnstream.runtime.tools import OUTCOME_UNKNOWN

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(300)]

AGENTS = "tests.support.resume_agents"


@contextlib.asynccontextmanager
async def _fleet(bootstrap: str, prefix: str) -> AsyncIterator[ActorFleet]:
    fleet = ActorFleet(
        bootstrap,
        prefix,
        extra=("--session-timeout-ms", "6000", "--commit-deadline", "20"),
    )
    try:
        yield fleet
    finally:
        await fleet.close()


async def _owner_and_standby(
    fleet: ActorFleet, agent: str, ledger: Path
) -> tuple[ActorProcess, ActorProcess]:
    """Two actors of one group: the one that owns the partition, and the other."""
    env = {"RESUME_LEDGER_DIR": str(ledger), "RESUME_HOLD_AT": "3"}
    first = await fleet.spawn("--agent", f"{AGENTS}:{agent}", env=env)

    async def ready() -> None:
        assert first.partitions == {0}, fleet.tails()

    await assert_eventually(ready, timeout=90, message="first actor not ready")
    second = await fleet.spawn("--agent", f"{AGENTS}:{agent}", env=env)

    async def split() -> tuple[ActorProcess, ActorProcess]:
        fleet.note_exits()
        assert fleet.self_exits == [], fleet.self_exits
        owned = sorted(
            (first, second), key=lambda a: a.partitions is None or not a.partitions
        )
        assert [a.partitions for a in owned] == [{0}, set()], fleet.tails()
        return owned[0], owned[1]

    return await assert_eventually(
        split, timeout=90, message="the second actor never joined the group"
    )


async def _loop_events(
    bootstrap: str, topics: TopicNames, loop_id: UUID
) -> list[EnduringEvent]:
    entries = await read_all(bootstrap, topics, 1)
    return [e.event for e in entries if e.loop_id == loop_id]


async def _crash_mid_step_three(
    fleet: ActorFleet,
    session: KafkaSession,
    *,
    bootstrap: str,
    topics: TopicNames,
    agent: str,
    ledger: Path,
) -> tuple[ActorProcess, LoopId, UUID]:
    """Start the 5-step turn; kill -9 its owner while step 3's call holds."""
    owner, standby = await _owner_and_standby(fleet, agent, ledger)
    loop_id = LoopId(uuid4())
    command = await session.submit("go", loop_id=loop_id)

    async def held() -> None:
        assert (ledger / "held").exists(), fleet.tails()
        steps = [
            e
            for e in await _loop_events(bootstrap, topics, loop_id)
            if isinstance(e, StepDone)
        ]
        assert len(steps) == 2

    await assert_eventually(held, timeout=60, interval=0.2, message="step 3 not held")
    await fleet.kill(owner)  # SIGKILL while step 3 runs: nothing of it committed
    return standby, loop_id, command


async def _ended(
    bootstrap: str, topics: TopicNames, loop_id: UUID, fleet: ActorFleet
) -> list[EnduringEvent]:
    async def ended() -> list[EnduringEvent]:
        events = await _loop_events(bootstrap, topics, loop_id)
        assert any(e.ends_turn() for e in events), fleet.tails()
        return events

    return await assert_eventually(
        ended, timeout=120, interval=0.5, message="the crashed turn never ended"
    )


def _ledger(ledger: Path) -> list[str]:
    """What ran, in order: each step's ``n`` (or ``confirm``)."""
    return [line.split()[0] for line in (ledger / "ledger").read_text().splitlines()]


def _keys(ledger: Path) -> list[str]:
    """The idempotency key of each ``record`` run, in order."""
    return [line.split()[1] for line in (ledger / "ledger").read_text().splitlines()]


async def test_continuing_agent_finishes_the_turn_after_kill_nine(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = unique_prefix("resume")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    session = await connect(kafka_bootstrap, topics)
    try:
        async with _fleet(kafka_bootstrap, prefix) as fleet:
            standby, loop_id, command = await _crash_mid_step_three(
                fleet,
                session,
                bootstrap=kafka_bootstrap,
                topics=topics,
                agent="continuing",
                ledger=tmp_path,
            )
            events = await _ended(kafka_bootstrap, topics, loop_id, fleet)
            assert standby.partitions == {0}
        check_journal(await read_all(kafka_bootstrap, topics, 1), [command])
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
        assert _ledger(tmp_path) == ["1", "2", "3", "4", "5"]
        results = [
            text_of(m.blocks)
            for e in events
            if isinstance(e, StepDone)
            for m in e.messages[1:]
            if isinstance(m, ToolResultMessage)
        ]
        assert results == [
            "recorded 1",
            "recorded 2",
            OUTCOME_UNKNOWN,
            "recorded 4",
            "recorded 5",
        ]
    finally:
        await session.close()
        await delete_topic_set(kafka_bootstrap, prefix)


async def test_idempotent_call_runs_again_with_its_key_after_kill_nine(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = unique_prefix("resume-key")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    session = await connect(kafka_bootstrap, topics)
    try:
        async with _fleet(kafka_bootstrap, prefix) as fleet:
            _, loop_id, command = await _crash_mid_step_three(
                fleet,
                session,
                bootstrap=kafka_bootstrap,
                topics=topics,
                agent="continuing_idempotent",
                ledger=tmp_path,
            )
            events = await _ended(kafka_bootstrap, topics, loop_id, fleet)
        check_journal(await read_all(kafka_bootstrap, topics, 1), [command])
        ended = [e for e in events if e.ends_turn()]
        assert [type(e) for e in ended] == [TurnDone]
        # Step 3's call ran again, with the key of its first attempt.
        assert _ledger(tmp_path) == ["1", "2", "3", "3", "4", "5"]
        keys = _keys(tmp_path)
        assert keys[2] == keys[3]
        assert len(set(keys)) == 5
        turn_id = ended[0].header.turn_id
        assert keys[2] == f"{turn_id}:2:record:0"
    finally:
        await session.close()
        await delete_topic_set(kafka_bootstrap, prefix)


async def test_default_agent_still_interrupts_after_kill_nine(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = unique_prefix("resume-default")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    session = await connect(kafka_bootstrap, topics)
    try:
        async with _fleet(kafka_bootstrap, prefix) as fleet:
            _, loop_id, command = await _crash_mid_step_three(
                fleet,
                session,
                bootstrap=kafka_bootstrap,
                topics=topics,
                agent="interrupting",
                ledger=tmp_path,
            )
            events = await _ended(kafka_bootstrap, topics, loop_id, fleet)
        check_journal(await read_all(kafka_bootstrap, topics, 1), [command])
        names = [e.type_name for e in events]
        assert "TurnResumed" not in names
        assert names.count("StepDone") == 2
        assert isinstance(events[-1], TurnInterrupted), names
        assert _ledger(tmp_path) == ["1", "2", "3"]
    finally:
        await session.close()
        await delete_topic_set(kafka_bootstrap, prefix)


async def test_gate_open_at_kill_nine_is_answerable_after_it(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = unique_prefix("resume-gate")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    session = await connect(kafka_bootstrap, topics)
    try:
        async with _fleet(kafka_bootstrap, prefix) as fleet:
            owner, standby = await _owner_and_standby(fleet, "continuing", tmp_path)
            loop_id = LoopId(uuid4())
            command = await session.submit("gate", loop_id=loop_id)

            async def gate_open() -> GateOpened:
                events = await _loop_events(kafka_bootstrap, topics, loop_id)
                opened = [e for e in events if isinstance(e, GateOpened)]
                assert opened, fleet.tails()
                return opened[0]

            opened = await assert_eventually(gate_open, timeout=60, interval=0.2)
            await fleet.kill(owner)  # the turn waits on its gate: held, not raced

            async def resumed() -> None:
                events = await _loop_events(kafka_bootstrap, topics, loop_id)
                assert any(isinstance(e, TurnResumed) for e in events), fleet.tails()
                assert standby.partitions == {0}

            await assert_eventually(resumed, timeout=90, interval=0.5)
            await session.respond_gate(
                GateId(opened.gate_id), "approve", loop_id=loop_id
            )
            events = await _ended(kafka_bootstrap, topics, loop_id, fleet)
        check_journal(await read_all(kafka_bootstrap, topics, 1), [command])
        names = [e.type_name for e in events]
        assert names.count("GateOpened") == 1, names  # no second gate
        resolved = [e for e in events if isinstance(e, GateResolved)]
        assert [(r.gate_id, r.reason.value, r.action) for r in resolved] == [
            (opened.gate_id, "answered", "approve")
        ]
        ended = [e for e in events if e.ends_turn()]
        assert [type(e) for e in ended] == [TurnDone], names
        assert _ledger(tmp_path) == ["confirm"]
        assert [type(e) for e in events if isinstance(e, TurnStarted)] == [TurnStarted]
    finally:
        await session.close()
        await delete_topic_set(kafka_bootstrap, prefix)
