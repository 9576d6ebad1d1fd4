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
  records are laid out as the service writes them (a head and one history
  record per message, see ``turnstream.kafka.state_records``), cloned from
  one real loop's latest state (its agent and model), with new loop ids.
  After ready, the first turn of ``cold`` loops (never touched by this
  process) and a second turn of the same loops (warm) are timed from submit
  to ``LoopIdle``.
* **used once**: an actor process with ``--max-resident-loops B`` gets one
  input for each of ``N`` new loops (one short turn each, the loops then
  idle), in waves of 500 (the next once the last is idle); its RSS (now and
  peak) is read once every loop's ``LoopIdle`` is committed, for each budget
  given (a budget of at least ``N`` passivates nothing).

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
    TypeCounter,
    actor_processes,
    bootstrap_servers,
    clients_for,
    machine,
    now_iso,
    percentiles,
    produce_commands,
    quiet_kafka_logs,
    rss_bytes,
    service_for,
    submit_command,
    topic_set,
    wait_until,
    write_json,
)
from turnstream.content import AIMessage, Conversation, TextBlock, UserMessage
from turnstream.events import LoopIdle
from turnstream.ids import LoopId
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.client.session import KafkaSession
from turnstream.kafka.reader import head_headers, read_latest_states
from turnstream.kafka.records import loop_key
from turnstream.kafka.state_records import history_key, split
from turnstream.kafka.topology import TopicNames
from turnstream.runtime.subscription import EventFilter
from turnstream.state import LoopState
from turnstream.testing import ScriptedModel, text_step
from turnstream.wire import default_codec

RESULTS = RESULTS_DIR / "state_scale.json"
LOG_DIR: Path | None = None
"""Where the actor processes' logs go (``--log-dir``; none by default)."""

QUESTION = " ".join(f"word{i:02d}" for i in range(60))  # ~60 words, ~420 bytes
ANSWER = tuple(f"word{c:02d} of the answer " for c in range(20))  # ~420 bytes
WAVE = 500
"""Loops used once are sent in waves of this many, each once the last is idle."""
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


async def _state_bytes(bootstrap: str, topics: TopicNames) -> int:
    """Bytes of every record of the state topics (heads and history records)."""
    total = 0
    for topic in (topics.loops, topics.history):
        total += await _partition_bytes(bootstrap, topic, await _end(bootstrap, topic))
    return total


async def _end(bootstrap: str, topic: str) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        return int((await consumer.end_offsets([tp]))[tp])
    finally:
        await consumer.stop()


async def bytes_case(
    bootstrap: str, marks: list[int]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """State and journal bytes after each mark of one loop's turns; then the
    ready time and RSS of a new actor process taking that partition over."""
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
                        state = await _state_bytes(bootstrap, topics)
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
        restart = await _restart(bootstrap, prefix, f"{prefix}actors")
    restart["turns_of_the_loop"] = turns
    print(json.dumps(restart), flush=True)
    return rows, restart


async def _restart(bootstrap: str, prefix: str, group: str) -> dict[str, Any]:
    """Process start -> ``/ready`` of an actor taking over the partition."""
    port = _free_port()
    with actor_processes(
        1,
        bootstrap=bootstrap,
        prefix=prefix,
        group_id=group,
        extra=["--metrics-port", str(port)],
        log_dir=LOG_DIR,
    ) as (proc,):
        spawned = time.perf_counter()
        await wait_until(lambda: _ready(port), timeout=900, interval=0.05)
        ready_s = time.perf_counter() - spawned
        rss = rss_bytes(proc.pid)
    return {"ready_s": round(ready_s, 2), "rss_mib_at_ready": round(rss / 2**20, 1)}


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


def _peak_rss(pid: int) -> int:
    """The process's peak resident set (``VmHWM``), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _metrics(port: int, names: tuple[str, ...]) -> dict[str, float]:
    """Some unlabelled ``turnstream_*`` samples of the actor's ``/metrics``."""
    with urllib.request.urlopen(
        f"http://127.0.0.1:{port}/metrics", timeout=5
    ) as answer:
        text = answer.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        short = name.removeprefix("turnstream_")
        if short in names:
            found[short] = float(value)
    return found


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


async def _template(bootstrap: str, topics: TopicNames, prefix: str) -> LoopState:
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
        clients_for(bootstrap),
        default_codec(),
        TopicPartition(topics.loops, 0),
        TopicPartition(topics.history, 0),
    )
    return read.states[loop_id]


async def _write_idle_loops(
    bootstrap: str, topics: TopicNames, template: LoopState, count: int
) -> list[LoopId]:
    """``count`` idle loops as the service leaves them: a head and history records.

    Each loop's history is written as the service writes ten turns of it: one
    history record per message (a turn's start adds its input, its end the
    answer), then the loop's latest head.
    """
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
    blank = template.model_copy(
        update={
            "messages": (),
            "recent_command_ids": (),
            "history_length": -1,
            "history_records": 0,
        }
    )
    # The bench is the history partition's only writer (no transactions, so
    # no markers): record i lands at start + i, as the service predicts its
    # own offsets; every delivery is checked against the prediction.
    at = await _end(bootstrap, topics.history)
    try:
        pending = []
        placed: list[tuple[asyncio.Future[Any], int]] = []
        for seed in range(count):
            loop_id = LoopId(uuid.uuid4())
            loops.append(loop_id)
            kept = blank.model_copy(update={"loop_id": loop_id})
            for message in _history(seed):
                records = split(
                    kept.model_copy(update={"messages": (*kept.messages, message)}),
                    (),
                )
                assert records.history is not None
                number = records.head.history_records - 1
                sent = await producer.send(
                    topics.history,
                    codec.marshal_state(records.history),
                    key=history_key(loop_id, number),
                    partition=0,
                    headers=codec.kafka_headers(records.history),
                )
                pending.append(sent)
                placed.append((sent, at))
                records = records.placed(at)
                at += 1
                kept = records.kept
            head = records.head
            pending.append(
                await producer.send(
                    topics.loops,
                    codec.marshal_state(head),
                    key=loop_key(loop_id),
                    partition=0,
                    headers=head_headers(codec, head),
                )
            )
            if len(pending) >= 20_000:
                await _settle(pending, placed)
        await _settle(pending, placed)
    finally:
        await producer.stop()
    return loops


async def _settle(
    pending: list[asyncio.Future[Any]], placed: list[tuple[asyncio.Future[Any], int]]
) -> None:
    """Wait for every delivery; fail if a history record missed its offset."""
    await asyncio.gather(*pending)
    for sent, offset in placed:
        if sent.result().offset != offset:
            raise RuntimeError(
                f"history record landed at {sent.result().offset}, not {offset}"
            )
    pending.clear()
    placed.clear()


async def takeover_case(bootstrap: str, idle_loops: int, probes: int) -> dict[str, Any]:
    """Ready time and RSS of a new owner of a partition with ``idle_loops`` loops."""
    async with topic_set(bootstrap, "statescale", partitions=1) as (prefix, topics):
        template = await _template(bootstrap, topics, prefix)
        started = time.perf_counter()
        loops = await _write_idle_loops(bootstrap, topics, template, idle_loops)
        write_s = time.perf_counter() - started
        state_bytes = await _state_bytes(bootstrap, topics)
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
                        loop_id = event.header.loop_id
                        if isinstance(event, LoopIdle) and loop_id is not None:
                            idle.put_nowait(LoopId(loop_id))

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


async def used_once_case(bootstrap: str, loops: int, budget: int) -> dict[str, Any]:
    """RSS of an actor after ``loops`` new loops ran one turn each."""
    async with topic_set(bootstrap, "usedonce", partitions=1) as (prefix, topics):
        counter = TypeCounter(bootstrap, topics.events, 1)
        await counter.start()
        port = _free_port()
        try:
            with actor_processes(
                1,
                bootstrap=bootstrap,
                prefix=prefix,
                group_id=f"{prefix}owner",
                extra=[
                    "--metrics-port",
                    str(port),
                    "--max-resident-loops",
                    str(budget),
                ],
                log_dir=LOG_DIR,
            ) as (proc,):
                await wait_until(lambda: _ready(port), timeout=120, interval=0.1)
                rss_before = rss_bytes(proc.pid)
                started = time.perf_counter()
                session = uuid.uuid4()
                for sent in range(0, loops, WAVE):
                    wave = min(WAVE, loops - sent)
                    await produce_commands(
                        bootstrap,
                        topics.commands,
                        (
                            submit_command(uuid.uuid4(), session, "hello")
                            for _ in range(wave)
                        ),
                    )
                    done = sent + wave
                    await wait_until(
                        lambda: counter.counts["LoopIdle"] >= done,  # noqa: B023
                        timeout=600,
                        interval=0.05,
                    )
                seconds = time.perf_counter() - started
                await asyncio.sleep(2.5)  # a passivation sweep or two
                rss = rss_bytes(proc.pid)
                peak = _peak_rss(proc.pid)
                gauges = _metrics(port, ("live_loops", "loops_passivated_total"))
        finally:
            await counter.stop()
    row = {
        "loops": loops,
        "max_resident_loops": budget,
        "seconds": round(seconds, 1),
        "rss_mib_ready": round(rss_before / 2**20, 1),
        "rss_mib_after": round(rss / 2**20, 1),
        "rss_mib_peak": round(peak / 2**20, 1),
        "live_loops": gauges.get("live_loops"),
        "passivated": gauges.get("loops_passivated_total"),
    }
    print(json.dumps(row), flush=True)
    return row


async def bench(
    bootstrap: str,
    *,
    marks: list[int],
    idle: list[int],
    probes: int,
    used_once: int,
    budgets: list[int],
) -> dict[str, Any]:
    """Every part."""
    takeover = [await takeover_case(bootstrap, n, probes) for n in idle]
    once = [await used_once_case(bootstrap, used_once, b) for b in budgets]
    per_turn, restart = await bytes_case(bootstrap, marks) if marks else ([], {})
    return {
        "bytes_per_turn": per_turn,
        "restart_after_the_long_loop": restart,
        "takeover": takeover,
        "used_once": once,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the bench; print the JSON (and write it unless ``--quick``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=bootstrap_servers())
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--marks", type=int, nargs="*", default=[50, 200, 500, 1000])
    parser.add_argument("--idle", type=int, nargs="*", default=[0, 20_000, 200_000])
    parser.add_argument("--probes", type=int, default=50)
    parser.add_argument("--used-once", type=int, default=200_000)
    parser.add_argument("--budgets", type=int, nargs="*", default=[1000])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--log-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    global LOG_DIR  # noqa: PLW0603 - a run-wide switch, set once here
    LOG_DIR = args.log_dir
    quiet_kafka_logs()
    cfg: dict[str, Any] = (
        {
            "marks": [10, 30],
            "idle": [0, 500],
            "probes": 10,
            "used_once": 300,
            "budgets": [100],
        }
        if args.quick
        else {
            "marks": args.marks,
            "idle": args.idle,
            "probes": args.probes,
            "used_once": args.used_once,
            "budgets": args.budgets,
        }
    )
    result = asyncio.run(bench(args.bootstrap, **cfg))
    doc = {"started": now_iso(), "machine": machine(), "config": cfg, **result}
    print(json.dumps(doc, indent=2))
    if not args.quick:
        write_json(args.out, doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
