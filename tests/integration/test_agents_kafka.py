"""A user's agent package on the real broker: access policy, binding, models, stops.

The agents are ``examples/agents/acme`` (a package outside ``services/``), hosted by
``python -m turnstream.loop_actor --agent acme.agents:…`` child processes started in
that directory, with turnstream's offline demo model (``add`` for numbers,
``word_count`` otherwise):

- ``support`` allows ``add`` and asks before ``word_count``;
- ``auditor`` allows ``word_count`` and denies ``add``;
- ``careless`` has no access policy: every call is denied.

Every expectation is read back from the committed journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from uuid import UUID, uuid4

import pytest
from tests.support.eventually import assert_eventually
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    PROJECT_DIR,
    apply_topic_set,
    collect_garbage,
    collect_garbage_late,
    collect_until,
    connect,
    count_type,
    delete_topic_set,
    loop_filter,
)

from turnstream.events import (
    EnduringEvent,
    GateCloseReason,
    GateOpened,
    GateResolved,
    LoopStarted,
    PermissionDecided,
    PermissionRequested,
    RejectReason,
    StepDone,
    TurnInterrupted,
    TurnRejected,
    TurnStarted,
)
from turnstream.ids import GateId, LoopId
from turnstream.kafka.client.session import KafkaSession
from turnstream.kafka.client.turns import TurnStatus

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

EXAMPLE_DIR = PROJECT_DIR / "examples" / "agents"
_READY = re.compile(r"partitions ready: \[([0-9,]*)\]")
WAIT = 60.0


@dataclass
class ActorProcess:
    """One loop-actor child process and the partitions its log says it holds."""

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


@contextlib.asynccontextmanager
async def actors() -> AsyncIterator[list[ActorProcess]]:
    """The actors a test spawns (append them); SIGTERM, then SIGKILL, after."""
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


async def spawn(
    bootstrap: str, prefix: str, agent_paths: Sequence[str]
) -> ActorProcess:
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
        "agents",
        "--session-timeout-ms",
        "6000",
        "--commit-deadline",
        "20",
    ]
    for path in agent_paths:
        argv += ["--agent", path]
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=EXAMPLE_DIR,  # the user's package is importable from where they run
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    actor = ActorProcess(process)
    actor.reader = asyncio.create_task(actor.follow())
    return actor


def of(events: Sequence[EnduringEvent], kind: type[EnduringEvent]) -> list:  # type: ignore[type-arg]
    return [e for e in events if isinstance(e, kind)]


def results(events: Sequence[EnduringEvent]) -> list[tuple[bool, str]]:
    """(is_error, text) of every tool result committed, in order."""
    out = []
    for step in of(events, StepDone):
        for message in step.messages[1:]:
            text = "".join(getattr(b, "text", "") for b in message.blocks)
            out.append((message.is_error, text))
    return out


def loop_on(session: KafkaSession, partition: int) -> LoopId:
    while True:
        loop_id = LoopId(uuid4())
        if session.partition_of(loop_id) == partition:
            return loop_id


async def test_example_agents_policy_models_and_shutdown(kafka_bootstrap: str) -> None:
    """allow -> PermissionDecided approve, then the tool; ask -> gate, RespondGate
    approve -> the tool; deny -> PermissionDecided deny and an error result, no
    run; no policy -> every call denied; the model allow-list; unknown and wrong
    agents; Shutdown then submit -> TurnRejected{shutting_down}.
    """
    prefix = f"it-agents-{uuid4().hex[:10]}."
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    session = await connect(kafka_bootstrap, topics)
    paths = ("acme.agents:support", "acme.agents:auditor", "acme.agents:careless")
    try:
        async with actors() as spawned:
            actor = await spawn(kafka_bootstrap, prefix, paths)
            spawned.append(actor)
            await assert_eventually(
                lambda: actor.partitions == {0},
                timeout=WAIT,
                message=f"actor not ready: {actor.lines[-5:]}",
            )
            assert any(
                "agent 'careless' has no access policy: every tool call is denied"
                in line
                for line in actor.lines
            ), actor.lines[-5:]

            # allow: support runs add after a durable approve.
            allowed = LoopId(uuid4())
            outcome = await session.submit_and_wait(
                "add 2 3", loop_id=allowed, agent="support", timeout=WAIT
            )
            assert outcome.status is TurnStatus.DONE
            journal = await session.replay(allowed)
            assert [s.header.agent_name for s in of(journal, LoopStarted)] == [
                "support"
            ]
            decided = of(journal, PermissionDecided)
            assert [(d.subject, d.effect, d.reason) for d in decided] == [
                ("add", "approve", "access_evaluated")
            ]
            assert results(journal) == [(False, "5")]
            names = [e.type_name for e in journal]
            assert names.index("PermissionDecided") < names.index("StepDone")

            # ask: support asks before word_count; approving runs it.
            asked = LoopId(uuid4())
            watch = session.subscribe_events(loop_filter(asked))
            await session.submit(
                "count these four words", loop_id=asked, agent="support"
            )
            seen = await collect_until(
                watch, count_type("PermissionRequested"), timeout=WAIT
            )
            request = of(seen, PermissionRequested)[0]  # type: ignore[arg-type]
            assert request.tool_name == "word_count"
            await session.respond_gate(
                GateId(request.gate_id), "approve", loop_id=asked
            )
            await collect_until(watch, count_type("TurnDone"), timeout=WAIT)
            journal = await session.replay(asked)
            assert of(journal, PermissionDecided) == []
            resolved = of(journal, GateResolved)
            assert [(r.reason, r.action) for r in resolved] == [
                (GateCloseReason.ANSWERED, "approve")
            ]
            assert results(journal) == [(False, "4")]

            # deny: auditor may not add; the model sees an error result.
            denied = LoopId(uuid4())
            await session.submit_and_wait(
                "add 2 3", loop_id=denied, agent="auditor", timeout=WAIT
            )
            journal = await session.replay(denied)
            decided = of(journal, PermissionDecided)
            assert [(d.subject, d.effect, d.reason) for d in decided] == [
                ("add", "deny", "access_denied")
            ]
            assert results(journal) == [
                (True, "error: permission denied [not authorized]: denied by policy")
            ]

            # no policy: careless has add, but every call is denied.
            bare = LoopId(uuid4())
            await session.submit_and_wait(
                "add 2 3", loop_id=bare, agent="careless", timeout=WAIT
            )
            journal = await session.replay(bare)
            decided = of(journal, PermissionDecided)
            assert [(d.effect, d.reason) for d in decided] == [
                ("deny", "access_gate_missing")
            ]
            assert results(journal) == [
                (True, "error: permission denied [unavailable]: no access policy")
            ]

            # models: inside the allow-list it is recorded; outside, rejected.
            ok = await session.submit_and_wait(
                "add 1 1", loop_id=allowed, model="demo-large", timeout=WAIT
            )
            started = of(await session.replay(allowed), TurnStarted)
            assert [(s.model, s.reply_to()) for s in started][-1] == (
                "demo-large",
                ok.command_id,
            )
            refused = await session.submit_and_wait(
                "add 1 1", loop_id=allowed, model="gpt-9", timeout=WAIT
            )
            assert refused.status is TurnStatus.REJECTED
            assert isinstance(refused.answer, TurnRejected)
            assert refused.answer.reason is RejectReason.MODEL_NOT_ALLOWED
            # ... and on a new loop that refusal binds nothing: another agent may.
            fresh = LoopId(uuid4())
            refused = await session.submit_and_wait(
                "add 1 1", loop_id=fresh, agent="support", model="gpt-9", timeout=WAIT
            )
            assert isinstance(refused.answer, TurnRejected)
            assert refused.answer.reason is RejectReason.MODEL_NOT_ALLOWED
            assert [e.type_name for e in await session.replay(fresh)] == [
                "TurnRejected"
            ]
            other = await session.submit_and_wait(
                "count these words", loop_id=fresh, agent="auditor", timeout=WAIT
            )
            assert other.status is TurnStatus.DONE
            journal = await session.replay(fresh)
            assert [s.header.agent_name for s in of(journal, LoopStarted)] == [
                "auditor"
            ]

            # agents: another than the loop's, and one nobody hosts.
            wrong = await session.submit_and_wait(
                "add 1 1", loop_id=allowed, agent="auditor", timeout=WAIT
            )
            assert isinstance(wrong.answer, TurnRejected)
            assert (wrong.answer.reason, wrong.answer.detail) == (
                RejectReason.WRONG_AGENT,
                "the loop is bound to agent 'support'",
            )
            unbound = LoopId(uuid4())
            ghost = await session.submit_and_wait(
                "add 1 1", loop_id=unbound, agent="ghost", timeout=WAIT
            )
            assert isinstance(ghost.answer, TurnRejected)
            assert ghost.answer.reason is RejectReason.UNKNOWN_AGENT
            # A refusal binds nothing: the next submit binds the loop.
            bound = await session.submit_and_wait(
                "add 1 1", loop_id=unbound, agent="auditor", timeout=WAIT
            )
            assert bound.status is TurnStatus.DONE
            journal = await session.replay(unbound)
            assert [e.type_name for e in journal][:3] == [
                "TurnRejected",
                "LoopStarted",
                "TurnStarted",
            ]
            assert of(journal, LoopStarted)[0].header.agent_name == "auditor"

            # shutdown: later input is refused, durably.
            await session.stop_loop(denied)
            late = await session.submit_and_wait(
                "add 1 1", loop_id=denied, timeout=WAIT
            )
            assert isinstance(late.answer, TurnRejected)
            assert late.answer.reason is RejectReason.SHUTTING_DOWN
            names = [e.type_name for e in await session.replay(denied)]
            assert names[-2:] == ["LoopStopped", "TurnRejected"]
    finally:
        await session.close()
        await delete_topic_set(kafka_bootstrap, prefix)


async def test_two_agents_keep_their_loops_across_a_kill_nine(
    kafka_bootstrap: str,
) -> None:
    """Two actors host support and auditor on two partitions; the owner of one is
    killed with SIGKILL while a loop waits on a gate. The survivor: closes that gate
    abandoned, then TurnInterrupted; serves the support and auditor loops with their
    own agents (without the submit naming them); refuses a submit to a loop shut
    down before the kill.
    """
    prefix = f"it-agents-kill-{uuid4().hex[:10]}."
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=2)
    session = await connect(kafka_bootstrap, topics)
    paths = ("acme.agents:support", "acme.agents:auditor")
    try:
        async with actors() as spawned:
            first = await spawn(kafka_bootstrap, prefix, paths)
            spawned.append(first)
            await assert_eventually(
                lambda: first.partitions == {0, 1},
                timeout=WAIT,
                message=f"first actor not ready: {first.lines[-5:]}",
            )
            second = await spawn(kafka_bootstrap, prefix, paths)
            spawned.append(second)

            def split() -> None:
                assert first.partitions is not None
                assert second.partitions is not None
                assert len(first.partitions) == len(second.partitions) == 1

            await assert_eventually(split, timeout=WAIT, message="no split")
            assert first.partitions is not None
            victim = next(iter(first.partitions))
            support_loop = loop_on(session, victim)
            auditor_loop = loop_on(session, victim)
            stopped_loop = loop_on(session, victim)
            gated_loop = loop_on(session, victim)
            later_stopped = loop_on(session, victim)

            for loop_id, agent in (
                (support_loop, "support"),
                (auditor_loop, "auditor"),
                (stopped_loop, "support"),
                (later_stopped, "auditor"),
            ):
                done = await session.submit_and_wait(
                    "add 2 3", loop_id=loop_id, agent=agent, timeout=WAIT
                )
                assert done.status is TurnStatus.DONE
            await session.stop_loop(stopped_loop)
            await assert_eventually(
                lambda: _has(session, stopped_loop, "LoopStopped"),
                timeout=WAIT,
                message="LoopStopped not committed",
            )
            watch = session.subscribe_events(loop_filter(gated_loop))
            await session.submit(
                "count these four words", loop_id=gated_loop, agent="support"
            )
            seen = await collect_until(watch, count_type("GateOpened"), timeout=WAIT)
            gate = of(seen, GateOpened)[0]  # type: ignore[arg-type]
            first.process.kill()  # SIGKILL with the gate open
            await first.process.wait()
            await assert_eventually(
                lambda: second.partitions == {0, 1},
                timeout=WAIT,
                message=f"no takeover: {second.lines[-5:]}",
            )

            async def gate_closed() -> None:
                names = [e.type_name for e in await session.replay(gated_loop)]
                assert names[-2:] == ["GateResolved", "TurnInterrupted"], names

            await assert_eventually(gate_closed, timeout=WAIT, interval=0.5)
            journal = await session.replay(gated_loop)
            closing = of(journal, GateResolved)[-1]
            assert (closing.gate_id, closing.reason) == (
                gate.gate_id,
                GateCloseReason.ABANDONED,
            )
            interrupted = of(journal, TurnInterrupted)[-1]
            assert interrupted.header.turn_id == gate.header.turn_id

            # The survivor keeps each loop's agent: support approves add,
            # auditor denies it; neither submit names an agent.
            for loop_id, effect in ((support_loop, "approve"), (auditor_loop, "deny")):
                again = await session.submit_and_wait(
                    "add 4 5", loop_id=loop_id, timeout=WAIT
                )
                assert again.status is TurnStatus.DONE
                decided = of(await session.replay(loop_id), PermissionDecided)
                assert [d.effect for d in decided] == [effect, effect]
            wrong = await session.submit_and_wait(
                "add 4 5", loop_id=auditor_loop, agent="support", timeout=WAIT
            )
            assert isinstance(wrong.answer, TurnRejected)
            assert wrong.answer.reason is RejectReason.WRONG_AGENT

            late = await session.submit_and_wait(
                "add 1 1", loop_id=stopped_loop, timeout=WAIT
            )
            assert isinstance(late.answer, TurnRejected)
            assert late.answer.reason is RejectReason.SHUTTING_DOWN

            # A Shutdown for a loop the survivor has not restored yet (loops
            # come back lazily) still stops it for good.
            await session.stop_loop(later_stopped)
            await assert_eventually(
                lambda: _has(session, later_stopped, "LoopStopped"),
                timeout=WAIT,
                message="LoopStopped not committed for a loop not yet restored",
            )
            after = await session.submit_and_wait(
                "add 1 1", loop_id=later_stopped, timeout=WAIT
            )
            assert isinstance(after.answer, TurnRejected)
            assert after.answer.reason is RejectReason.SHUTTING_DOWN
    finally:
        await session.close()
        await delete_topic_set(kafka_bootstrap, prefix)


async def _has(session: KafkaSession, loop_id: UUID, name: str) -> bool:
    return name in [e.type_name for e in await session.replay(loop_id)]


async def test_built_in_agent_decides_every_call_durably(kafka_bootstrap: str) -> None:
    """Without --agent the service hosts the built-in 'turnstream' agent, whose
    policy is explicit: each demo tool call is a PermissionDecided{approve} in the
    journal before its result (it used to run unaudited).
    """
    prefix = f"it-agents-builtin-{uuid4().hex[:10]}."
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    session = await connect(kafka_bootstrap, topics)
    try:
        async with actors() as spawned:
            actor = await spawn(kafka_bootstrap, prefix, ())
            spawned.append(actor)
            await assert_eventually(
                lambda: actor.partitions == {0},
                timeout=WAIT,
                message=f"actor not ready: {actor.lines[-5:]}",
            )
            loop_id = LoopId(uuid4())
            await session.submit_and_wait("add 2 3", loop_id=loop_id, timeout=WAIT)
            journal = await session.replay(loop_id)
            assert [s.header.agent_name for s in of(journal, LoopStarted)] == [
                "turnstream"
            ]
            decided = of(journal, PermissionDecided)
            assert [(d.subject, d.effect, d.reason) for d in decided] == [
                ("add", "approve", "access_evaluated")
            ]
            names = [e.type_name for e in journal]
            assert names.index("PermissionDecided") < names.index("StepDone")
    finally:
        await session.close()
        await delete_topic_set(kafka_bootstrap, prefix)
