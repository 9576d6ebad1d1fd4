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
    StepDone,
    TurnDone,
    TurnInterrupted,
    TurnResumed,
)
from turnstream.ids import LoopId
from turnstream.kafka.topology import TopicNames
from turnstream.runtime.tools import OUTCOME_UNKNOWN

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(300)]

AGENTS = "tests.support.resume_agents"


@contextlib.asynccontextmanager
async def _fleet(
    bootstrap: str, prefix: str, drain_timeout: float
) -> AsyncIterator[ActorFleet]:
    fleet = ActorFleet(
        bootstrap,
        prefix,
        extra=(
            "--session-timeout-ms",
            "6000",
            "--commit-deadline",
            "20",
            "--drain-timeout",
            str(drain_timeout),
        ),
    )
    try:
        yield fleet
    finally:
        await fleet.close()


async def _owner_and_standby(
    fleet: ActorFleet, agent: str, env: dict[str, str]
) -> tuple[ActorProcess, ActorProcess]:
    first = await fleet.spawn("--agent", f"{AGENTS}:{agent}", env=env)

    async def ready() -> None:
        assert first.partitions == {0}, fleet.tails()

    await assert_eventually(ready, timeout=90, message="first actor not ready")
    second = await fleet.spawn("--agent", f"{AGENTS}:{agent}", env=env)

    async def joined() -> None:
        fleet.note_exits()
        assert fleet.self_exits == [], fleet.self_exits
        assert second.partitions == set(), fleet.tails()
        assert first.partitions == {0}, fleet.tails()

    await assert_eventually(
        joined, timeout=90, message="the second actor never joined the group"
    )
    return first, second


async def _loop_events(
    bootstrap: str, topics: TopicNames, loop_id: UUID
) -> list[EnduringEvent]:
    entries = await read_all(bootstrap, topics, 1)
    return [e.event for e in entries if e.loop_id == loop_id]


async def _held_at_step_three(
    fleet: ActorFleet, bootstrap: str, topics: TopicNames, loop_id: UUID, ledger: Path
) -> None:
    async def held() -> None:
        assert (ledger / "held").exists(), fleet.tails()
        events = await _loop_events(bootstrap, topics, loop_id)
        assert sum(isinstance(e, StepDone) for e in events) == 2

    await assert_eventually(held, timeout=60, interval=0.2, message="step 3 not held")


async def _ended(
    bootstrap: str, topics: TopicNames, loop_id: UUID, fleet: ActorFleet
) -> list[EnduringEvent]:
    async def ended() -> list[EnduringEvent]:
        events = await _loop_events(bootstrap, topics, loop_id)
        assert any(e.ends_turn() for e in events), fleet.tails()
        return events

    return await assert_eventually(
        ended, timeout=120, interval=0.5, message="the stopped turn never ended"
    )


def _ledger(ledger: Path) -> list[str]:
    return [line.split()[0] for line in (ledger / "ledger").read_text().splitlines()]


def _results(events: list[EnduringEvent]) -> list[str]:
    return [
        text_of(m.blocks)
        for e in events
        if isinstance(e, StepDone)
        for m in e.messages[1:]
        if isinstance(m, ToolResultMessage)
    ]


async def test_drain_commits_the_current_step_and_leaves_the_turn_to_continue(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """SIGTERM waits for step 3's commit only; the standby runs steps 4 and 5."""
    prefix = unique_prefix("resume-drain")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    session = await connect(kafka_bootstrap, topics)
    env = {
        "RESUME_LEDGER_DIR": str(tmp_path),
        "RESUME_HOLD_AT": "3",
        "RESUME_RELEASE": "1",
    }
    try:
        async with _fleet(kafka_bootstrap, prefix, 60.0) as fleet:
            owner, _ = await _owner_and_standby(fleet, "continuing", env)
            loop_id = LoopId(uuid4())
            command = await session.submit("go", loop_id=loop_id)
            await _held_at_step_three(fleet, kafka_bootstrap, topics, loop_id, tmp_path)
            stop = asyncio.ensure_future(fleet.terminate(owner, timeout=90))

            async def draining() -> None:
                assert any("draining" in line for line in owner.lines), fleet.tails()

            await assert_eventually(draining, timeout=30, interval=0.1)
            (tmp_path / "release").touch()  # step 3's call returns: it commits
            assert await stop == 0, fleet.tails(20)
            events = await _ended(kafka_bootstrap, topics, loop_id, fleet)
        check_journal(await read_all(kafka_bootstrap, topics, 1), [command])
        names = [e.type_name for e in events]
        assert "TurnInterrupted" not in names, names
        resumed = [e for e in events if isinstance(e, TurnResumed)]
        assert [(r.steps, r.resumes) for r in resumed] == [(3, 1)], names
        at = names.index("TurnResumed")
        assert names[:at].count("StepDone") == 3, names
        assert names[at:].count("StepDone") == 3, names  # 4, 5 and the answer
        assert [type(e) for e in events if e.ends_turn()] == [TurnDone]
        assert _ledger(tmp_path) == ["1", "2", "3", "4", "5"]
        assert _results(events) == [f"recorded {n}" for n in range(1, 6)]
    finally:
        await session.close()
        await delete_topic_set(kafka_bootstrap, prefix)


async def test_drain_timeout_hands_a_continuing_turn_over_open(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A step running past the drain timeout is dropped; the turn is not ended."""
    prefix = unique_prefix("resume-drain-late")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    session = await connect(kafka_bootstrap, topics)
    env = {"RESUME_LEDGER_DIR": str(tmp_path), "RESUME_HOLD_AT": "3"}
    try:
        async with _fleet(kafka_bootstrap, prefix, 2.0) as fleet:
            owner, _ = await _owner_and_standby(fleet, "continuing", env)
            loop_id = LoopId(uuid4())
            command = await session.submit("go", loop_id=loop_id)
            await _held_at_step_three(fleet, kafka_bootstrap, topics, loop_id, tmp_path)
            assert await fleet.terminate(owner, timeout=90) == 0, fleet.tails(20)
            events = await _ended(kafka_bootstrap, topics, loop_id, fleet)
        check_journal(await read_all(kafka_bootstrap, topics, 1), [command])
        names = [e.type_name for e in events]
        assert "TurnInterrupted" not in names, names
        resumed = [e for e in events if isinstance(e, TurnResumed)]
        assert [(r.steps, r.resumes) for r in resumed] == [(2, 1)], names
        assert [type(e) for e in events if e.ends_turn()] == [TurnDone]
        assert _ledger(tmp_path) == ["1", "2", "3", "4", "5"]
        assert _results(events) == [
            "recorded 1",
            "recorded 2",
            OUTCOME_UNKNOWN,
            "recorded 4",
            "recorded 5",
        ]
    finally:
        await session.close()
        await delete_topic_set(kafka_bootstrap, prefix)


async def test_drain_timeout_still_interrupts_the_default_agent(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The default agent's turn ends ``TurnInterrupted`` at the handover, as before."""
    prefix = unique_prefix("resume-drain-default")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    session = await connect(kafka_bootstrap, topics)
    env = {"RESUME_LEDGER_DIR": str(tmp_path), "RESUME_HOLD_AT": "3"}
    try:
        async with _fleet(kafka_bootstrap, prefix, 2.0) as fleet:
            owner, _ = await _owner_and_standby(fleet, "interrupting", env)
            loop_id = LoopId(uuid4())
            command = await session.submit("go", loop_id=loop_id)
            await _held_at_step_three(fleet, kafka_bootstrap, topics, loop_id, tmp_path)
            assert await fleet.terminate(owner, timeout=90) == 0, fleet.tails(20)
            events = await _ended(kafka_bootstrap, topics, loop_id, fleet)
        check_journal(await read_all(kafka_bootstrap, topics, 1), [command])
        names = [e.type_name for e in events]
        assert "TurnResumed" not in names
        assert names.count("StepDone") == 2
        assert [type(e) for e in events if e.ends_turn()] == [TurnInterrupted]
        assert _ledger(tmp_path) == ["1", "2", "3"]
    finally:
        await session.close()
        await delete_topic_set(kafka_bootstrap, prefix)
