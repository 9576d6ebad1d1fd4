"""OpenTelemetry traces of turns, read back from a real Jaeger (OTLP/HTTP receiver).

Real ``python -m turnstream.loop_actor`` processes host
``tests.support.resume_agents`` (5 ``record`` tool steps, then an answer). The
test's own submit runs inside an OpenTelemetry span that it exports to the same
Jaeger, so each turn's trace has the client's span at its root:

- live: an actor with ``TURNSTREAM_OTEL_ENDPOINT`` exports each turn as one
  trace -- ``submit`` > ``invoke_agent`` > 6 ``step`` > ``chat steps`` and
  ``execute_tool record`` -- and the turn's event records carry the
  ``traceparent`` of the span that committed them;
- kill -9: actors without live export; the owner is killed while step 3's
  call holds, the standby ends the turn (continues it, or interrupts it), and
  ``turnstream traces export`` rebuilds the whole trace from the journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from uuid import UUID, uuid4

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from tests.support.actors import ActorFleet, ActorProcess
from tests.support.eventually import assert_eventually
from tests.support.jaeger import Jaeger, TraceView, jaeger
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    apply_topic_set,
    collect_garbage,
    collect_garbage_late,
    delete_topic_set,
    read_all,
    unique_prefix,
)

from turnstream.client import connect
from turnstream.events import StepDone, TurnStarted
from turnstream.ids import LoopId
from turnstream.kafka.reader import JournalEntry
from turnstream.kafka.topology import TopicNames
from turnstream.runtime.tracing import TRACE_ORIGIN, TRACEPARENT, span_id_for

__all__ = ["jaeger"]

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(300)]

AGENTS = "tests.support.resume_agents"


@pytest.fixture
def client_tracer(jaeger: Jaeger) -> Iterator[TracerProvider]:
    """The test's own tracer: its ``submit`` spans go to the same Jaeger."""
    provider = TracerProvider(resource=Resource.create({"service.name": "client"}))
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(f"{jaeger.otlp_endpoint}/v1/traces"))
    )
    yield provider
    provider.shutdown()


async def _submit_in_span(
    provider: TracerProvider, bootstrap: str, topics: TopicNames, loop_id: LoopId
) -> tuple[int, int]:
    """Submit ``go`` inside a client span; its trace and span ids."""
    session = await connect(bootstrap, topics=topics)
    try:
        with provider.get_tracer("test").start_as_current_span("submit") as span:
            await session.submit("go", loop_id=loop_id)
            context = span.get_span_context()
    finally:
        await session.close()
    return context.trace_id, context.span_id


async def _loop_entries(
    bootstrap: str, topics: TopicNames, loop_id: UUID
) -> list[JournalEntry]:
    return [e for e in await read_all(bootstrap, topics, 1) if e.loop_id == loop_id]


async def _ended(
    bootstrap: str, topics: TopicNames, loop_id: UUID, fleet: ActorFleet
) -> list[JournalEntry]:
    async def ended() -> list[JournalEntry]:
        entries = await _loop_entries(bootstrap, topics, loop_id)
        assert any(e.event.ends_turn() for e in entries), fleet.tails()
        return entries

    return await assert_eventually(ended, timeout=120, interval=0.5)


async def _trace(jaeger: Jaeger, trace_id: int, *, steps: int, tools: int) -> TraceView:
    """The trace once Jaeger holds the client span, the turn and all its steps."""

    async def complete() -> TraceView:
        view = await asyncio.to_thread(jaeger.trace, trace_id)
        assert view is not None
        assert len(view.named("submit")) == 1
        assert len(view.named("invoke_agent")) == 1
        assert len(view.named("step")) == steps
        assert len(view.named("chat steps")) == steps
        assert len(view.named("execute_tool record")) == tools
        return view

    return await assert_eventually(complete, timeout=60, interval=0.5)


def _check_tree(view: TraceView, client_span: int) -> None:
    """``submit`` > ``invoke_agent`` > ``step`` > ``chat`` / ``execute_tool``."""
    (turn,) = view.named("invoke_agent")
    assert view.parent(turn) == f"{client_span:016x}"
    assert view.tag(turn, "gen_ai.operation.name") == "invoke_agent"
    steps = {s["spanID"] for s in view.named("step")}
    assert all(view.parent(s) == turn["spanID"] for s in view.named("step"))
    for chat in view.named("chat steps"):
        assert view.parent(chat) in steps
        assert view.tag(chat, "gen_ai.operation.name") == "chat"
        assert view.tag(chat, "gen_ai.request.model") == "steps"
    for tool in view.named("execute_tool record"):
        assert view.parent(tool) in steps
        assert view.tag(tool, "gen_ai.tool.name") == "record"
    # No message text anywhere (the operator did not opt in).
    assert "gen_ai.input.messages" not in repr(view.spans)


@contextlib.asynccontextmanager
async def _topic_set(
    bootstrap: str, stem: str
) -> AsyncIterator[tuple[str, TopicNames]]:
    prefix = unique_prefix(stem)
    topics = await apply_topic_set(bootstrap, prefix, partitions=1)
    try:
        yield prefix, topics
    finally:
        await delete_topic_set(bootstrap, prefix)


async def test_live_trace_of_a_turn_and_traceparent_on_its_events(
    kafka_bootstrap: str,
    jaeger: Jaeger,
    client_tracer: TracerProvider,
    tmp_path: Path,
) -> None:
    async with _topic_set(kafka_bootstrap, "otel-live") as (prefix, topics):
        fleet = ActorFleet(kafka_bootstrap, prefix)
        try:
            await fleet.spawn(
                "--agent",
                f"{AGENTS}:continuing",
                env={
                    "RESUME_LEDGER_DIR": str(tmp_path),
                    "TURNSTREAM_OTEL_ENDPOINT": jaeger.otlp_endpoint,
                },
            )
            await fleet.wait_all_owned(1)
            loop_id = LoopId(uuid4())
            trace_id, client_span = await _submit_in_span(
                client_tracer, kafka_bootstrap, topics, loop_id
            )
            entries = await _ended(kafka_bootstrap, topics, loop_id, fleet)
            view = await _trace(jaeger, trace_id, steps=6, tools=5)
        finally:
            await fleet.close()
    _check_tree(view, client_span)
    (turn,) = view.named("invoke_agent")
    assert view.tag(turn, "turnstream.turn.outcome") == "completed"
    _check_event_headers(entries, trace_id, client_span)


def _check_event_headers(
    entries: list[JournalEntry], trace_id: int, client_span: int
) -> None:
    """The turn's events carry its trace: the span that committed each names it."""
    client = f"00-{trace_id:032x}-{client_span:016x}-01".encode()
    traced = [e for e in entries if e.event.header.turn_id is not None]
    assert traced
    for entry in traced:
        headers = dict(entry.headers)
        event = entry.event
        maker = (
            span_id_for("step", event.header.step_id)
            if isinstance(event, StepDone) and event.header.step_id is not None
            else span_id_for("turn", event.header.turn_id)  # type: ignore[arg-type]
        )
        assert headers[TRACEPARENT] == f"00-{trace_id:032x}-{maker:016x}-01".encode()
        if isinstance(event, TurnStarted):
            assert headers[TRACE_ORIGIN] == client


async def _owner_and_standby(
    fleet: ActorFleet, agent: str, ledger: Path
) -> tuple[ActorProcess, ActorProcess]:
    env = {"RESUME_LEDGER_DIR": str(ledger), "RESUME_HOLD_AT": "3"}
    first = await fleet.spawn("--agent", f"{AGENTS}:{agent}", env=env)

    async def ready() -> None:
        assert first.partitions == {0}, fleet.tails()

    await assert_eventually(ready, timeout=90)
    second = await fleet.spawn("--agent", f"{AGENTS}:{agent}", env=env)

    async def joined() -> None:
        assert second.partitions == set(), fleet.tails()

    await assert_eventually(joined, timeout=90)
    return first, second


async def _export(prefix: str, bootstrap: str, jaeger: Jaeger, loop_id: UUID) -> str:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "turnstream.cli.main",
        "traces",
        "export",
        "--bootstrap",
        bootstrap,
        "--topic-prefix",
        prefix,
        "--loop",
        str(loop_id),
        "--endpoint",
        jaeger.otlp_endpoint,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "COLUMNS": "200"},
    )
    out, _ = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, out.decode()
    return out.decode()


@pytest.mark.parametrize(
    ("agent", "steps", "tools", "outcome"),
    [
        # Steps 1-2 before the kill; 3 (its call's outcome unknown, not run
        # again: no timing), 4, 5 and the answer after TurnResumed.
        pytest.param("continuing", 6, 4, "completed", id="continued"),
        pytest.param("interrupting", 2, 2, "interrupted", id="interrupted"),
    ],
)
async def test_trace_rebuilt_from_the_journal_after_kill_nine(  # noqa: PLR0917 - fixtures and the case's parameters
    kafka_bootstrap: str,
    jaeger: Jaeger,
    client_tracer: TracerProvider,
    tmp_path: Path,
    agent: str,
    steps: int,
    tools: int,
    outcome: str,
) -> None:
    async with _topic_set(kafka_bootstrap, f"otel-kill-{agent}") as (prefix, topics):
        fleet = ActorFleet(
            kafka_bootstrap,
            prefix,
            extra=("--session-timeout-ms", "6000", "--commit-deadline", "20"),
        )
        try:
            owner, _standby = await _owner_and_standby(fleet, agent, tmp_path)
            loop_id = LoopId(uuid4())
            trace_id, client_span = await _submit_in_span(
                client_tracer, kafka_bootstrap, topics, loop_id
            )

            async def held() -> None:
                assert (tmp_path / "held").exists(), fleet.tails()
                done = [
                    e
                    for e in await _loop_entries(kafka_bootstrap, topics, loop_id)
                    if isinstance(e.event, StepDone)
                ]
                assert len(done) == 2

            await assert_eventually(held, timeout=60, interval=0.2)
            await fleet.kill(owner)  # SIGKILL while step 3's call holds
            entries = await _ended(kafka_bootstrap, topics, loop_id, fleet)
            printed = await _export(prefix, kafka_bootstrap, jaeger, loop_id)
        finally:
            await fleet.close()
    assert "of 1 turn(s)" in printed, printed
    view = await _trace(jaeger, trace_id, steps=steps, tools=tools)
    _check_tree(view, client_span)
    (turn,) = view.named("invoke_agent")
    assert view.tag(turn, "turnstream.turn.outcome") == outcome
    # The standby's records of the turn stay in the submit's trace too.
    _check_event_headers(entries, trace_id, client_span)
