"""A 30-second broker outage: actors back off instead of storming the port.

Two loop-actor processes run against a private broker; a shim below the
client library (``tests/support/connect_counter``) counts every TCP connection
attempt each actor makes to the broker's port. While the broker is down each
actor may try at most 5 connections a second on average; each actor logs the
outage and the recovery at most once, and at most once per partition; after
the broker is back, both serve turns again without being restarted.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
from pathlib import Path
from uuid import uuid4

import pytest
from tests.support.actors import ActorFleet, ActorProcess
from tests.support.eventually import assert_eventually
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    apply_topic_set,
    collect_garbage,
    collect_garbage_late,
    connect,
    unique_prefix,
)
from tests.support.private_broker import free_port

from turnstream.devbroker import DevBroker
from turnstream.events import TurnStarted
from turnstream.ids import LoopId
from turnstream.kafka.client.session import KafkaSession

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(300)]

OUTAGE_SECONDS = 30
PARTITIONS = 4
MAX_CONNECTS_PER_SECOND = 5
COUNTER_DIR = Path(__file__).parents[1] / "support" / "connect_counter"
# Lines that report the outage or the recovery (one each per actor, and one
# each per partition at most).
OUTAGE_LINES = (
    "Kafka unreachable",
    "Kafka reachable again",
    "partition takeover failed",
    "partition writer broken",
    "commands consumer cannot start yet",
    "fetch failed",
)


def _metric(port: int, name: str) -> float | None:
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}/metrics", timeout=2
        ) as reply:
            text = reply.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def _count(path: Path) -> int:
    return int(path.read_text() or 0) if path.exists() else 0


def _loop_per_partition(session: KafkaSession) -> dict[int, LoopId]:
    loops: dict[int, LoopId] = {}
    while len(loops) < PARTITIONS:
        loop_id = LoopId(uuid4())
        loops.setdefault(session.partition_of(loop_id), loop_id)
    return loops


def _repeated_lines(lines: list[str]) -> dict[str, int]:
    """Outage/recovery lines seen more than once (per partition where named)."""
    seen: dict[str, int] = {}
    for line in lines:
        for marker in OUTAGE_LINES:
            if marker in line:
                partition = ""
                if "partition=" in line:
                    partition = line.split("partition=", 1)[1].split()[0]
                key = f"{marker} {partition}".strip()
                seen[key] = seen.get(key, 0) + 1
    return {key: n for key, n in seen.items() if n > 1}


async def test_broker_outage_connections_back_off_and_actors_recover(
    own_broker: DevBroker, tmp_path: Path
) -> None:
    bootstrap = own_broker.settings.bootstrap
    broker_port = own_broker.settings.client_port
    prefix = unique_prefix("backoff")
    topics = await apply_topic_set(bootstrap, prefix, partitions=PARTITIONS)
    ports = [free_port(), free_port()]
    counts = [tmp_path / f"connects-{n}" for n in range(len(ports))]
    fleet = ActorFleet(
        bootstrap,
        prefix,
        # Turns that span the outage's start, and commits that give up in it,
        # so partitions break and their takeover is retried while it lasts.
        extra=("--model", "demo", "--chunk-delay", "1.0", "--commit-deadline", "5"),
        log_dir=tmp_path / "actors",
    )
    try:
        actors: list[ActorProcess] = [
            await fleet.spawn(
                "--metrics-port",
                str(port),
                env={
                    "PYTHONPATH": str(COUNTER_DIR),
                    "TURNSTREAM_TEST_CONNECTS": f"{count}:{broker_port}",
                },
            )
            for port, count in zip(ports, counts, strict=True)
        ]

        await fleet.wait_all_owned(PARTITIONS)
        session = await connect(bootstrap, topics)
        try:
            for loop_id in _loop_per_partition(session).values():
                await session.submit_to_loop(loop_id, "add 1 2")
        finally:
            await session.close()
        before = [len(a.lines) for a in actors]
        async with asyncio.timeout(120):
            await asyncio.to_thread(own_broker.down)
        started = time.monotonic()
        at_start = [_count(c) for c in counts]
        gated_start = [_metric(p, "turnstream_kafka_connects_total") for p in ports]

        def unreachable_seen() -> None:
            for port in ports:
                assert _metric(port, "turnstream_kafka_reachable") == 0.0

        await assert_eventually(
            unreachable_seen, timeout=OUTAGE_SECONDS, message="outage not seen"
        )
        # The scenario, not an assertion: the broker stays down this long.
        await asyncio.sleep(max(OUTAGE_SECONDS - (time.monotonic() - started), 0))
        elapsed = time.monotonic() - started
        rates = [
            (_count(c) - n) / elapsed for c, n in zip(counts, at_start, strict=True)
        ]
        gated_end = [_metric(p, "turnstream_kafka_connects_total") for p in ports]
        async with asyncio.timeout(120):
            await asyncio.to_thread(own_broker.up)

        def recovered() -> None:
            fleet.note_exits()
            assert fleet.self_exits == []
            for port in ports:
                assert _metric(port, "turnstream_kafka_reachable") == 1.0
                assert _metric(port, "turnstream_ready") == 1.0

        await assert_eventually(recovered, timeout=60, message="no recovery")
        session = await connect(bootstrap, topics)
        try:
            # A loop on every partition gets its turn answered again.
            for loop_id in _loop_per_partition(session).values():
                await session.submit_to_loop(loop_id, "add 1 2")
        finally:
            await session.close()
        print(f"connection attempts per second per actor while down: {rates}")
        # The actors' own count (/metrics) sees the attempts too.
        gated = [
            (end - start) / elapsed
            for start, end in zip(gated_start, gated_end, strict=True)
            if start is not None and end is not None
        ]
        print(f"turnstream_kafka_connects_total per second while down: {gated}")
        assert len(gated) == len(ports)
        assert all(0 < rate <= MAX_CONNECTS_PER_SECOND for rate in gated), gated
        assert all(rate <= MAX_CONNECTS_PER_SECOND for rate in rates), (
            f"connection attempts per second while down: {rates}"
        )
        for actor, start in zip(actors, before, strict=True):
            lines = actor.lines[start:]
            assert _repeated_lines(lines) == {}, "\n".join(lines[-40:])
    finally:
        await fleet.close()


DRAIN_SECONDS = 5.0


async def test_sigterm_while_the_broker_is_down_exits_cleanly(
    own_broker: DevBroker, tmp_path: Path
) -> None:
    """SIGTERM during an outage, with a turn running: exit 0, no traceback.

    The drain cannot end the turn (nothing commits while the broker is down),
    so it times out; the stop after it is bounded too, and nothing escapes as
    an uncaught exception.
    """
    bootstrap = own_broker.settings.bootstrap
    prefix = unique_prefix("sigterm")
    topics = await apply_topic_set(bootstrap, prefix, partitions=2)
    port = free_port()
    fleet = ActorFleet(
        bootstrap,
        prefix,
        extra=(
            "--model",
            "demo",
            "--chunk-delay",
            "1.0",
            "--drain-timeout",
            str(DRAIN_SECONDS),
        ),
        log_dir=tmp_path / "actors",
    )
    try:
        actor = await fleet.spawn("--metrics-port", str(port))

        def ready() -> None:
            fleet.note_exits()
            assert fleet.self_exits == []
            assert actor.partitions == {0, 1}, fleet.tails()

        await assert_eventually(ready, timeout=90, message="actor not ready")
        session = await connect(bootstrap, topics)
        try:
            # A turn that streams for seconds: started, not ended, when the
            # broker goes down.
            turn = await session.submit_turn(
                "add 1 2", loop_id=LoopId(uuid4()), no_fold=True
            )
            async with asyncio.timeout(60), turn:
                async for event in turn:
                    if isinstance(event, TurnStarted):
                        break
        finally:
            await session.close()
        async with asyncio.timeout(120):
            await asyncio.to_thread(own_broker.down)
        await assert_eventually(
            lambda: _metric(port, "turnstream_kafka_reachable") == 0.0,
            timeout=30,
            message="outage not seen",
        )
        started = time.monotonic()
        code = await fleet.terminate(actor, timeout=120)
        took = time.monotonic() - started
        text = "\n".join(actor.lines)
        assert "Traceback" not in text, text[-4000:]
        assert code == 0, text[-2000:]
        assert "drain timeout" in text, text[-2000:]  # the turn was running
        # The drain, then a stop that waits on no commit.
        assert took < DRAIN_SECONDS + 5, (took, text[-2000:])
    finally:
        await fleet.close()
