"""Ownership changes without harm, against the real broker.

Loop-actor processes (``turnstream actor run``, default group settings) share
a consumer group while loops run turns back to back:

* kill -9 churn: one actor killed every 3 s and replaced at once; no actor
  ever exits by itself, the journal invariants hold (no duplicate event id,
  one terminal per ``TurnStarted``, contiguous turn indexes, every submit
  answered once) and every interrupt sent while its turn was open ends that
  turn ``TurnInterrupted``. (``bench/churn_bench.py`` runs the same scenario for
  the takeover-time distribution.)
* scale out 2 -> 3, then SIGTERM one: only turns on partitions that changed
  owner may be interrupted; the stop itself drains (interrupts nothing).
* a rolling restart of every actor, one after another, with turns of about
  5 s: not one ``TurnInterrupted``, every submit answered once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from uuid import UUID, uuid4

import pytest
from tests.support.actors import ActorFleet, ActorProcess
from tests.support.churn import run_churn
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

from turnstream.events import RejectReason, TurnInterrupted, TurnRejected, TurnStarted
from turnstream.ids import CommandId, LoopId
from turnstream.kafka.client.session import KafkaSession

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 6
CHURN_SECONDS = float(os.environ.get("TURNSTREAM_CHURN_SECONDS", "60"))


async def test_kill_nine_churn_no_self_exit_and_invariants(
    kafka_bootstrap: str,
) -> None:
    prefix = unique_prefix("churn")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=PARTITIONS)
    try:
        report = await run_churn(
            kafka_bootstrap, prefix, topics, duration=CHURN_SECONDS, loops=24
        )
        assert report.self_exits == [], report.self_exits
        assert report.kills >= CHURN_SECONDS // 3 - 1, report.kills
        entries = await read_all(kafka_bootstrap, topics, PARTITIONS)
        check_journal(entries, report.submitted)
        assert report.interrupted_turns, "no interrupt was sent while a turn ran"
        ended_interrupted = {
            e.event.header.turn_id
            for e in entries
            if isinstance(e.event, TurnInterrupted)
        }
        answered_ended = {
            e.event.reply_to()
            for e in entries
            if isinstance(e.event, TurnRejected)
            and e.event.reason is RejectReason.TURN_ENDED
        }
        # The client sends an interrupt once it sees the turn start, but the
        # actor reads it later (a busy consumer, a takeover): the actor's answer
        # says whether the turn still ran. One it answered turn_ended met an
        # ended turn; every other one must have ended its turn interrupted.
        reached_ended = {
            turn_id
            for command_id, turn_id in report.interrupts.items()
            if command_id in answered_ended
        }
        wrong = {
            t: k
            for t, k in report.interrupted_turns.items()
            if k != "TurnInterrupted" and t not in reached_ended
        }
        assert wrong == {}, f"interrupted turns that did not end interrupted: {wrong}"
        assert ended_interrupted & set(report.interrupts.values()), (
            "no interrupt ended its turn"
        )
        unaccounted = {
            command_id: turn_id
            for command_id, turn_id in report.interrupts.items()
            if turn_id not in ended_interrupted and command_id not in answered_ended
        }
        assert unaccounted == {}, unaccounted
        print(
            f"interrupts: {len(report.interrupts)} sent, "
            f"{len(answered_ended & set(report.interrupts))} answered turn_ended, "
            f"{len(set(report.interrupted_turns) & reached_ended)} of them after "
            "the client saw their turn open"
        )
    finally:
        await delete_topic_set(kafka_bootstrap, prefix)


async def test_a_member_leaving_for_good_hands_its_partitions_over_at_once(
    kafka_bootstrap: str,
) -> None:
    """A static member stopped with ``--leave-on-stop`` leaves the group.

    The others own its partitions within moments of its exit, not after the
    session timeout (8 s by default) a static member's partitions otherwise
    wait for it (a restart in place), and the stop still interrupts no turn.
    """
    prefix = unique_prefix("leave")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=PARTITIONS)
    session = await connect(kafka_bootstrap, topics)
    try:
        async with _fleet(kafka_bootstrap, prefix, chunk_delay=0.1) as fleet:
            staying = [await fleet.spawn(), await fleet.spawn()]
            leaving = await fleet.spawn(env={"TURNSTREAM_LEAVE_ON_STOP": "true"})
            for actor in (*staying, leaving):
                await _ready(actor, fleet)
            await _balanced(fleet, 3)
            load = _Load(session, loops=12, text="add 1 2 3")
            load.start()
            await asyncio.sleep(3)  # turns running everywhere
            stopping = time.monotonic()
            assert await fleet.terminate(leaving) == 0, leaving.lines[-10:]
            exited = time.monotonic()
            await _balanced(fleet, 2)
            # When each staying actor first owned its final share after the
            # stop began (it may be before the exit: the leave comes first).
            took_over = max(
                min(
                    at
                    for at, owned in actor.history
                    if at >= stopping and owned == frozenset(actor.partitions or ())
                )
                for actor in staying
            )
            await asyncio.sleep(2)
            await load.stop()
            fleet.note_exits()
            assert fleet.self_exits == []
        handover = took_over - exited
        print(f"partitions owned again {handover:.2f} s after the exit")
        # Well under the 8 s session timeout the group would otherwise wait.
        assert handover < 4.0, handover
        assert any("left the group" in line for line in leaving.lines), leaving.lines
        entries = await read_all(kafka_bootstrap, topics, PARTITIONS)
        check_journal(entries, load.submitted)
        assert not any(isinstance(e.event, TurnInterrupted) for e in entries)
    finally:
        await session.close()
        await delete_topic_set(kafka_bootstrap, prefix)


# ------------------------------------------------------------------ helpers


class _Load:
    """Loops running one turn after another until stopped."""

    def __init__(self, session: KafkaSession, loops: int, text: str) -> None:
        self.session = session
        self.text = text
        self.loops = [LoopId(uuid4()) for _ in range(loops)]
        self.submitted: list[UUID] = []
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def _run(self, loop_id: LoopId) -> None:
        while not self._stop.is_set():
            command_id = CommandId(uuid4())
            self.submitted.append(command_id)
            async with asyncio.timeout(180):
                await self.session.submit_and_wait(
                    self.text, loop_id=loop_id, no_fold=True, command_id=command_id
                )

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._run(loop)) for loop in self.loops]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)


@contextlib.asynccontextmanager
async def _fleet(
    bootstrap: str, prefix: str, chunk_delay: float
) -> AsyncIterator[ActorFleet]:
    fleet = ActorFleet(
        bootstrap, prefix, extra=("--model", "demo", "--chunk-delay", str(chunk_delay))
    )
    try:
        yield fleet
    finally:
        await fleet.close()


async def _ready(actor: ActorProcess, fleet: ActorFleet) -> None:
    def check() -> None:
        fleet.note_exits()
        assert fleet.self_exits == [], fleet.self_exits
        assert actor.partitions, actor.lines[-5:]

    await assert_eventually(check, timeout=90, message=f"{actor.name} not ready")


async def _balanced(fleet: ActorFleet, members: int) -> None:
    def check() -> None:
        owned = [a.partitions or set() for a in fleet.alive]
        assert len(owned) == members
        assert all(owned), owned
        assert sorted(p for o in owned for p in o) == list(range(PARTITIONS)), owned

    await assert_eventually(check, timeout=90, message="group not balanced")


def _turns(entries: list, session: KafkaSession) -> list[tuple[int, str, float]]:
    """(partition, terminal type, seconds) of every finished turn."""
    started: dict[UUID, TurnStarted] = {}
    out: list[tuple[int, str, float]] = []
    for entry in entries:
        event = entry.event
        if isinstance(event, TurnStarted):
            started[event.header.turn_id] = event
        elif event.ends_turn() and event.header.turn_id in started:
            begin = started[event.header.turn_id].header.created_at
            seconds = (event.header.created_at - begin).total_seconds()
            out.append((session.partition_of(entry.loop_id), event.type_name, seconds))
    return out


async def test_scale_out_then_sigterm_interrupts_only_moved_partitions(
    kafka_bootstrap: str,
) -> None:
    prefix = unique_prefix("scale")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=PARTITIONS)
    session = await connect(kafka_bootstrap, topics)
    try:
        async with _fleet(kafka_bootstrap, prefix, chunk_delay=0.15) as fleet:
            first, second = await fleet.spawn(), await fleet.spawn()
            await _ready(first, fleet)
            await _balanced(fleet, 2)
            before = {p: a.name for a in (first, second) for p in a.partitions or ()}
            load = _Load(session, loops=18, text="add 1 2 3")
            load.start()
            await asyncio.sleep(4)  # turns running everywhere
            third = await fleet.spawn()
            await _ready(third, fleet)
            await _balanced(fleet, 3)
            moved = {p for p in range(PARTITIONS) if p in (third.partitions or ())}
            moved |= {
                p
                for a in (first, second)
                for p in a.partitions or ()
                if before.get(p) != a.name
            }
            await asyncio.sleep(4)
            stop_started = time.monotonic()
            assert await fleet.terminate(second) == 0
            stopped_after = time.monotonic() - stop_started
            await _balanced(fleet, 2)
            await asyncio.sleep(3)
            await load.stop()
            fleet.note_exits()
            assert fleet.self_exits == []
        entries = await read_all(kafka_bootstrap, topics, PARTITIONS)
        check_journal(entries, load.submitted)
        turns = _turns(entries, session)
        interrupted = sorted({p for p, kind, _ in turns if kind == "TurnInterrupted"})
        assert set(interrupted) <= moved, (interrupted, moved)
        assert stopped_after < 45, stopped_after
    finally:
        await session.close()
        await delete_topic_set(kafka_bootstrap, prefix)


async def test_rolling_restart_interrupts_no_turn(kafka_bootstrap: str) -> None:
    prefix = unique_prefix("rolling")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=PARTITIONS)
    session = await connect(kafka_bootstrap, topics)
    try:
        async with _fleet(kafka_bootstrap, prefix, chunk_delay=0.25) as fleet:
            for _ in range(2):
                await _ready(await fleet.spawn(), fleet)
            await _balanced(fleet, 2)
            load = _Load(session, loops=12, text="add 1 2 3")
            load.start()
            await asyncio.sleep(6)
            for actor in list(fleet.alive):
                assert await fleet.terminate(actor) == 0, actor.lines[-10:]
                replacement = await fleet.spawn()
                await _ready(replacement, fleet)
                await _balanced(fleet, 2)
                await asyncio.sleep(3)
            await load.stop()
            fleet.note_exits()
            assert fleet.self_exits == []
        entries = await read_all(kafka_bootstrap, topics, PARTITIONS)
        check_journal(entries, load.submitted)
        turns = _turns(entries, session)
        kinds = sorted({kind for _, kind, _ in turns})
        assert kinds == ["TurnDone"], kinds
        assert not any(isinstance(e.event, TurnInterrupted) for e in entries)
        durations = sorted(s for _, _, s in turns)
        assert durations[len(durations) // 2] >= 3.0, durations[:5]
    finally:
        await session.close()
        await delete_topic_set(kafka_bootstrap, prefix)
