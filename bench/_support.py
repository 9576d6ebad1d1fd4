"""Shared helpers of the broker benchmarks: topic sets, services, machine facts.

Every benchmark gets its own uniquely prefixed topic set (``bench-<what>-<hex>.``)
and consumer group, and deletes the topics again when it is done, so runs never
see each other's records. Nothing here asserts timings; the helpers only measure.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.partitioner import DefaultPartitioner

from turnstream.commands import SubmitInput
from turnstream.content import TextBlock, UserMessage
from turnstream.ids import LoopId
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.actor.service import LoopActorService, ServiceSettings
from turnstream.kafka.actor.writer import WriterSettings
from turnstream.kafka.admin.topics import (
    apply_topics,
    delete_topics,
    load_topic_set,
    resolve_topics,
)
from turnstream.kafka.clients import KafkaClients
from turnstream.kafka.connection import KafkaConnection
from turnstream.kafka.records import loop_key
from turnstream.kafka.topology import TopicNames
from turnstream.runtime.config import LoopConfig
from turnstream.runtime.hooks import Tracer
from turnstream.runtime.model_client import ModelClient
from turnstream.runtime.ports import Tool
from turnstream.runtime.session import LoopSetup
from turnstream.runtime.tracing import TraceContexts
from turnstream.wire import Codec, default_codec

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "bench" / "results"
# The lab scripts' output: scratch, not committed (results/ holds what is cited).
LAB_OUT_DIR = ROOT / "bench" / "lab" / "out"
TOPICS_YAML = ROOT / "infra" / "topics.yaml"
DEFAULT_BOOTSTRAP = "127.0.0.1:19092"


def quiet_kafka_logs() -> None:
    """Hide aiokafka's retry chatter (fresh topics answer NotLeader at first)."""
    import logging

    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


def bootstrap_servers() -> str:
    """``KAFKA_BOOTSTRAP_SERVERS`` or the local development broker."""
    return os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip() or DEFAULT_BOOTSTRAP


def unique_prefix(stem: str) -> str:
    """A fresh topic-name prefix such as ``bench-turns-1a2b3c4d.``."""
    clean = re.sub(r"[^A-Za-z0-9-]+", "-", stem)[:30].strip("-") or "b"
    return f"bench-{clean}-{uuid.uuid4().hex[:8]}."


def clients_for(bootstrap: str, client_id: str = "bench") -> KafkaClients:
    """A client factory with generous timeouts (a loaded shared box)."""
    return KafkaClients(
        connection=KafkaConnection(
            bootstrap=bootstrap, request_timeout=30.0, connect_timeout=30.0
        ),
        client_id=client_id,
    )


async def _wait_visible(bootstrap: str, names: Sequence[str], partitions: int) -> None:
    """Wait until every topic is in the metadata with every partition led."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        async with asyncio.timeout(60):
            while True:
                described = await admin.describe_topics(list(names))
                led = [
                    entry["error_code"] == 0
                    and len(entry["partitions"]) == partitions
                    and all(p["leader"] >= 0 for p in entry["partitions"])
                    for entry in described
                ]
                if all(led):
                    return
                await asyncio.sleep(0.1)
    finally:
        await admin.close()


@contextlib.asynccontextmanager
async def topic_set(
    bootstrap: str, stem: str, *, partitions: int
) -> AsyncIterator[tuple[str, TopicNames]]:
    """Create an isolated turnstream topic set; delete it afterwards."""
    prefix = unique_prefix(stem)
    conn = KafkaConnection(bootstrap=bootstrap, request_timeout=30.0)
    desired = resolve_topics(
        load_topic_set(TOPICS_YAML), prefix=prefix, partitions=partitions
    )
    await apply_topics(conn, desired)
    try:
        await _wait_visible(bootstrap, [t.name for t in desired], partitions)
        yield prefix, TopicNames.with_affixes(prefix=prefix)
    finally:
        with contextlib.suppress(Exception):
            await delete_topics(conn, [t.name for t in desired])


@dataclass
class ModelPool:
    """Per-loop model clients for an in-process service."""

    make: Callable[[LoopId], ModelClient]
    tools: tuple[Tool, ...] = ()

    def setup_for(self, loop_id: LoopId, _agent: str = "") -> LoopSetup:
        """The setup of one loop: a fresh model client from ``make``."""
        config = LoopConfig(
            model="bench-model", tools=self.tools, commit_timeout=60.0, agent_name="b"
        )
        return LoopSetup(config=config, model=self.make(loop_id))


def service_for(
    bootstrap: str,
    topics: TopicNames,
    *,
    group_id: str,
    models: ModelPool,
    metrics: ServiceMetrics,
    codec: Codec | None = None,
    traces: TraceContexts | None = None,
    tracer: Tracer | None = None,
) -> LoopActorService:
    """An in-process loop-actor service with the deployable's defaults."""
    settings = ServiceSettings(
        group_id=group_id,
        topics=topics,
        txn_prefix=group_id,
        session_timeout_ms=10_000,
        heartbeat_interval_ms=3_000,
        writer=WriterSettings(commit_deadline=30.0),
        stop_timeout=15.0,
    )
    return LoopActorService(
        clients=clients_for(bootstrap, "bench-actor"),
        settings=settings,
        codec=codec or default_codec(),
        setup_for=models.setup_for,
        metrics=metrics,
        traces=traces,
        tracer=tracer,
    )


async def wait_until(
    predicate: Callable[[], bool],
    *,
    timeout: float,  # noqa: ASYNC109 - applied here with asyncio.timeout
    interval: float = 0.01,
) -> None:
    """Poll ``predicate`` until it holds; ``TimeoutError`` after ``timeout`` s.

    Polling, not an event: the predicates read counters that other tasks (the
    service's metrics, a record counter) update without signalling.
    """
    async with asyncio.timeout(timeout):
        while not predicate():  # noqa: ASYNC110 - see docstring
            await asyncio.sleep(interval)


def submit_command(
    loop_id: uuid.UUID, session_id: uuid.UUID, text: str, *, no_fold: bool = True
) -> SubmitInput:
    """A ``SubmitInput`` for ``loop_id``."""
    return SubmitInput(
        command_id=uuid.uuid4(),
        session_id=session_id,
        loop_id=loop_id,
        created_at=datetime.now(UTC),
        message=UserMessage(blocks=(TextBlock(text=text),)),
        no_fold=no_fold,
    )


async def produce_commands(
    bootstrap: str, topic: str, commands: Iterable[SubmitInput]
) -> int:
    """Send pre-encoded commands (idempotent producer, batched); return count."""
    codec = default_codec()
    encoded = [
        (loop_key(c.loop_id), codec.marshal_command(c), codec.kafka_headers(c))
        for c in commands
    ]
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        enable_idempotence=True,
        acks="all",
        linger_ms=5,
    )
    await producer.start()
    try:
        futures = [
            await producer.send(topic, value, key=key, headers=headers)
            for key, value, headers in encoded
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return len(encoded)


def partition_of(loop_id: uuid.UUID, partitions: int) -> int:
    """The partition the default partitioner puts ``loop_id``'s records on."""
    every = list(range(partitions))
    return int(DefaultPartitioner()(loop_key(loop_id), every, every))


def loops_balanced(count: int, partitions: int) -> list[uuid.UUID]:
    """``count`` loop ids spread evenly over ``partitions`` (round robin)."""
    buckets: list[list[uuid.UUID]] = [[] for _ in range(partitions)]
    per = math.ceil(count / partitions)
    while sum(len(b) for b in buckets) < count:
        loop = uuid.uuid4()
        bucket = buckets[partition_of(loop, partitions)]
        if len(bucket) < per:
            bucket.append(loop)
    ordered = [b[i] for i in range(per) for b in buckets if i < len(b)]
    return ordered[:count]


def percentiles(samples: Sequence[float], scale: float = 1000.0) -> dict[str, Any]:
    """p50/p90/p99/max (nearest rank) of ``samples``, times ``scale`` (ms)."""
    if not samples:
        return {"n": 0}
    ordered = sorted(samples)

    def rank(q: float) -> float:
        index = max(0, math.ceil(q * len(ordered)) - 1)
        return round(ordered[index] * scale, 2)

    return {
        "n": len(ordered),
        "p50": rank(0.50),
        "p90": rank(0.90),
        "p99": rank(0.99),
        "max": round(ordered[-1] * scale, 2),
    }


def cpu_model() -> str:
    """The CPU model name from ``/proc/cpuinfo``."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def load_average() -> list[float]:
    """The 1/5/15-minute load averages."""
    return [round(x, 2) for x in os.getloadavg()]


def uptime_line() -> str:
    """What ``uptime`` prints."""
    try:
        out = subprocess.run(
            ["uptime"], capture_output=True, text=True, check=False, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


def machine() -> dict[str, Any]:
    """Facts about the machine and the software under test."""
    import aiokafka
    import fastavro
    import pydantic

    try:
        import fastavro._write as fast_write

        c_writer = bool(getattr(fast_write, "__file__", "").endswith(".so"))
    except ImportError:
        c_writer = False
    return {
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "aiokafka": aiokafka.__version__,
        "fastavro": fastavro.__version__,
        "fastavro_c_extension": c_writer,
        "pydantic": pydantic.VERSION,
        "broker": "Apache Kafka 4.1.1, one local KRaft node (turnstream broker)",
    }


def rss_bytes(pid: int) -> int:
    """Resident set size (``VmRSS``) of process ``pid`` in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise ValueError(f"no VmRSS for pid {pid}")


class Stopwatch:
    """Wall and process-CPU time of a block (``wall``/``cpu`` in seconds)."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0
        self._wall0 = 0.0
        self._cpu0 = 0.0

    def __enter__(self) -> Stopwatch:
        self._wall0 = time.perf_counter()
        self._cpu0 = time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self._wall0
        self.cpu = time.process_time() - self._cpu0


def write_json(path: Path, doc: Any) -> None:
    """Write ``doc`` as indented JSON to ``path``, creating its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def now_iso() -> str:
    """The current UTC time, to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


async def group_state(bootstrap: str, group_id: str) -> tuple[str, int]:
    """The consumer group's state and how many members hold an assignment."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (response,) = await admin.describe_consumer_groups([group_id])
    finally:
        await admin.close()
    _error, _group, state, *_rest = response.groups[0]
    members = response.groups[0][5]
    # An assignment naming no partition is 16 bytes or fewer (version, topic
    # count 0 or one topic with zero partitions): count only real ones.
    assigned = sum(1 for m in members if len(m[4]) > 16)
    return str(state), assigned


class TypeCounter:
    """Counts committed journal records by their ``ts-type`` header, live.

    Reads every partition of ``topic`` ``read_committed`` from the end offsets
    at :meth:`start`; no decoding (the codec puts the type in a header).
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.counts: Counter[str] = Counter()
        self.last_seen = 0.0
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            isolation_level="read_committed",
        )
        self._tps = [TopicPartition(topic, p) for p in range(partitions)]
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Position at the end of every partition and start counting."""
        await self._consumer.start()
        self._consumer.assign(self._tps)
        await self._consumer.seek_to_end(*self._tps)
        for tp in self._tps:
            await self._consumer.position(tp)
        self._task = asyncio.create_task(self._count())

    async def _count(self) -> None:
        while True:
            batch = await self._consumer.getmany(timeout_ms=200)
            for records in batch.values():
                for record in records:
                    kind = dict(record.headers).get("ts-type", b"?").decode()
                    self.counts[kind] += 1
                if records:
                    self.last_seen = time.perf_counter()

    async def stop(self) -> None:
        """Stop counting and close the consumer."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._consumer.stop()


@contextlib.contextmanager
def actor_processes(
    count: int,
    *,
    bootstrap: str,
    prefix: str,
    group_id: str,
    tools: str = "none",
    agent: str | None = None,
    extra: Sequence[str] = (),
    cwd: Path = ROOT,
    log_dir: Path | None = None,
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` ``python -m turnstream.loop_actor`` processes; stopped at exit.

    They host the demo model with ``tools``, or ``agent`` (an import path,
    importable from ``cwd``); ``extra`` flags go to every process. Each gets
    SIGTERM (an ordered shutdown) and, after 30 s, SIGKILL.
    """
    hosted = ["--agent", agent] if agent else ["--model", "demo", "--tools", tools]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        for i in range(count):
            log = (
                open(log_dir / f"actor-{i}.log", "wb")  # noqa: SIM115 - closed below
                if log_dir is not None
                else None
            )
            logs.append(log)
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "turnstream.loop_actor",
                        "--bootstrap",
                        bootstrap,
                        "--group-id",
                        group_id,
                        "--topic-prefix",
                        prefix,
                        # One prefix for the group: a partition's new owner
                        # must fence its old one (same transactional id).
                        "--txn-prefix",
                        group_id,
                        *hosted,
                        "--log-level",
                        "WARNING",
                        *extra,
                    ],
                    cwd=cwd,
                    env=env,
                    stdout=log or subprocess.DEVNULL,
                    stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
                )
            )
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in procs:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        for log in logs:
            if log is not None:
                log.close()
