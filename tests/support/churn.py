"""Kill -9 churn under load: the scenario shared by a test and a benchmark.

:func:`run_churn` keeps ``actors`` loop-actor processes running while it kills
one with SIGKILL every ``kill_every`` seconds and starts a replacement at once
(as a supervisor would). Meanwhile every loop runs turns back to back; every
``interrupt_every``-th turn is interrupted as soon as the client sees it start,
by an interrupt naming that turn, so one read late (after a takeover, or once a
later turn runs) cancels nothing else (an interrupt sent after the turn's
terminal was written counts as late, not as sent while the turn was open). The
report has what the test asserts (no actor left by itself, every submit, the
interrupts and how their turns ended) and what the benchmark prints (the
takeover times: from a kill to the next event committed on each partition the
victim owned).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID, uuid4

from tests.support.actors import ActorFleet, ActorProcess
from tests.support.kafka_harness import connect

from turnstream.commands import Interrupt
from turnstream.events import Agency, TokenDelta, TurnStarted
from turnstream.ids import CommandId, LoopId
from turnstream.kafka.client.session import KafkaSession
from turnstream.kafka.topology import TopicNames

__all__ = ["ChurnReport", "Kill", "kill_on_schedule", "run_churn", "start_fleet"]

Kill = tuple[float, frozenset[int]]
"""One kill: its wall time and the partitions its victim owned."""


async def start_fleet(
    fleet: ActorFleet,
    actors: int,
    spawn: Callable[[], Awaitable[ActorProcess]] | None = None,
    *,
    timeout: float = 90,
) -> None:
    """Start ``actors`` actors; return once one of them owns a partition."""
    for _ in range(actors):
        await (spawn or fleet.spawn)()
    deadline = time.monotonic() + timeout
    while sum(len(a.partitions or ()) for a in fleet.alive) == 0:
        if time.monotonic() > deadline:
            raise AssertionError("no actor became ready")
        await asyncio.sleep(0.2)


async def kill_on_schedule(
    fleet: ActorFleet,
    *,
    duration: float,
    kill_every: float,
    rng: random.Random,
    spawn: Callable[[], Awaitable[ActorProcess]] | None = None,
) -> list[Kill]:
    """For ``duration`` seconds, SIGKILL a random live actor every ``kill_every``.

    Each kill is followed at once by a replacement (``spawn``, default
    ``fleet.spawn()``), as a supervisor would start one. Kills keep to a fixed
    schedule: a slow kill or spawn on a loaded machine must not thin the churn
    out. Returns the kills in order.
    """
    kills: list[Kill] = []
    start = time.monotonic()
    end = start + duration
    next_kill = start
    while time.monotonic() < end:
        next_kill += kill_every
        await asyncio.sleep(max(next_kill - time.monotonic(), 0))
        fleet.note_exits()
        candidates = fleet.alive
        if not candidates:
            break
        victim = rng.choice(candidates)
        kills.append((time.time(), frozenset(victim.partitions or ())))
        await fleet.kill(victim)
        await (spawn or fleet.spawn)()
    fleet.note_exits()
    return kills


@dataclass
class ChurnReport:
    """What one churn run saw."""

    submitted: list[UUID] = field(default_factory=list)
    unanswered_waits: int = 0
    self_exits: list[tuple[str, int | None, list[str]]] = field(default_factory=list)
    kills: int = 0
    takeovers: list[float] = field(default_factory=list)
    untaken: int = 0
    interrupted_turns: dict[UUID, str] = field(default_factory=dict)
    late_interrupts: int = 0
    interrupt_misses: list[tuple[UUID, UUID, str, float]] = field(default_factory=list)
    terminals: Counter[str] = field(default_factory=Counter)
    # Every interrupt sent: its command id -> the turn it named.
    interrupts: dict[UUID, UUID] = field(default_factory=dict)


@dataclass
class _Seen:
    # (commit-side wall time, partition) of every enduring event a worker saw:
    # the event's own timestamp, so one committed before a kill but delivered
    # after it never counts as a takeover.
    arrivals: list[tuple[float, int]] = field(default_factory=list)


async def _worker(
    session: KafkaSession,
    loop_id: LoopId,
    *,
    stop: asyncio.Event,
    report: ChurnReport,
    seen: _Seen,
    interrupt_every: int,
    rng: random.Random,
    wait: float,
) -> None:
    partition = session.partition_of(loop_id)
    turn_number = 0
    while not stop.is_set():
        turn_number += 1
        command_id = CommandId(uuid4())
        report.submitted.append(command_id)
        interrupt = interrupt_every > 0 and rng.randrange(interrupt_every) == 0
        turn = await session.submit_turn(
            "add 1 2 3", loop_id=loop_id, no_fold=True, command_id=command_id
        )
        sent_interrupt_for: UUID | None = None
        sent_at = 0.0
        try:
            async with asyncio.timeout(wait):
                async with turn:
                    async for event in turn:
                        if isinstance(event, TokenDelta):
                            continue
                        stamp = event.header.created_at.timestamp()
                        seen.arrivals.append((stamp, partition))
                        if (
                            interrupt
                            and sent_interrupt_for is None
                            and isinstance(event, TurnStarted)
                        ):
                            # Named: read late (after a takeover, or once a
                            # later turn runs) it cancels nothing else.
                            sent_interrupt_for = event.header.turn_id
                            named = Interrupt(
                                command_id=uuid4(),
                                session_id=session.session_id,
                                loop_id=loop_id,
                                created_at=datetime.now(UTC),
                                agency=Agency.USER,
                                turn_id=sent_interrupt_for,
                            )
                            await session.send(named)
                            report.interrupts[named.command_id] = sent_interrupt_for
                            sent_at = time.time()
                    outcome = await turn.outcome()
        except TimeoutError:
            report.unanswered_waits += 1
            continue
        if outcome.terminal is not None:
            report.terminals[outcome.terminal.type_name] += 1
            if sent_interrupt_for is not None and outcome.turn_id == sent_interrupt_for:
                kind = outcome.terminal.type_name
                ended_at = outcome.terminal.header.created_at.timestamp()
                if ended_at <= sent_at:
                    # The client saw the turn start late: it had ended before
                    # the interrupt was even sent, so the interrupt had no turn.
                    report.late_interrupts += 1
                    continue
                report.interrupted_turns[sent_interrupt_for] = kind
                if kind != "TurnInterrupted":
                    report.interrupt_misses.append(
                        (loop_id, sent_interrupt_for, kind, sent_at)
                    )


async def run_churn(
    bootstrap: str,
    prefix: str,
    topics: TopicNames,
    *,
    duration: float,
    kill_every: float = 3.0,
    actors: int = 3,
    loops: int = 30,
    chunk_delay: float = 0.05,
    interrupt_every: int = 10,
    settle: float = 120.0,
    seed: int = 7,
    extra: tuple[str, ...] = (),
    log_dir: Path | None = None,
) -> ChurnReport:
    """Run the churn for ``duration`` seconds, then let every turn finish."""
    rng = random.Random(seed)
    report = ChurnReport()
    seen = _Seen()
    fleet = ActorFleet(
        bootstrap,
        prefix,
        extra=("--model", "demo", "--chunk-delay", str(chunk_delay), *extra),
        log_dir=log_dir,
    )
    session = await connect(bootstrap, topics)
    stop = asyncio.Event()
    kills: list[Kill] = []
    try:
        await start_fleet(fleet, actors)
        workers = [
            asyncio.create_task(
                _worker(
                    session,
                    LoopId(uuid4()),
                    stop=stop,
                    report=report,
                    seen=seen,
                    interrupt_every=interrupt_every,
                    rng=random.Random(rng.random()),
                    wait=settle,
                )
            )
            for _ in range(loops)
        ]
        kills = await kill_on_schedule(
            fleet, duration=duration, kill_every=kill_every, rng=rng
        )
        report.kills = len(kills)
        stop.set()
        async with asyncio.timeout(settle + 30):
            await asyncio.gather(*workers)
        fleet.note_exits()
    finally:
        stop.set()
        await fleet.close()
        with contextlib.suppress(Exception):
            await session.close()
    report.self_exits = fleet.self_exits
    for killed_at, owned in kills:
        for partition in owned:
            later = [t for t, p in seen.arrivals if p == partition and t > killed_at]
            if later:
                report.takeovers.append(min(later) - killed_at)
            else:
                report.untaken += 1
    return report
