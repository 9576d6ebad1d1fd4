"""kill -9 of a loop-actor process mid-turn, while a second one runs.

Two ``python -m turnstream.loop_actor`` processes share a consumer group (demo model
slowed down with ``--chunk-delay``, 6 s session timeout), hosting the example agent
``support`` (it asks before ``word_count``). One is killed with SIGKILL in the
middle of a turn that has inputs queued behind it: the turn is held on its approval
gate (nobody answers), so the kill always lands mid-turn, however busy the machine.
The survivor must take the partition over, restore (closing the crashed turn with
``TurnInterrupted``), run the queued inputs, and the journal read back
``read_committed`` must show: no duplicate event id, exactly one terminal per
``TurnStarted``, contiguous turn indexes per loop, and every submitted command
answered exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from uuid import UUID, uuid4

import pytest
from tests.support.eventually import assert_eventually
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    ANSWERS,
    PROJECT_DIR,
    apply_topic_set,
    check_journal,
    collect_garbage,
    collect_garbage_late,
    collect_until,
    connect,
    count_type,
    delete_topic_set,
    loop_filter,
    read_all,
    unique_prefix,
)

from turnstream.events import TurnInterrupted, TurnStarted
from turnstream.ids import LoopId
from turnstream.kafka.client.session import KafkaSession

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

EXAMPLE_DIR = PROJECT_DIR / "examples" / "agents"

_READY = re.compile(r"partitions ready: \[([0-9,]*)\]")


@dataclass
class ActorProcess:
    """One loop-actor subprocess and what its log said about its partitions."""

    name: str
    process: asyncio.subprocess.Process
    partitions: set[int] | None = None
    lines: list[str] = field(default_factory=list)
    reader: asyncio.Task[None] | None = None

    async def follow(self) -> None:
        assert self.process.stderr is not None
        async for raw in self.process.stderr:
            line = raw.decode(errors="replace").rstrip()
            self.lines.append(line)
            match = _READY.search(line)
            if match:
                self.partitions = {int(p) for p in match.group(1).split(",") if p}


async def _spawn(name: str, bootstrap: str, prefix: str) -> ActorProcess:
    """A loop-actor process hosting ``acme.agents:support`` (from examples/agents)."""
    argv = [
        sys.executable,
        "-m",
        "turnstream.loop_actor",
        "--bootstrap",
        bootstrap,
        "--group-id",
        f"{prefix}actors",
        "--topic-prefix",
        prefix,
        "--txn-prefix",
        "crash",
        "--model",
        "demo",
        "--chunk-delay",
        "0.04",
        "--session-timeout-ms",
        "6000",
        "--commit-deadline",
        "20",
        "--agent",
        "acme.agents:support",
    ]
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=EXAMPLE_DIR,  # the agent's package is imported from there
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    actor = ActorProcess(name, process)
    actor.reader = asyncio.create_task(actor.follow())
    return actor


@contextlib.asynccontextmanager
async def _actors(bootstrap: str, prefix: str) -> AsyncIterator[list[ActorProcess]]:
    spawned: list[ActorProcess] = []
    try:
        yield spawned
    finally:
        for actor in spawned:
            if actor.process.returncode is None:
                actor.process.send_signal(signal.SIGTERM)
        for actor in spawned:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(30):
                    await actor.process.wait()
            if actor.process.returncode is None:
                actor.process.kill()
                await actor.process.wait()
            if actor.reader is not None:
                actor.reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await actor.reader


def _loop_on(session: KafkaSession, partition: int) -> LoopId:
    while True:
        loop_id = LoopId(uuid4())
        if session.partition_of(loop_id) == partition:
            return loop_id


async def test_kill_nine_mid_turn_loses_nothing(kafka_bootstrap: str) -> None:
    prefix = unique_prefix("crash")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=2)
    session = await connect(kafka_bootstrap, topics)
    submitted: list[UUID] = []
    try:
        async with _actors(kafka_bootstrap, prefix) as actors:
            first = await _spawn("first", kafka_bootstrap, prefix)
            actors.append(first)
            await assert_eventually(
                lambda: first.partitions == {0, 1},
                timeout=60,
                message=f"first actor not ready: {first.lines[-5:]}",
            )
            second = await _spawn("second", kafka_bootstrap, prefix)
            actors.append(second)

            def split() -> None:
                assert first.partitions is not None
                assert second.partitions is not None
                assert len(first.partitions) == len(second.partitions) == 1
                assert first.partitions | second.partitions == {0, 1}

            await assert_eventually(split, timeout=60, message="no split assignment")
            assert first.partitions is not None
            assert second.partitions is not None
            victim_loop = _loop_on(session, next(iter(first.partitions)))
            other_loop = _loop_on(session, next(iter(second.partitions)))

            watch = session.subscribe_events(loop_filter(victim_loop))
            # word_count needs approval: the turn waits on its gate until killed.
            submitted.append(
                await session.submit("count these four words", loop_id=victim_loop)
            )
            # Queued behind the running turn, never folded into it: unanswered
            # when the owner dies, so the survivor must read and run them.
            for text in ("add 10 20", "add 1 2 3"):
                submitted.append(
                    await session.submit(text, loop_id=victim_loop, no_fold=True)
                )
            submitted.append(await session.submit("add 4 5", loop_id=other_loop))
            submitted.append(await session.submit("add 6 7 8", loop_id=other_loop))
            # Mid-turn, held: the first turn waits on its approval gate.
            await collect_until(watch, count_type("GateOpened"), timeout=30)
            first.process.kill()  # SIGKILL: no handover, nothing flushed
            await first.process.wait()

            async def all_answered() -> None:
                entries = await read_all(kafka_bootstrap, topics, 2)
                answered = {
                    e.event.reply_to() for e in entries if e.event.type_name in ANSWERS
                }
                missing = [c for c in submitted if c not in answered]
                assert not missing, f"unanswered: {missing}"
                last = [e.event.type_name for e in entries if e.loop_id == victim_loop]
                assert last[-1] == "LoopIdle", last

            await assert_eventually(
                all_answered,
                timeout=90,
                interval=0.5,
                message=f"survivor did not finish: {second.lines[-8:]}",
            )
            assert second.partitions == {0, 1}

        entries = await read_all(kafka_bootstrap, topics, 2)
        per_loop = check_journal(entries, submitted)
        victim = per_loop[victim_loop]
        starts = [e for e in victim if isinstance(e, TurnStarted)]
        assert [s.reply_to() for s in starts] == submitted[:3]
        crashed = starts[0].header.turn_id
        closing = [
            e
            for e in victim
            if isinstance(e, TurnInterrupted) and e.header.turn_id == crashed
        ]
        assert len(closing) == 1, [e.type_name for e in victim]
        assert [s.turn_index for s in starts] == [1, 2, 3]
    finally:
        await session.close()
        await delete_topic_set(kafka_bootstrap, prefix)
