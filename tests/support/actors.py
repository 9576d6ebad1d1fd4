"""Loop-actor processes for group-membership tests and benchmarks.

:class:`ActorFleet` starts ``python -m turnstream.loop_actor`` child processes
(the deployable's entry point, an alias of ``turnstream actor run``), follows
each one's log for the ``partitions ready`` line, stops them with SIGTERM or
SIGKILL and notes every exit, so a test can assert that no actor ever left by
itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.eventually import assert_eventually

__all__ = ["ActorFleet", "ActorProcess"]

_READY = re.compile(r"partitions ready: \[([0-9,]*)\]")


@dataclass
class ActorProcess:
    """One actor process and what its log said."""

    name: str
    process: asyncio.subprocess.Process
    partitions: set[int] | None = None
    history: list[tuple[float, frozenset[int]]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    reader: asyncio.Task[None] | None = None
    stopped_by_us: bool = False

    async def follow(self) -> None:
        assert self.process.stderr is not None
        async for raw in self.process.stderr:
            line = raw.decode(errors="replace").rstrip()
            self.lines.append(line)
            match = _READY.search(line)
            if match:
                owned = {int(p) for p in match.group(1).split(",") if p}
                self.partitions = owned
                self.history.append((time.monotonic(), frozenset(owned)))

    @property
    def alive(self) -> bool:
        return self.process.returncode is None


@dataclass
class ActorFleet:
    """Actor processes of one consumer group on one topic set."""

    bootstrap: str
    prefix: str
    extra: Sequence[str] = ()
    log_dir: Path | None = None
    actors: list[ActorProcess] = field(default_factory=list)
    self_exits: list[tuple[str, int | None, list[str]]] = field(default_factory=list)
    _count: int = 0

    async def spawn(
        self, *more: str, env: dict[str, str] | None = None
    ) -> ActorProcess:
        """Start one actor (``env`` adds to this process's environment)."""
        self._count += 1
        name = f"actor-{self._count}"
        argv = [
            sys.executable,
            "-m",
            "turnstream.loop_actor",  # the same command as `turnstream actor run`
            "--bootstrap",
            self.bootstrap,
            "--group-id",
            f"{self.prefix}actors",
            "--topic-prefix",
            self.prefix,
            "--txn-prefix",
            self.prefix,
            "--metrics-port",
            "0",
            "--log-format",
            "text",
            *self.extra,
            *more,
        ]
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
        actor = ActorProcess(name, process)
        actor.reader = asyncio.create_task(actor.follow())
        self.actors.append(actor)
        return actor

    async def stacks(self, *, timeout: float = 5.0) -> str:
        """Ask every live actor where its tasks wait (SIGUSR1); return its answer.

        For a failure message when an actor seems stuck: each one logs its
        asyncio tasks' stacks, and this returns those log lines.
        """
        marks = {a.name: len(a.lines) for a in self.alive}
        for actor in self.alive:
            actor.process.send_signal(signal.SIGUSR1)

        def answered(actor: ActorProcess) -> bool:
            return any(
                "asyncio tasks" in line for line in actor.lines[marks[actor.name] :]
            )

        def all_answered() -> bool:
            return all(answered(a) for a in self.alive if a.name in marks)

        with contextlib.suppress(AssertionError):
            await assert_eventually(all_answered, timeout=timeout, interval=0.1)
        await asyncio.sleep(0.2)  # the rest of the dump's lines
        return "\n".join(
            f"{a.name}:\n" + "\n".join(a.lines[marks[a.name] :])
            for a in self.actors
            if a.name in marks
        )

    async def wait_all_owned(self, partitions: int, *, timeout: float = 90) -> None:
        """Wait until the live actors together own partitions ``0..partitions-1``.

        No actor may exit by itself meanwhile. On failure the message carries
        every live actor's task stacks (see :meth:`stacks`).
        """

        def all_owned() -> None:
            self.note_exits()
            assert self.self_exits == []
            owned = sorted(p for a in self.alive for p in a.partitions or ())
            assert owned == list(range(partitions)), owned

        try:
            await assert_eventually(
                all_owned, timeout=timeout, message="actors not ready"
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{await self.stacks()}") from exc

    def tails(self, lines: int = 8) -> str:
        """The last log lines of every actor (for an assertion's message)."""
        return "\n".join(
            f"{a.name}: " + " | ".join(a.lines[-lines:]) for a in self.actors
        )

    @property
    def alive(self) -> list[ActorProcess]:
        return [a for a in self.actors if a.alive]

    def note_exits(self) -> None:
        """Record every actor that exited without being told to."""
        for actor in self.actors:
            if not actor.alive and not actor.stopped_by_us:
                actor.stopped_by_us = True  # noted once
                self.self_exits.append(
                    (actor.name, actor.process.returncode, actor.lines[-10:])
                )

    async def kill(self, actor: ActorProcess) -> None:
        self.note_exits()
        actor.stopped_by_us = True
        if actor.alive:
            actor.process.kill()
        await actor.process.wait()

    async def terminate(self, actor: ActorProcess, *, timeout: float = 60) -> int:
        """SIGTERM and wait for the exit (SIGKILL after ``timeout``)."""
        self.note_exits()
        actor.stopped_by_us = True
        if actor.alive:
            actor.process.send_signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await actor.process.wait()
        if actor.alive:
            actor.process.kill()
        return await actor.process.wait()

    async def close(self) -> None:
        self.note_exits()
        for actor in self.actors:
            if actor.alive:
                actor.stopped_by_us = True
                actor.process.send_signal(signal.SIGTERM)
        for actor in self.actors:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(45):
                    await actor.process.wait()
            if actor.alive:
                actor.process.kill()
                await actor.process.wait()
            if actor.reader is not None:
                actor.reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await actor.reader
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            for actor in self.actors:
                (self.log_dir / f"{actor.name}.log").write_text("\n".join(actor.lines))
