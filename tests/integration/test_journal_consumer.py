"""The downstream journal consumer against the real broker.

- killed with SIGKILL mid-stream (a child process, ``tests/support/journal_child``)
  and restarted in the same group, it hands over every event at least once and
  loses none, including events written while it was down;
- the start position of a new group: the beginning, only new events, or a time;
- two members of one group split the partitions and, together, see every event.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID, uuid4

import pytest
from aiokafka import AIOKafkaProducer
from tests.support.eventually import assert_eventually
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    apply_topic_set,
    clients_for,
    collect_garbage,
    collect_garbage_late,
    delete_topic_set,
    unique_prefix,
)

from turnstream.events import Header, LoopIdle
from turnstream.kafka.client import JournalConsumer, JournalRecord
from turnstream.kafka.records import loop_key
from turnstream.kafka.topology import TopicNames
from turnstream.wire import default_codec

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
LOOPS = [UUID(int=i + 1) for i in range(8)]  # spread over both partitions


async def _write_events(bootstrap: str, topics: TopicNames, count: int) -> list[UUID]:
    """``count`` journal events over :data:`LOOPS`; their event ids, in order."""
    codec = default_codec()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    await producer.start()
    ids: list[UUID] = []
    try:
        for n in range(count):
            loop = LOOPS[n % len(LOOPS)]
            event = LoopIdle(
                header=Header(
                    event_id=uuid4(),
                    session_id=loop,
                    loop_id=loop,
                    created_at=datetime.now(UTC),
                )
            )
            await producer.send(
                topics.events, codec.marshal_event(event), key=loop_key(loop)
            )
            assert event.header.event_id is not None
            ids.append(event.header.event_id)
        await producer.flush()
    finally:
        await producer.stop()
    return ids


@pytest.fixture
async def lane(kafka_bootstrap: str) -> AsyncIterator[tuple[str, TopicNames]]:
    prefix = unique_prefix("journal-consumer")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=2)
    try:
        yield prefix, topics
    finally:
        await delete_topic_set(kafka_bootstrap, prefix)


async def _child(bootstrap: str, prefix: str, out: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.support.journal_child",
        bootstrap,
        prefix,
        f"{prefix}downstream",
        str(out),
        "0.002",
        cwd=ROOT,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        env={
            **os.environ,
            "PYTHONPATH": f"{ROOT / 'services'}{os.pathsep}{ROOT}",
            "PYTHONUNBUFFERED": "1",
        },
    )


def _handled(out: Path) -> list[UUID]:
    if not out.exists():
        return []
    lines = out.read_text().splitlines()
    return [UUID(line.split()[0]) for line in lines if line.count(" ") == 2]


async def test_kill_nine_mid_stream_then_restart_loses_nothing(
    kafka_bootstrap: str, lane: tuple[str, TopicNames], tmp_path: Path
) -> None:
    """Every event is handled at least once across a SIGKILL and a restart."""
    prefix, topics = lane
    out = tmp_path / "handled.txt"
    written = await _write_events(kafka_bootstrap, topics, 1500)
    child = await _child(kafka_bootstrap, prefix, out)
    try:
        await assert_eventually(
            lambda: len(_handled(out)) >= 300, timeout=60, message="child not reading"
        )
        child.kill()  # SIGKILL mid-stream: no commit on the way out
        await child.wait()
        before = len(_handled(out))
        assert before < len(written), "killed too late: the stream had ended"
        written += await _write_events(kafka_bootstrap, topics, 500)  # while down
        child = await _child(kafka_bootstrap, prefix, out)

        def all_seen() -> None:
            missing = set(written) - set(_handled(out))
            assert not missing, f"{len(missing)} events not handled yet"

        await assert_eventually(all_seen, timeout=120, interval=0.5, message="lost")
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    handled = _handled(out)
    assert set(handled) == set(written)  # nothing invented, nothing lost
    repeats = sum(n - 1 for n in Counter(handled).values())
    # Only what was handled after the last commit before the kill comes again:
    # at most one fetched batch (50) per partition.
    assert repeats <= 2 * 50, repeats
    print(f"handled {len(handled)} for {len(written)} events, {repeats} repeats")


async def _collect(
    bootstrap: str,
    topics: TopicNames,
    group: str,
    start: str | datetime,
    *,
    until: int,
) -> list[JournalRecord]:
    seen: list[JournalRecord] = []

    async def handle(record: JournalRecord) -> None:
        seen.append(record)

    consumer = JournalConsumer(
        handle,
        clients=clients_for(bootstrap),
        group_id=group,
        topics=topics,
        start=start,  # type: ignore[arg-type]
    )
    async with consumer:
        await assert_eventually(
            lambda: len(seen) >= until, timeout=60, message=f"saw {len(seen)}"
        )
        await asyncio.sleep(1.0)  # nothing more than expected arrives
    return seen


async def test_start_positions_earliest_latest_and_a_time(
    kafka_bootstrap: str, lane: tuple[str, TopicNames]
) -> None:
    """A new group starts at the beginning, at the end, or at a broker timestamp."""
    prefix, topics = lane
    old = await _write_events(kafka_bootstrap, topics, 40)
    await asyncio.sleep(1.5)
    cut = datetime.now(UTC)
    await asyncio.sleep(0.5)
    new = await _write_events(kafka_bootstrap, topics, 20)

    everything = await _collect(
        kafka_bootstrap, topics, f"{prefix}all", "earliest", until=60
    )
    assert {r.event.header.event_id for r in everything} == set(old + new)
    assert all(r.loop_id == r.event.header.loop_id for r in everything)
    for partition in (0, 1):
        offsets = [r.offset for r in everything if r.partition == partition]
        assert offsets == sorted(offsets)

    since = await _collect(kafka_bootstrap, topics, f"{prefix}since", cut, until=20)
    assert {r.event.header.event_id for r in since} == set(new)

    # A group resumes from its committed position, whatever ``start`` says.
    later = await _write_events(kafka_bootstrap, topics, 10)
    resumed = await _collect(
        kafka_bootstrap, topics, f"{prefix}all", "earliest", until=10
    )
    assert {r.event.header.event_id for r in resumed} == set(later)


async def test_latest_sees_only_new_events_and_two_members_split(
    kafka_bootstrap: str, lane: tuple[str, TopicNames]
) -> None:
    """``latest`` skips history; two members of a group split the new events."""
    prefix, topics = lane
    await _write_events(kafka_bootstrap, topics, 30)
    seen: dict[str, list[JournalRecord]] = {"a": [], "b": []}

    def handler(name: str) -> Callable[[JournalRecord], Awaitable[None]]:
        async def handle(record: JournalRecord) -> None:
            seen[name].append(record)

        return handle

    members = [
        JournalConsumer(
            handler(name),
            clients=clients_for(kafka_bootstrap),
            group_id=f"{prefix}pair",
            topics=topics,
            start="latest",
        )
        for name in seen
    ]
    async with members[0], members[1]:
        await assert_eventually(
            lambda: all(
                m._consumer is not None and m._consumer.assignment() for m in members
            ),
            timeout=60,
            message="members not assigned",
        )
        await asyncio.sleep(1.0)
        fresh = await _write_events(kafka_bootstrap, topics, 40)
        await assert_eventually(
            lambda: len(seen["a"]) + len(seen["b"]) >= 40,
            timeout=60,
            message="not all new events seen",
        )
    ids = [r.event.header.event_id for r in seen["a"] + seen["b"]]
    assert Counter(ids) == Counter(fresh)
    assert {r.partition for r in seen["a"]}.isdisjoint({r.partition for r in seen["b"]})


async def test_a_failing_handler_stops_the_consumer_and_its_record_comes_again(
    kafka_bootstrap: str, lane: tuple[str, TopicNames]
) -> None:
    """The record a handler raised on is not committed: the next run starts there."""
    prefix, topics = lane
    written = await _write_events(kafka_bootstrap, topics, 20)
    seen: list[UUID] = []
    poison = written[7]

    async def fragile(record: JournalRecord) -> None:
        event_id = record.event.header.event_id
        assert event_id is not None
        if event_id == poison:
            raise RuntimeError("downstream store unavailable")
        seen.append(event_id)

    consumer = JournalConsumer(
        fragile,
        clients=clients_for(kafka_bootstrap),
        group_id=f"{prefix}g",
        topics=topics,
    )
    with pytest.raises(RuntimeError, match="unavailable"):
        async with asyncio.timeout(60):
            await consumer.run()
    assert poison not in seen

    needed = len(set(written) - set(seen))  # at least these come again
    again = await _collect(
        kafka_bootstrap, topics, f"{prefix}g", "earliest", until=needed
    )
    assert poison in {r.event.header.event_id for r in again}
    assert set(seen) | {r.event.header.event_id for r in again} == set(written)
