"""State at scale: bytes per turn as a conversation grows; takeover cost by idle loops.

Two parts, each on its own one-partition topic set of the local broker:

* **bytes**: one loop runs text turns one after another through the in-process
  loop-actor service (a ~60-word input, a ~420-byte answer per turn). At each
  mark (by default after 50, 200, 500 and 1,000 turns) the bench reads the
  loops (state) and events (journal) partitions and adds up the bytes of every
  record written (key + value + headers): cumulative megabytes, and kilobytes
  per turn over the window since the previous mark.
* **takeover**: a loop-actor process (``python -m turnstream.loop_actor``, the
  demo model) finds ``N`` idle loops on its partition -- state records written
  by a previous owner, each holding 20 messages of 400 bytes -- and the bench
  times process start -> ``/ready`` answering 200 and reads its RSS then. The
  records are clones of one real loop's latest state record (so they carry
  what the service writes), with new loop ids and histories. After ready, the
  first turn of ``cold`` loops (never touched by this process) and a second turn
  of the same loops (warm) are timed from submit to ``LoopIdle``.

Usage::

    python bench/state_scale_bench.py          # writes results/state_scale.json
    python bench/state_scale_bench.py --idle 0 20000 200000
    python bench/state_scale_bench.py --quick               # small, no file
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from _support import (
    RESULTS_DIR,
    ModelPool,
    actor_processes,
    bootstrap_servers,
    clients_for,
    machine,
    now_iso,
    percentiles,
    quiet_kafka_logs,
    rss_bytes,
    service_for,
    topic_set,
    wait_until,
    write_json,
)
from state_bench import ANSWER
from turnstream.content import AIMessage, Conversation, TextBlock, UserMessage
from turnstream.events import LoopIdle
from turnstream.ids import LoopId
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.client.session import KafkaSession
from turnstream.kafka.reader import read_latest_states, restore_hint
from turnstream.kafka.records import STATE_RESTORE, loop_key
from turnstream.kafka.topology import TopicNames
from turnstream.runtime.subscription import EventFilter
from turnstream.testing import ScriptedModel, text_step
from turnstream.wire import default_codec

RESULTS = RESULTS_DIR / "state_scale.json"

QUESTION = " ".join(f"word{i:02d}" for i in range(60))  # ~60 words, ~420 bytes
IDLE_MESSAGES = 20
IDLE_MESSAGE_BYTES = 400


# ------------------------------------------------------------------- bytes


async def _partition_bytes(bootstrap: str, topic: str, end: int) -> int:
    """Bytes (key + value + headers) of every record of ``topic``[0] before ``end``."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        isolation_level="read_uncommitted",
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=16 * 2**20,
        fetch_max_bytes=64 * 2**20,
    )
    await consumer.start()
    tp = TopicPartition(topic, 0)
    total = 0
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        async with asyncio.timeout(300):
            while await consumer.position(tp) < end:
                batch = await consumer.getmany(tp, timeout_ms=500)
                for record in batch.get(tp, ()):
                    if record.offset >= end:
                        break
                    total += len(record.key or b"") + len(record.value or b"")
                    total += sum(len(k) + len(v) for k, v in record.headers or ())
    finally:
        await consumer.stop()
    return total


async def _end(bootstrap: str, topic: str) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        return int((await consumer.end_offsets([tp]))[tp])
    finally:
        await consumer.stop()


async def bytes_case(bootstrap: str, marks: list[int]) -> list[dict[str, Any]]:
    """State and journal bytes after each mark of one loop's turns."""
    turns = max(marks)

    def make(_loop: LoopId) -> ScriptedModel:
        return ScriptedModel([text_step(*ANSWER) for _ in range(turns + 1)])

    rows: list[dict[str, Any]] = []
    async with topic_set(bootstrap, "statebytes", partitions=1) as (prefix, topics):
        metrics = ServiceMetrics()
        service = service_for(
            bootstrap,
            topics,
            group_id=f"{prefix}actors",
            models=ModelPool(make=make),
            metrics=metrics,
        )
        async with service:
            await wait_until(lambda: metrics.ready, timeout=60)
            session = await KafkaSession.connect(
                bootstrap, topics=topics, capacity=100_000, request_timeout=30.0
            )
            subscription = session.subscribe_events(EventFilter.everything())
            idle: asyncio.Queue[None] = asyncio.Queue()

            async def pump() -> None:
                async for event in subscription:
                    if isinstance(event, LoopIdle):
                        idle.put_nowait(None)

            task = asyncio.create_task(pump())
            loop_id = LoopId(uuid.uuid4())
            previous = {"turns": 0, "state": 0, "journal": 0}
            try:
                async with asyncio.timeout(1800):
                    for turn in range(1, turns + 1):
                        await session.submit_to_loop(loop_id, f"{turn} {QUESTION}")
                        await idle.get()
                        if turn not in marks:
                            continue
                        state = await _partition_bytes(
                            bootstrap, topics.loops, await _end(bootstrap, topics.loops)
                        )
                        journal = await _partition_bytes(
                            bootstrap,
                            topics.events,
                            await _end(bootstrap, topics.events),
                        )
                        window = turn - previous["turns"]
                        row = {
                            "turns": turn,
                            "state_mb": round(state / 1e6, 2),
                            "journal_mb": round(journal / 1e6, 3),
                            "state_kb_per_turn": round(
                                (state - previous["state"]) / window / 1e3, 2
                            ),
                            "journal_kb_per_turn": round(
                                (journal - previous["journal"]) / window / 1e3, 2
                            ),
                        }
                        row["state_per_journal"] = round(
                            row["state_kb_per_turn"] / row["journal_kb_per_turn"], 1
                        )
                        rows.append(row)
                        print(json.dumps(row), flush=True)
                        previous = {"turns": turn, "state": state, "journal": journal}
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                await session.close()
    return rows


# ----------------------------------------------------------------- takeover


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}/ready", timeout=1
        ) as answer:
            return int(answer.status) == 200
    except OSError:
        return False


def _history(seed: int) -> tuple[Conversation, ...]:
    filler = "x" * (IDLE_MESSAGE_BYTES - 16)
    messages: list[Conversation] = []
    for i in range(IDLE_MESSAGES // 2):
        messages.append(UserMessage(blocks=(TextBlock(text=f"{seed}:{i} {filler}"),)))
        messages.append(AIMessage(blocks=(TextBlock(text=f"{seed}:{i} {filler}"),)))
    return tuple(messages)


async def _turn_times(
    session: KafkaSession, loops: list[LoopId], idle: asyncio.Queue[LoopId]
) -> list[float]:
    times = []
    for loop_id in loops:
        sent = time.perf_counter()
        await session.submit_to_loop(loop_id, "hello again")
        while await idle.get() != loop_id:
            pass
        times.append(time.perf_counter() - sent)
    return times


async def _template(bootstrap: str, topics: TopicNames, prefix: str) -> Any:
    """One real loop's latest state, written by a real actor process."""
    group = f"{prefix}template"
    port = _free_port()
    with actor_processes(
        1,
        bootstrap=bootstrap,
        prefix=prefix,
        group_id=group,
        extra=["--metrics-port", str(port)],
    ):
        await wait_until(lambda: _ready(port), timeout=120, interval=0.1)
        session = await KafkaSession.connect(
            bootstrap, topics=topics, request_timeout=30.0
        )
        try:
            loop_id = LoopId(uuid.uuid4())
            await session.submit_to_loop(loop_id, "hello")
            async with asyncio.timeout(60):
                async for event in session.subscribe_events(EventFilter.everything()):
                    if isinstance(event, LoopIdle) and event.header.loop_id == loop_id:
                        break
        finally:
            await session.close()
    read = await read_latest_states(
        clients_for(bootstrap), default_codec(), TopicPartition(topics.loops, 0)
    )
    return read.states[loop_id]


async def _write_idle_loops(
    bootstrap: str, topics: TopicNames, template: Any, count: int
) -> list[LoopId]:
    codec = default_codec()
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        linger_ms=20,
        max_batch_size=1_048_576,
        max_request_size=8 * 2**20,
        acks=1,
    )
    await producer.start()
    loops: list[LoopId] = []
    try:
        pending = []
        for seed in range(count):
            loop_id = LoopId(uuid.uuid4())
            loops.append(loop_id)
            state = template.model_copy(
                update={"loop_id": loop_id, "messages": _history(seed)}
            )
            pending.append(
                await producer.send(
                    topics.loops,
                    codec.marshal_state(state),
                    key=loop_key(loop_id),
                    partition=0,
                    headers=[
                        *codec.kafka_headers(state),
                        (STATE_RESTORE, restore_hint(state)),
                    ],
                )
            )
            if len(pending) >= 2000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return loops


async def takeover_case(bootstrap: str, idle_loops: int, probes: int) -> dict[str, Any]:
    """Ready time and RSS of a new owner of a partition with ``idle_loops`` loops."""
    async with topic_set(bootstrap, "statescale", partitions=1) as (prefix, topics):
        template = await _template(bootstrap, topics, prefix)
        started = time.perf_counter()
        loops = await _write_idle_loops(bootstrap, topics, template, idle_loops)
        write_s = time.perf_counter() - started
        state_bytes = await _partition_bytes(
            bootstrap, topics.loops, await _end(bootstrap, topics.loops)
        )
        port = _free_port()
        with actor_processes(
            1,
            bootstrap=bootstrap,
            prefix=prefix,
            group_id=f"{prefix}owner",
            extra=["--metrics-port", str(port)],
        ) as (proc,):
            spawned = time.perf_counter()
            await wait_until(lambda: _ready(port), timeout=900, interval=0.05)
            ready_s = time.perf_counter() - spawned
            rss = rss_bytes(proc.pid)
            row: dict[str, Any] = {
                "idle_loops": idle_loops,
                "state_mb_on_topic": round(state_bytes / 1e6, 1),
                "write_s": round(write_s, 1),
                "ready_s": round(ready_s, 2),
                "rss_mib_at_ready": round(rss / 2**20, 1),
            }
            if loops and probes:
                session = await KafkaSession.connect(
                    bootstrap, topics=topics, request_timeout=30.0
                )
                idle: asyncio.Queue[LoopId] = asyncio.Queue()
                subscription = session.subscribe_events(EventFilter.everything())

                async def pump() -> None:
                    async for event in subscription:
                        if isinstance(event, LoopIdle):
                            idle.put_nowait(LoopId(event.header.loop_id))

                task = asyncio.create_task(pump())
                try:
                    picked = loops[:: max(1, len(loops) // probes)][:probes]
                    async with asyncio.timeout(600):
                        cold = await _turn_times(session, picked, idle)
                        warm = await _turn_times(session, picked, idle)
                finally:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                    await session.close()
                row["cold_turn_ms"] = percentiles(cold)
                row["warm_turn_ms"] = percentiles(warm)
                row["cold_minus_warm_p99_ms"] = round(
                    row["cold_turn_ms"]["p99"] - row["warm_turn_ms"]["p99"], 1
                )
                row["rss_mib_after_probes"] = round(rss_bytes(proc.pid) / 2**20, 1)
    print(json.dumps(row), flush=True)
    return row


async def bench(
    bootstrap: str, *, marks: list[int], idle: list[int], probes: int
) -> dict[str, Any]:
    """Both parts."""
    takeover = [await takeover_case(bootstrap, n, probes) for n in idle]
    per_turn = await bytes_case(bootstrap, marks) if marks else []
    return {"bytes_per_turn": per_turn, "takeover": takeover}


def main(argv: list[str] | None = None) -> int:
    """Run the bench; print the JSON (and write it unless ``--quick``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=bootstrap_servers())
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--marks", type=int, nargs="*", default=[50, 200, 500, 1000])
    parser.add_argument("--idle", type=int, nargs="*", default=[0, 20_000])
    parser.add_argument("--probes", type=int, default=50)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    quiet_kafka_logs()
    cfg: dict[str, Any] = (
        {"marks": [10, 30], "idle": [0, 500], "probes": 10}
        if args.quick
        else {"marks": args.marks, "idle": args.idle, "probes": args.probes}
    )
    result = asyncio.run(bench(args.bootstrap, **cfg))
    doc = {"started": now_iso(), "machine": machine(), "config": cfg, **result}
    print(json.dumps(doc, indent=2))
    if not args.quick:
        write_json(args.out, doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
