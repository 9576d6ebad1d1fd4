"""turnstream, embedded and on Kafka, driven like the peers.

* **embedded**: one :class:`~turnstream.runtime.LocalSession` over the
  in-memory journal and hub (``turnstream.memory.embedded_session``); one loop
  per conversation, created inside the measured window (``create_loop``
  commits its ``LoopStarted``); the model is ``turnstream.testing.ScriptedModel``
  (zero latency), the tool a ``FunctionTool``.
* **kafka**: the in-process ``LoopActorService`` of the broker benchmarks
  (``bench/_support.service_for``, a fresh 4-partition topic set) and a
  :class:`~turnstream.kafka.session_client.KafkaSession` client in the same
  process. The client submits each turn and waits for its terminal (the turn's
  latency ends there). Deltas travel on their own topic, unordered with the
  terminals, so they are counted per phase: every text ``TokenDelta`` the
  client receives is tallied, and at the end of a phase (inside the measured
  window) the client waits until all ``turns x CHUNKS`` have arrived, or none
  has for ``DELTA_QUIET_S``; a shortfall fails the system. CPU: this process
  (service + client) plus the broker JVM.
* **kafka, service as a process**: the deployable itself, ``python -m
  turnstream.loop_actor --agent bench_agent:<kind>_agent`` with its defaults
  (:mod:`bench_agent`: the same script as a stateless model), and the same
  client in this process. CPU: this process (the client) plus the broker JVM
  and the loop-actor process. Tool runs are counted from the ``add`` results
  the client reads in the journal's ``StepDone`` events (the tool runs in the
  other process); deltas sent and dropped come from the service's ``/metrics``.

Both subscribe to every event once and route them to per-loop queues.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from workload import (
    ANSWER_CHUNKS,
    TOOL_ARGS,
    TOOL_NAME,
    ServerProcess,
    TurnSeen,
)

from turnstream.content import (
    AIMessage,
    TextBlock,
    TextChunk,
    ToolResultMessage,
    text_of,
)
from turnstream.events import AnyEvent, StepDone, TokenDelta, TurnDone
from turnstream.ids import LoopId
from turnstream.runtime.config import LoopConfig
from turnstream.runtime.ports import ToolContext
from turnstream.runtime.subscription import EventFilter, Subscription
from turnstream.testing import FunctionTool, ScriptedModel, call, text_step, tool_step

HERE = Path(__file__).resolve().parent
BROKER_PID_FILE = HERE.parent.parent / "var" / "kafka" / "broker.pid"
SERVICE_READY_S = 90.0
DELTA_QUIET_S = 3.0


def scripts(kind: str, turns: int) -> list[Any]:
    """The model's scripts for one conversation of ``turns`` turns."""
    answer = text_step(*ANSWER_CHUNKS)
    if kind == "text":
        return [answer for _ in range(turns)]
    ask = tool_step(call(TOOL_NAME, json.dumps(TOOL_ARGS)))
    return [step for _ in range(turns) for step in (ask, answer)]


class ToolRuns(Protocol):
    """Where a system's ``add`` runs are counted, per loop."""

    runs: Counter[uuid.UUID]


@dataclass
class AddTool:
    """``add(a, b)``, counting its runs per loop."""

    runs: Counter[uuid.UUID] = field(default_factory=Counter)

    def tool(self) -> FunctionTool:
        """The turnstream tool."""

        def add(input_json: str, ctx: ToolContext) -> str:
            args = json.loads(input_json)
            self.runs[ctx.loop_id] += 1
            return str(int(args["a"]) + int(args["b"]))

        return FunctionTool(TOOL_NAME, fn=add, description="Add two integers.")


ADD_RESULT = str(sum(TOOL_ARGS.values()))


def answer_text(message: AIMessage) -> str:
    """The text blocks of a final answer, joined."""
    return "".join(b.text for b in message.blocks if isinstance(b, TextBlock))


class Router:
    """One subscription to everything, routed to per-loop queues."""

    def __init__(
        self, subscription: Subscription, tool_results: Counter[uuid.UUID] | None = None
    ) -> None:
        self._subscription = subscription
        self._tool_results = tool_results
        self.inboxes: defaultdict[uuid.UUID, asyncio.Queue[AnyEvent]] = defaultdict(
            asyncio.Queue
        )
        self._task: asyncio.Task[None] | None = None
        self.text_deltas = 0
        self.last_delta = 0.0

    def start(self) -> None:
        """Start routing."""
        self._task = asyncio.create_task(self._route())

    async def _route(self) -> None:
        async for event in self._subscription:
            if isinstance(event, TokenDelta) and isinstance(event.chunk, TextChunk):
                self.text_deltas += 1
                self.last_delta = time.perf_counter()
            loop_id = event.header.loop_id
            if (
                self._tool_results is not None
                and loop_id is not None
                and isinstance(event, StepDone)
            ):
                self._tool_results[loop_id] += sum(
                    isinstance(m, ToolResultMessage) and text_of(m.blocks) == ADD_RESULT
                    for m in event.messages
                )
            if loop_id is not None:
                self.inboxes[loop_id].put_nowait(event)

    async def settle(self, expected: int) -> int:
        """Wait for ``expected`` text deltas (or quiet); the count so far."""
        self.last_delta = max(self.last_delta, time.perf_counter())
        while self.text_deltas < expected:
            if time.perf_counter() - self.last_delta > DELTA_QUIET_S:
                break
            await asyncio.sleep(0.01)
        return self.text_deltas

    async def stop(self) -> None:
        """Stop routing."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class TurnstreamConversation:
    """One loop: submit, then read its queue until the turn's terminal."""

    def __init__(
        self,
        submit: Any,
        loop_id: LoopId,
        router: Router,
        tool: ToolRuns,
    ) -> None:
        self._submit = submit
        self.loop_id = loop_id
        self._inbox = router.inboxes[loop_id]
        self._tool = tool

    async def turn(self, text: str) -> TurnSeen:
        """Submit ``text``; wait for the terminal, counting text deltas seen."""
        runs0 = self._tool.runs[self.loop_id]
        chunks = 0
        await self._submit(self.loop_id, text)
        answer = ""
        answered_at = 0.0
        ended = "done"
        while True:
            event = await self._inbox.get()
            if isinstance(event, TokenDelta):
                chunks += isinstance(event.chunk, TextChunk)
            elif event.ends_turn():
                answered_at = time.perf_counter()
                if not isinstance(event, TurnDone):
                    ended = event.type_name
                    break
                answer = answer_text(event.message)
                break
        return TurnSeen(
            chunks=chunks,
            answer=answer,
            tool_runs=self._tool.runs[self.loop_id] - runs0,
            answered_at=answered_at,
            ended=ended,
        )


# ---------------------------------------------------------------- embedded


@dataclass
class EmbeddedSystem:
    """turnstream embedded: ``LocalSession`` in memory."""

    session: Any
    router: Router
    tool: AddTool
    kind: str
    turns: int
    name: str = "turnstream embedded (LocalSession, in memory)"
    streamed: bool = True
    concurrent: bool = True

    async def conversation(self, index: int) -> TurnstreamConversation:
        """A new loop with its own scripted model."""
        config = LoopConfig(
            model="bench-model", tools=(self.tool.tool(),), agent_name="bench"
        )
        loop_id = await self.session.create_loop(
            config, ScriptedModel(scripts(self.kind, self.turns))
        )
        return TurnstreamConversation(
            self.session.submit_to_loop,
            loop_id,
            self.router,
            self.tool,
        )

    def server_pids(self) -> Sequence[ServerProcess]:
        """No server."""
        return ()


@contextlib.asynccontextmanager
async def open_embedded(
    kind: str, turns: int, **_: Any
) -> AsyncIterator[EmbeddedSystem]:
    """An embedded session for one kind of turn."""
    from turnstream.memory import embedded_session

    session = embedded_session()
    async with session:
        router = Router(
            session.subscribe_events(EventFilter.everything(), capacity=10_000_000)
        )
        router.start()
        try:
            yield EmbeddedSystem(session, router, AddTool(), kind, turns)
        finally:
            await router.stop()


# ------------------------------------------------------------------- kafka


def broker_pid() -> int | None:
    """The local broker's pid (``var/kafka/broker.pid`` of this checkout)."""
    with contextlib.suppress(OSError, ValueError):
        pid = int(BROKER_PID_FILE.read_text().strip())
        if Path(f"/proc/{pid}").exists():
            return pid
    return None


@dataclass
class KafkaSystem:
    """turnstream on Kafka: the service plus a ``KafkaSession`` client."""

    client: Any
    router: Router
    tool: ToolRuns
    metrics: Any
    broker: int | None
    name: str = "turnstream on Kafka (service + KafkaSession client)"
    streamed: bool = True
    concurrent: bool = True
    chunks_per_phase: bool = True
    """Text deltas are checked per phase (:meth:`settle`), not per turn."""

    def delta_count(self) -> int:
        """Text deltas received so far."""
        return self.router.text_deltas

    async def settle(self, expected: int) -> int:
        """Wait for the text delta count to reach ``expected`` (or quiet)."""
        return await self.router.settle(expected)

    async def conversation(self, index: int) -> TurnstreamConversation:
        """A fresh loop id (the service creates the loop on its first input)."""
        return TurnstreamConversation(
            self.client.submit_to_loop,
            LoopId(uuid.uuid4()),
            self.router,
            self.tool,
        )

    def server_pids(self) -> Sequence[ServerProcess]:
        """The broker JVM."""
        if self.broker is None:
            return ()
        return (ServerProcess("kafka broker", self.broker),)

    def facts(self) -> dict[str, Any]:
        """The service's counters (deltas sent and dropped, transactions)."""
        m = self.metrics
        return {
            "deltas_sent": m.deltas_sent,
            "deltas_dropped": m.deltas_dropped,
            "transactions": m.commits,
            "commit_failures": getattr(m, "commit_failures", None),
            "commit_retries": getattr(m, "commit_retries", None),
            "terminals": dict(m.terminals),
            "broker_pid": self.broker,
        }


@contextlib.asynccontextmanager
async def open_kafka(
    kind: str, turns: int, *, bootstrap: str, partitions: int = 4, **_: Any
) -> AsyncIterator[KafkaSystem]:
    """A fresh topic set, the in-process service and a client."""
    from _support import ModelPool, service_for, topic_set, wait_until

    # The package root exports both, whichever module holds them.
    from turnstream.kafka import KafkaSession, ServiceMetrics

    tool = AddTool()
    pool = ModelPool(
        make=lambda _loop: ScriptedModel(scripts(kind, turns)), tools=(tool.tool(),)
    )
    async with topic_set(bootstrap, f"peers-{kind}", partitions=partitions) as (
        prefix,
        topics,
    ):
        metrics = ServiceMetrics()
        service = service_for(
            bootstrap, topics, group_id=f"{prefix}actors", models=pool, metrics=metrics
        )
        async with service:
            await wait_until(lambda: metrics.ready, timeout=60)
            client = await KafkaSession.connect(
                bootstrap, topics=topics, capacity=10_000_000, request_timeout=30.0
            )
            router = Router(client.subscribe_events(EventFilter.everything()))
            router.start()
            system = KafkaSystem(client, router, tool, metrics, broker_pid())
            try:
                yield system
            finally:
                await router.stop()
                await client.close()


# ------------------------------------------------- kafka, service as a process


@dataclass
class JournalToolRuns:
    """Tool runs as the client sees them: ``add`` results committed per loop."""

    runs: Counter[uuid.UUID] = field(default_factory=Counter)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2.0) as response:  # noqa: S310 - local
            return int(response.status), response.read().decode()
    except (OSError, urllib.error.URLError):
        return 0, ""


def _counter_value(metrics_text: str, name: str) -> int | None:
    for line in metrics_text.splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    return None


@dataclass
class KafkaProcessSystem(KafkaSystem):
    """turnstream on Kafka as deployed: ``turnstream actor run`` + a client."""

    service: subprocess.Popen[bytes] | None = None
    metrics_url: str = ""
    name: str = "turnstream on Kafka (actor run process + KafkaSession client)"

    def server_pids(self) -> Sequence[ServerProcess]:
        """The broker JVM and the loop-actor process."""
        pids = list(super().server_pids())
        if self.service is not None:
            pids.append(ServerProcess("loop-actor process", self.service.pid))
        return pids

    def facts(self) -> dict[str, Any]:
        """The service's counters, read from its ``/metrics``."""
        _, text = _http_get(self.metrics_url)
        return {
            "deltas_sent": _counter_value(text, "turnstream_deltas_sent_total"),
            "deltas_dropped": _counter_value(text, "turnstream_delta_drops_total"),
            "transactions": _counter_value(text, "turnstream_commits_total"),
            "broker_pid": self.broker,
            "service_pid": self.service.pid if self.service is not None else None,
        }


@contextlib.asynccontextmanager
async def open_kafka_process(
    kind: str, turns: int, *, bootstrap: str, partitions: int = 4, **_: Any
) -> AsyncIterator[KafkaProcessSystem]:
    """A fresh topic set, ``turnstream actor run --agent`` and a client.

    The service is the deployable itself (``_support.actor_processes``: its
    defaults, the agent of :mod:`bench_agent`), started from this directory so
    the agent module is importable; it is stopped with SIGTERM.
    """
    from _support import actor_processes, topic_set
    from turnstream.kafka import KafkaSession

    async with topic_set(bootstrap, f"peers-proc-{kind}", partitions=partitions) as (
        prefix,
        topics,
    ):
        port = _free_port()
        with (
            tempfile.TemporaryDirectory() as logs,
            actor_processes(
                1,
                bootstrap=bootstrap,
                prefix=prefix,
                group_id=f"{prefix}actors",
                agent=f"bench_agent:{kind}_agent",
                extra=("--metrics-port", str(port)),
                cwd=HERE,
                log_dir=Path(logs),
            ) as (service,),
        ):
            ready = f"http://127.0.0.1:{port}/ready"
            deadline = time.monotonic() + SERVICE_READY_S
            while (await asyncio.to_thread(_http_get, ready))[0] != 200:
                if service.poll() is not None or time.monotonic() > deadline:
                    log = (Path(logs) / "actor-0.log").read_bytes()
                    err = log.decode(errors="replace")[-800:]
                    raise RuntimeError(f"loop-actor process not ready: {err}")
                await asyncio.sleep(0.2)
            client = await KafkaSession.connect(
                bootstrap, topics=topics, capacity=10_000_000, request_timeout=30.0
            )
            runs = JournalToolRuns()
            subscription = client.subscribe_events(EventFilter.everything())
            router = Router(subscription, runs.runs)
            router.start()
            system = KafkaProcessSystem(
                client,
                router,
                runs,
                None,
                broker_pid(),
                service=service,
                metrics_url=f"http://127.0.0.1:{port}/metrics",
            )
            try:
                yield system
            finally:
                await router.stop()
                await client.close()
