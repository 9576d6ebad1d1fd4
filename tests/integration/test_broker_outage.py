"""A 30-second broker outage under load: actors stay, logs stay quiet, nothing lost.

Two loop-actor processes (``python -m turnstream.loop_actor``) run against a
private broker (free ports, its own data directory) while loops submit turns.
The broker is stopped for 30 s and started again. Both actors must stay alive,
each must write fewer than 50 log lines for the whole outage, ``/metrics`` must
show the broker unreachable during it and one outage after it, and every
submit must be answered exactly once (the journal invariants).
"""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path
from uuid import UUID, uuid4

import pytest
from tests.support.actors import ActorFleet, ActorProcess
from tests.support.eventually import assert_eventually
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    PROJECT_DIR,
    apply_topic_set,
    check_journal,
    collect_garbage,
    collect_garbage_late,
    read_all,
    unique_prefix,
)
from tests.support.private_broker import free_port

from turnstream.devbroker import DevBroker
from turnstream.errors import CommandNotConfirmedError
from turnstream.ids import CommandId, LoopId
from turnstream.kafka.client.session import KafkaSession

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(420)]

OUTAGE_SECONDS = 30
PARTITIONS = 4


def _metric(port: int, name: str) -> float | None:
    # A blocking read with a short timeout: the actors answer at once.
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


async def test_broker_outage_keeps_actors_quiet_and_loses_nothing(
    own_broker: DevBroker, tmp_path: Path
) -> None:
    bootstrap = own_broker.settings.bootstrap
    prefix = unique_prefix("outage")
    topics = await apply_topic_set(bootstrap, prefix, partitions=PARTITIONS)
    ports = [free_port(), free_port()]
    fleet = ActorFleet(
        bootstrap, prefix, extra=("--model", "demo"), log_dir=tmp_path / "actors"
    )
    session = await KafkaSession.connect(
        bootstrap, topics=topics, capacity=10_000, request_timeout=3.0
    )
    submitted: list[UUID] = []
    refusals: list[str] = []
    stop = asyncio.Event()
    try:
        actors: list[ActorProcess] = [
            await fleet.spawn("--metrics-port", str(port)) for port in ports
        ]

        await fleet.wait_all_owned(PARTITIONS)

        async def submit_forever(loop_id: LoopId) -> None:
            while not stop.is_set():
                command_id = CommandId(uuid4())
                while not stop.is_set():  # unconfirmed: sent again, same id
                    try:
                        await session.submit_to_loop(
                            loop_id, "add 1 2", command_id=command_id
                        )
                    except CommandNotConfirmedError as exc:
                        refusals.append(exc.reason)
                        await asyncio.sleep(1.0)
                        continue
                    submitted.append(command_id)
                    break
                await asyncio.sleep(0.5)

        load = [asyncio.create_task(submit_forever(LoopId(uuid4()))) for _ in range(8)]
        await asyncio.sleep(5)
        before = [len(a.lines) for a in actors]
        async with asyncio.timeout(120):
            await asyncio.to_thread(own_broker.down)

        def unreachable_seen() -> None:
            for port in ports:
                assert _metric(port, "turnstream_kafka_reachable") == 0.0

        await assert_eventually(
            unreachable_seen,
            timeout=OUTAGE_SECONDS - 5,
            message="outage not on /metrics",
        )
        await asyncio.sleep(OUTAGE_SECONDS - 10)
        async with asyncio.timeout(120):
            await asyncio.to_thread(own_broker.up)

        def recovered() -> None:
            for port in ports:
                assert _metric(port, "turnstream_kafka_reachable") == 1.0
                outages = _metric(port, "turnstream_kafka_outages_total")
                assert outages is not None
                assert outages >= 1

        await assert_eventually(
            recovered, timeout=90, message="no recovery on /metrics"
        )
        confirmed_before, refused_before = len(submitted), len(refusals)

        def confirmed_again() -> None:
            assert len(submitted) > confirmed_before + 8, refusals[refused_before:][-5:]

        # Clients get their sends confirmed again within a bound, not "some time".
        await assert_eventually(
            confirmed_again, timeout=60, message="no submit confirmed after recovery"
        )
        stop.set()
        async with asyncio.timeout(60):
            await asyncio.gather(*load)
        outage_lines = [
            actor.lines[start:] for actor, start in zip(actors, before, strict=True)
        ]

        async def all_answered_and_ended() -> None:
            # A submit's answer is its TurnStarted; the turn's end is committed
            # after it, so the invariants are awaited too, within the bound.
            entries = await read_all(bootstrap, topics, PARTITIONS)
            answered = {
                e.event.reply_to() for e in entries if e.event.reply_to() is not None
            }
            assert set(submitted) <= answered
            check_journal(entries, submitted)

        await assert_eventually(all_answered_and_ended, timeout=120, interval=1.0)
        fleet.note_exits()
        assert fleet.self_exits == []
        assert all(a.alive for a in actors)
        for lines in outage_lines:
            assert len(lines) < 50, "\n".join(lines[-60:])
    finally:
        stop.set()
        await fleet.close()
        await session.close()
