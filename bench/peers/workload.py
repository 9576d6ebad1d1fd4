"""The one workload every system runs, and how it is measured.

``conversations`` conversations of ``turns`` turns each; every turn is one user
message. The scripted model answers in ``CHUNKS`` text chunks with zero latency.
In a tool turn it first asks for ``add(a=2, b=3)`` once, then answers in the
same ``CHUNKS`` chunks after the tool result. Every system gets a fake model
written against its own framework's model interface; the answers are identical.

Two phases per system and kind (``text`` or ``tool``):

* **throughput**: every conversation at once (``concurrency`` of them in
  flight; each runs its turns one after another: the caller waits for the
  final answer before sending the next message). CPU is this process's
  (``time.process_time``: every thread) plus the server processes' (the Kafka
  broker JVM, the Postgres postmaster and its backends) from ``/proc``;
* **latency**: ``latency_conversations`` conversations one at a time; each
  turn is timed from the submit to the final answer seen by the caller.

Each turn reports what the caller saw (text chunks streamed to it, tool runs,
the final text); :func:`check_turn` lists what deviates from the script, and
a system with any deviating turn is reported as failed (its numbers kept).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

CHUNKS = 20
ANSWER_CHUNKS: tuple[str, ...] = tuple(f"tok{i:02d} " for i in range(CHUNKS))
ANSWER = "".join(ANSWER_CHUNKS)
TOOL_NAME = "add"
TOOL_ARGS = {"a": 2, "b": 3}
KINDS = ("text", "tool")


def user_text(conversation: int, turn: int) -> str:
    """The user message of one turn."""
    return f"conversation {conversation}, turn {turn}: what is 2 + 3?"


class BenchFailure(AssertionError):
    """A system could not run the workload (or did not run it as scripted)."""


@dataclass
class TurnSeen:
    """What the caller saw of one turn."""

    chunks: int
    """Text chunks streamed to the caller (0 when the system does not stream)."""
    answer: str
    """The final answer text."""
    tool_runs: int = 0
    """Times the ``add`` tool ran in this turn (counted in the tool itself)."""
    answered_at: float = 0.0
    """``time.perf_counter()`` when the final answer was seen (0: on return)."""
    ended: str = "done"
    """How the turn ended, if not with an answer (e.g. ``TurnFailed``)."""


def check_turn(
    kind: str, seen: TurnSeen, *, streamed: bool, per_turn_chunks: bool = True
) -> list[str]:
    """What deviates from the script: ``CHUNKS`` chunks, the answer, one tool run."""
    want_tools = 1 if kind == "tool" else 0
    problems = [] if seen.ended == "done" else [f"turn ended {seen.ended}"]
    if streamed and per_turn_chunks and seen.chunks != CHUNKS:
        problems.append(f"{seen.chunks} text chunks streamed, want {CHUNKS}")
    if seen.answer != ANSWER:
        problems.append(f"answer {seen.answer[:60]!r}..., want {ANSWER[:30]!r}...")
    if seen.tool_runs != want_tools:
        problems.append(f"tool ran {seen.tool_runs} times, want {want_tools}")
    return problems


@dataclass
class Deviations:
    """Turns that did not run as scripted (counted; the first few kept)."""

    count: int = 0
    examples: list[str] = field(default_factory=list)
    phase: list[str] = field(default_factory=list)
    """Problems of the phase as a whole (text deltas counted per phase)."""

    def add(self, problems: list[str]) -> None:
        """Record one turn's problems (if any)."""
        if problems:
            self.count += 1
            if len(self.examples) < 5:
                self.examples.append("; ".join(problems))

    async def settle(self, system: System, start: int, turns: int) -> None:
        """Systems that count deltas per phase: check every one arrived."""
        if not getattr(system, "chunks_per_phase", False):
            return
        expected = start + turns * CHUNKS
        received = await system.settle(expected)  # type: ignore[attr-defined]
        if received != expected:
            self.phase.append(
                f"{received - start} of {turns * CHUNKS} text deltas received"
            )

    def doc(self) -> dict[str, Any]:
        """For the result document."""
        return {"count": self.count, "examples": self.examples, "phase": self.phase}


class Conversation(Protocol):
    """One conversation of a system: its turns run one after another."""

    async def turn(self, text: str) -> TurnSeen:
        """Send ``text``; return once the final answer has been seen."""
        ...


class System(Protocol):
    """A system under test, opened for one kind of turn."""

    name: str
    streamed: bool
    """Whether the caller sees the answer chunk by chunk."""
    concurrent: bool
    """Whether conversations can run concurrently (async API)."""

    async def conversation(self, index: int) -> Conversation:
        """Start conversation ``index`` (nothing is sent yet)."""
        ...

    def server_pids(self) -> Sequence[ServerProcess]:
        """Server processes whose CPU counts too (broker, database)."""
        ...


# ----------------------------------------------------------------- CPU


def _stat_fields(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


_TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int, *, children: bool = False) -> float:
    """utime+stime (and cutime+cstime if ``children``) of ``pid``, seconds."""
    fields = _stat_fields(pid)
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / _TICK


def child_pids(pid: int) -> list[int]:
    """Live children of ``pid`` (scans ``/proc``)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(_stat_fields(int(entry.name))[1]) == pid:
                out.append(int(entry.name))
    return out


@dataclass(frozen=True)
class ServerProcess:
    """A server whose CPU is charged to the system under test.

    With ``tree``, the process's reaped children (``cutime``/``cstime``) and
    its live children count too: Postgres forks a backend per connection.
    """

    label: str
    pid: int
    tree: bool = False

    def cpu(self) -> float:
        """CPU seconds so far (0.0 once the process is gone)."""
        try:
            total = proc_cpu(self.pid, children=self.tree)
        except OSError:
            return 0.0
        if self.tree:
            for child in child_pids(self.pid):
                with contextlib.suppress(OSError):
                    total += proc_cpu(child)
        return total


@dataclass
class CpuMeter:
    """This process's CPU plus the servers', over a block."""

    servers: Sequence[ServerProcess] = ()
    wall: float = 0.0
    own: float = 0.0
    server: dict[str, float] = field(default_factory=dict)

    def __enter__(self) -> CpuMeter:
        self._wall0 = time.perf_counter()
        self._own0 = time.process_time()
        self._srv0 = {s.label: s.cpu() for s in self.servers}
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self._wall0
        self.own = time.process_time() - self._own0
        self.server = {s.label: s.cpu() - self._srv0[s.label] for s in self.servers}

    @property
    def total(self) -> float:
        """Own plus server CPU seconds."""
        return self.own + sum(self.server.values())


def server_idle_rate(servers: Sequence[ServerProcess], seconds: float) -> float:
    """CPU ms per second the servers burn while this bench sends nothing.

    On a shared machine the broker also serves other people's tests; this is
    the background the throughput figure includes.
    """
    if not servers or seconds <= 0:
        return 0.0
    before = sum(s.cpu() for s in servers)
    time.sleep(seconds)
    return round(1000 * (sum(s.cpu() for s in servers) - before) / seconds, 2)


# ---------------------------------------------------------------- phases


def percentiles(samples: Sequence[float]) -> dict[str, Any]:
    """p50/p99/max in ms, nearest rank."""
    if not samples:
        return {"n": 0}
    ordered = sorted(samples)

    def rank(q: float) -> float:
        index = max(0, math.ceil(q * len(ordered)) - 1)
        return round(ordered[index] * 1000, 2)

    return {
        "n": len(ordered),
        "p50": rank(0.50),
        "p99": rank(0.99),
        "max": round(ordered[-1] * 1000, 2),
    }


def _delta_count(system: System) -> int:
    count = getattr(system, "delta_count", None)
    return int(count()) if count is not None else 0


async def _run_conversation(
    system: System,
    kind: str,
    index: int,
    turns: int,
    *,
    latencies: list[float] | None,
    deviations: Deviations,
) -> None:
    conv = await system.conversation(index)
    for t in range(turns):
        sent = time.perf_counter()
        seen = await conv.turn(user_text(index, t))
        if latencies is not None:
            latencies.append((seen.answered_at or time.perf_counter()) - sent)
        deviations.add(
            check_turn(
                kind,
                seen,
                streamed=system.streamed,
                per_turn_chunks=not getattr(system, "chunks_per_phase", False),
            )
        )


async def throughput(
    system: System, kind: str, *, conversations: int, turns: int, concurrency: int
) -> dict[str, Any]:
    """Every conversation, ``concurrency`` at a time; CPU and turns/s."""
    width = concurrency if system.concurrent else 1
    gate = asyncio.Semaphore(max(1, width))
    deviations = Deviations()

    async def one(index: int) -> None:
        async with gate:
            await _run_conversation(
                system, kind, index, turns, latencies=None, deviations=deviations
            )

    total = conversations * turns
    start = _delta_count(system)
    with CpuMeter(system.server_pids()) as meter:
        async with asyncio.TaskGroup() as group:
            for i in range(conversations):
                group.create_task(one(i))
        await deviations.settle(system, start, total)
    return {
        "conversations": conversations,
        "turns": total,
        "concurrency": width,
        "elapsed_s": round(meter.wall, 3),
        "turns_per_s": round(total / meter.wall, 1),
        "cpu_ms_per_turn": round(1000 * meter.total / total, 3),
        "own_cpu_ms_per_turn": round(1000 * meter.own / total, 3),
        "server_cpu_ms_per_turn": {
            k: round(1000 * v / total, 3) for k, v in meter.server.items()
        },
        "deviations": deviations.doc(),
    }


async def latency(
    system: System, kind: str, *, conversations: int, turns: int, first_index: int
) -> dict[str, Any]:
    """``conversations`` one at a time; per-turn latency and CPU at concurrency 1."""
    samples: list[float] = []
    deviations = Deviations()
    start = _delta_count(system)
    with CpuMeter(system.server_pids()) as meter:
        for i in range(conversations):
            await _run_conversation(
                system,
                kind,
                first_index + i,
                turns,
                latencies=samples,
                deviations=deviations,
            )
        await deviations.settle(system, start, conversations * turns)
    total = conversations * turns
    return {
        "conversations": conversations,
        "turns": total,
        "latency_ms": percentiles(samples),
        "turns_per_s": round(total / meter.wall, 1),
        "cpu_ms_per_turn": round(1000 * meter.total / total, 3),
        "own_cpu_ms_per_turn": round(1000 * meter.own / total, 3),
        "server_cpu_ms_per_turn": {
            k: round(1000 * v / total, 3) for k, v in meter.server.items()
        },
        "deviations": deviations.doc(),
    }
