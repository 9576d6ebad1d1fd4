"""Restore time of one loop with a long journal: with and without its state snapshot.

Writes a loop's journal of N turns (TurnStarted, StepDone, TurnDone, LoopIdle per
turn) to an isolated topic set on a real broker, plus the loop's compacted state
record, then times what a new partition owner does to bring the loop back:

* ``snapshot``: read the loops partition (latest state per loop) and recover from
  the idle snapshot alone (the journal is not read);
* ``snapshot_open_turn``: the same, but the snapshot has an open turn, so the tail
  after ``journal_offset`` (one turn) is read and folded;
* ``full_replay``: no snapshot: read the loop's whole journal and fold it.

Each case runs ``--repeat`` times (fresh consumers every time); medians are written
to ``bench/results/restore.json``. The same file gets a ``group_commit`` section:
N loops committing concurrently through one partition writer, with group commit
off (``max_group=1``) and on (``max_group=32``). Run with a broker up::

    python bench/restore_bench.py --turns 250 1000 4000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition

from turnstream.content import AIMessage, TextBlock, UserMessage
from turnstream.events import (
    Cause,
    EnduringEvent,
    Header,
    LoopIdle,
    LoopStarted,
    StepDone,
    TurnDone,
    TurnStarted,
)
from turnstream.ids import LoopId
from turnstream.kafka.actor.journal import PartitionJournal
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.actor.writer import PartitionWriter, WriterSettings
from turnstream.kafka.admin.topics import (
    apply_topics,
    delete_topics,
    load_topic_set,
    resolve_topics,
)
from turnstream.kafka.clients import KafkaClients
from turnstream.kafka.connection import KafkaConnection
from turnstream.kafka.reader import read_journal, read_state_index
from turnstream.kafka.records import loop_key
from turnstream.kafka.topology import TopicNames
from turnstream.runtime.fold import fold_loop
from turnstream.state import LoopState
from turnstream.wire import default_codec

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "restore.json"
QUESTION = "Please summarise the previous answer in one short paragraph. " * 2
ANSWER = "Here is a short paragraph that summarises the answer so far. " * 4


def _header(session: uuid.UUID, loop: uuid.UUID, **extra: Any) -> Header:
    return Header(
        event_id=uuid.uuid4(),
        session_id=session,
        loop_id=loop,
        created_at=datetime.now(UTC),
        **extra,
    )


def journal_events(
    turns: int, session: uuid.UUID, loop: uuid.UUID
) -> list[EnduringEvent]:
    """A loop's journal: LoopStarted, then ``turns`` complete text turns."""
    events: list[EnduringEvent] = [
        LoopStarted(header=_header(session, loop, agent_name="bench"), model="demo")
    ]
    for index in range(1, turns + 1):
        turn = uuid.uuid4()
        answer = AIMessage(blocks=(TextBlock(text=f"{index}: {ANSWER}"),))
        events += [
            TurnStarted(
                header=_header(
                    session, loop, turn_id=turn, cause=Cause(command_id=uuid.uuid4())
                ),
                turn_index=index,
                message=UserMessage(blocks=(TextBlock(text=f"{index}: {QUESTION}"),)),
            ),
            StepDone(
                header=_header(session, loop, turn_id=turn, step_id=uuid.uuid4()),
                messages=(answer,),
            ),
            TurnDone(
                header=_header(session, loop, turn_id=turn),
                turn_index=index,
                message=answer,
            ),
            LoopIdle(header=_header(session, loop, agent_name="bench")),
        ]
    return events


async def write_journal(
    bootstrap: str, topics: TopicNames, loop: uuid.UUID, events: list[EnduringEvent]
) -> tuple[int, int]:
    """Write the events in a few transactions; return (next offset, bytes)."""
    codec = default_codec()
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=f"bench-{uuid.uuid4().hex}",
        max_request_size=8 * 1024 * 1024,
        linger_ms=20,
        max_batch_size=512 * 1024,
    )
    await producer.start()
    size = 0
    last = -1
    try:
        for start in range(0, len(events), 2000):
            async with producer.transaction():
                pending = []
                for event in events[start : start + 2000]:
                    value = codec.marshal_event(event)
                    size += len(value)
                    pending.append(
                        await producer.send(
                            topics.events,
                            value,
                            key=loop_key(loop),
                            partition=0,
                            headers=codec.kafka_headers(event),
                        )
                    )
                sent = await asyncio.gather(*pending)
                last = max(m.offset for m in sent)
    finally:
        await producer.stop()
    return last + 1, size


async def write_state(bootstrap: str, topics: TopicNames, state: LoopState) -> int:
    codec = default_codec()
    value = codec.marshal_state(state)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", max_request_size=8 * 1024 * 1024
    )
    await producer.start()
    try:
        await producer.send_and_wait(
            topics.loops, value, key=loop_key(state.loop_id), partition=0
        )
    finally:
        await producer.stop()
    return len(value)


async def restore_with_snapshot(
    clients: KafkaClients, topics: TopicNames, loop: uuid.UUID
) -> float:
    codec = default_codec()
    started = time.perf_counter()
    snapshots = await read_state_index(
        clients,
        codec,
        TopicPartition(topics.loops, 0),
        TopicPartition(topics.history, 0),
    )
    journal = PartitionJournal(
        partition=0,
        writer=None,  # type: ignore[arg-type] - recover never writes
        snapshots=snapshots,
        clients=clients,
        codec=codec,
        events_topic=topics.events,
        metrics=ServiceMetrics(),
    )
    recovery = await journal.recover(LoopId(loop))
    state = fold_loop(recovery.events, recovery.snapshot)
    elapsed = time.perf_counter() - started
    assert state.turn_index > 0
    return elapsed


async def restore_by_replay(
    clients: KafkaClients, topics: TopicNames, loop: uuid.UUID
) -> float:
    codec = default_codec()
    started = time.perf_counter()
    entries = await read_journal(
        clients, codec, TopicPartition(topics.events, 0), loops=(loop,)
    )
    state = fold_loop([e.event for e in entries])
    elapsed = time.perf_counter() - started
    assert state.turn_index > 0
    return elapsed


async def bench_case(bootstrap: str, turns: int, repeat: int) -> dict[str, Any]:
    prefix = f"bench-restore-{uuid.uuid4().hex[:8]}."
    conn = KafkaConnection(bootstrap=bootstrap, request_timeout=30.0)
    spec = load_topic_set(ROOT / "infra" / "topics.yaml")
    desired = [
        t.__class__(
            t.name,
            t.partitions,
            t.replication_factor,
            {**t.config, "max.message.bytes": str(8 * 1024 * 1024 + 65536)}
            if t.name.endswith(("loops.v1", "events.v1"))
            else t.config,
        )
        for t in resolve_topics(spec, prefix=prefix, partitions=1)
    ]
    await apply_topics(conn, desired)
    topics = TopicNames.with_affixes(prefix=prefix)
    clients = KafkaClients(connection=conn, client_id="bench")
    session, idle_loop, open_loop = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    try:
        events = journal_events(turns, session, idle_loop)
        end, journal_bytes = await write_journal(bootstrap, topics, idle_loop, events)
        state = fold_loop(events).model_copy(update={"journal_offset": end})
        state_bytes = await write_state(bootstrap, topics, state)
        # A second loop whose snapshot is one turn old: the last turn is the tail.
        open_events = journal_events(turns, session, open_loop)
        cut = len(open_events) - 4
        open_state = fold_loop(open_events[: cut + 1])  # up to its last TurnStarted
        assert open_state.open_turn is not None
        next_offset, _ = await write_journal(
            bootstrap, topics, open_loop, open_events[: cut + 1]
        )
        await write_state(
            bootstrap,
            topics,
            open_state.model_copy(update={"journal_offset": next_offset}),
        )
        await write_journal(bootstrap, topics, open_loop, open_events[cut + 1 :])

        snapshot = [
            await restore_with_snapshot(clients, topics, idle_loop)
            for _ in range(repeat)
        ]
        tail = [
            await restore_with_snapshot(clients, topics, open_loop)
            for _ in range(repeat)
        ]
        replay = [
            await restore_by_replay(clients, topics, idle_loop) for _ in range(repeat)
        ]
        return {
            "turns": turns,
            "loop_events": len(events),
            "partition_events": 2 * len(events),
            "journal_bytes_per_loop": journal_bytes,
            "state_bytes": state_bytes,
            "snapshot_s": round(statistics.median(snapshot), 4),
            "snapshot_open_turn_s": round(statistics.median(tail), 4),
            "full_replay_s": round(statistics.median(replay), 4),
            "speedup": round(
                statistics.median(replay) / statistics.median(snapshot), 1
            ),
            "runs": repeat,
        }
    finally:
        await delete_topics(conn, [t.name for t in desired])


async def group_commit_case(
    bootstrap: str, loops: int, per_loop: int, max_group: int
) -> dict[str, Any]:
    """``loops`` tasks each appending ``per_loop`` one-event commits, concurrently."""
    prefix = f"bench-group-{uuid.uuid4().hex[:8]}."
    conn = KafkaConnection(bootstrap=bootstrap, request_timeout=30.0)
    spec = load_topic_set(ROOT / "infra" / "topics.yaml")
    desired = resolve_topics(spec, prefix=prefix, partitions=1)
    await apply_topics(conn, desired)
    topics = TopicNames.with_affixes(prefix=prefix)
    metrics = ServiceMetrics()
    writer = PartitionWriter(
        partition=0,
        clients=KafkaClients(connection=conn, client_id="bench"),
        topics=topics,
        group_id=f"{prefix}group",
        txn_id=f"{prefix}txn",
        codec=default_codec(),
        metrics=metrics,
        settings=WriterSettings(max_group=max_group),
        still_owner=lambda: True,
        on_broken=lambda _writer: None,
    )
    try:
        await writer.start()
        task = asyncio.create_task(writer.run())
        session = uuid.uuid4()

        async def one_loop(loop: uuid.UUID) -> None:
            for _ in range(per_loop):
                idle = LoopIdle(header=_header(session, loop, agent_name="bench"))
                await writer.append(loop, [idle], None)

        started = time.perf_counter()
        await asyncio.gather(*(one_loop(uuid.uuid4()) for _ in range(loops)))
        elapsed = time.perf_counter() - started
        await writer.close()
        await task
    finally:
        await delete_topics(conn, [t.name for t in desired])
    latency = metrics.commit_latency
    return {
        "loops": loops,
        "max_group": max_group,
        "appends": loops * per_loop,
        "transactions": metrics.commits,
        "appends_per_s": round(loops * per_loop / elapsed, 1),
        "mean_commit_latency_ms": round(1000 * latency.total / latency.count, 1),
        "p99_commit_latency_le_s": latency.quantile(0.99),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19092"),
    )
    parser.add_argument("--turns", type=int, nargs="+", default=[250, 1000, 4000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--no-group-commit", dest="group_commit", action="store_false")
    args = parser.parse_args()
    cases = []
    for turns in args.turns:
        case = await bench_case(args.bootstrap, turns, args.repeat)
        print(json.dumps(case))
        cases.append(case)
    group = []
    if args.group_commit:
        for loops in (1, 8, 32):
            for max_group in (1, 32):
                case = await group_commit_case(
                    args.bootstrap, loops, 320 // loops, max_group
                )
                print(json.dumps(case))
                group.append(case)
    result = {
        "benchmark": "restore one loop: snapshot vs full journal replay",
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "broker": "Kafka 4.1.1, single local node (turnstream broker)",
        "notes": (
            "Each loop journal: LoopStarted, then per turn TurnStarted, StepDone, "
            "TurnDone, LoopIdle (~250 B text per message). The partition also holds "
            "a second loop of the same size, which every scan must skip. Times "
            "include creating the reader consumer, reading up to the last stable "
            "offset, decoding and the fold."
        ),
        "cases": cases,
        "group_commit": group,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    asyncio.run(main())
