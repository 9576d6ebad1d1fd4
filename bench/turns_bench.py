"""Turn throughput through the loop-actor service vs raw aiokafka transactions.

One case = ``loops`` loops x ``turns`` turns of one kind, on a fresh topic set
with ``partitions`` partitions:

1. **turnstream.** Every command (``SubmitInput``, ``no_fold``) is produced to
   the commands topic *before* the service starts, so the service, not a
   client, is what is measured. An in-process :class:`LoopActorService` with an
   instant :class:`~turnstream.testing.ScriptedModel` per loop then consumes
   the backlog; the clock runs from the moment the service is ready (group
   joined, partitions restored) until the last terminal is committed.
   ``text`` turns are one streamed step of three chunks; ``tool`` turns are
   three steps (tool call, tool call, final text) with an instant tool.
2. **raw limit.** The records turnstream committed (events and state records,
   read back byte for byte, plus its delta records) are written again with
   plain aiokafka: one transactional producer per partition, in parallel, in
   the *same number of transactions* turnstream used (each also committing a
   consumer offset via ``send_offsets_to_transaction``, as turnstream's do),
   and the deltas through one ``acks=1`` producer alongside.

The ratio is ``turnstream turns/s / (raw txn/s / txns per turn)``, i.e. the
raw run's elapsed time over turnstream's for the same Kafka writes. A second
raw run writes one transaction per journal append (no group commit) for
reference. The process runs with the deployable's garbage-collector threshold
(``python -m turnstream.loop_actor`` sets it, see
:mod:`turnstream.loop_actor.gc_policy`), for the service and the raw replays
alike; ``--gc-threshold 0`` keeps CPython's. Usage::

    python bench/turns_bench.py --loops 200 --turns 5 --kind text
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _support import (
    RESULTS_DIR,
    ModelPool,
    Stopwatch,
    bootstrap_servers,
    loops_balanced,
    machine,
    now_iso,
    produce_commands,
    quiet_kafka_logs,
    service_for,
    submit_command,
    topic_set,
    wait_until,
    write_json,
)
from turnstream.ids import LoopId
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.topology import TopicNames
from turnstream.loop_actor.gc_policy import DEFAULT_GC_THRESHOLD, apply_gc_threshold
from turnstream.runtime.model_client import ModelClient
from turnstream.testing import FunctionTool, ScriptedModel, call, text_step, tool_step

RESULTS = RESULTS_DIR / "turns.json"
KINDS = ("text", "tool")
QUESTION = "What is the status of the nightly build, and what failed?"
ANSWER = ("The nightly build ", "passed all 412 tests ", "in 9 minutes.")


def _scripts(kind: str, turns: int) -> list[list[Any]]:
    if kind == "text":
        return [text_step(*ANSWER) for _ in range(turns)]
    per_turn = [
        tool_step(call("lookup", '{"q": "nightly build"}'), text="Checking. "),
        tool_step(call("lookup", '{"q": "failed tests"}'), text="And failures. "),
        text_step(*ANSWER),
    ]
    return [step for _ in range(turns) for step in per_turn]


def lookup_tool() -> FunctionTool:
    """An instant tool: echoes a short result."""
    return FunctionTool(
        "lookup", fn=lambda input_json, _ctx: f"result for {input_json}: ok"
    )


def model_pool(kind: str, turns: int) -> ModelPool:
    """A fresh scripted model per loop, playing ``turns`` turns of ``kind``."""

    def make(_loop: LoopId) -> ModelClient:
        return ScriptedModel(_scripts(kind, turns))

    tools = (lookup_tool(),) if kind == "tool" else ()
    return ModelPool(make=make, tools=tools)


@dataclass
class Written:
    """The records of one partition, as committed (key, value, headers)."""

    events: list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]] = field(
        default_factory=list
    )
    states: list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]] = field(
        default_factory=list
    )
    deltas: list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]] = field(
        default_factory=list
    )


async def _read_partition(
    bootstrap: str, topic: str, partition: int, *, committed: bool
) -> list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]]:
    tp = TopicPartition(topic, partition)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        isolation_level="read_committed" if committed else "read_uncommitted",
        max_partition_fetch_bytes=8 * 1024 * 1024,
    )
    await consumer.start()
    out: list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]] = []
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        async with asyncio.timeout(120):
            while await consumer.position(tp) < end:
                batch = await consumer.getmany(tp, timeout_ms=500)
                for record in batch.get(tp, []):
                    if record.value is not None:
                        out.append((record.key, record.value, list(record.headers)))
    finally:
        await consumer.stop()
    return out


async def read_back(
    bootstrap: str, topics: TopicNames, partitions: int
) -> list[Written]:
    """Everything turnstream wrote to events, loops and deltas, per partition."""
    written = []
    for p in range(partitions):
        written.append(
            Written(
                events=await _read_partition(
                    bootstrap, topics.events, p, committed=True
                ),
                states=await _read_partition(
                    bootstrap, topics.loops, p, committed=True
                ),
                deltas=await _read_partition(
                    bootstrap, topics.deltas, p, committed=False
                ),
            )
        )
    return written


def _split(items: list[Any], parts: int) -> Iterator[list[Any]]:
    """``items`` in ``parts`` contiguous slices of near-equal length."""
    for i in range(parts):
        yield items[len(items) * i // parts : len(items) * (i + 1) // parts]


async def raw_replay(
    bootstrap: str,
    topics: TopicNames,
    written: list[Written],
    transactions: int,
    *,
    group_id: str,
) -> dict[str, Any]:
    """Write ``written`` again with plain aiokafka in ``transactions`` transactions.

    Transactions are split over the partitions in proportion to their events;
    each producer runs its transactions back to back, all partitions at once.
    """
    total_events = sum(len(w.events) for w in written) or 1
    per_partition = [
        max(1, round(transactions * len(w.events) / total_events)) for w in written
    ]
    txn_tag = uuid.uuid4().hex[:8]
    producers = [
        AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            transactional_id=f"{group_id}-raw-{txn_tag}-{p}",
            max_request_size=8 * 1024 * 1024 + 65536,
            linger_ms=0,
        )
        for p in range(len(written))
    ]
    deltas = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks=1,
        linger_ms=5,
        max_request_size=8 * 1024 * 1024 + 65536,
    )
    for producer in [*producers, deltas]:
        await producer.start()

    async def one_partition(p: int) -> None:
        producer, records, count = producers[p], written[p], per_partition[p]
        commands_tp = TopicPartition(topics.commands, p)
        event_slices = list(_split(records.events, count))
        state_slices = list(_split(records.states, count))
        for i in range(count):
            await producer.begin_transaction()
            futures = [
                await producer.send(topics.events, v, key=k, partition=p, headers=h)
                for k, v, h in event_slices[i]
            ]
            futures += [
                await producer.send(topics.loops, v, key=k, partition=p, headers=h)
                for k, v, h in state_slices[i]
            ]
            await asyncio.gather(*futures)
            await producer.send_offsets_to_transaction(
                {commands_tp: OffsetAndMetadata(i + 1, "")}, group_id
            )
            await producer.commit_transaction()

    async def all_deltas() -> None:
        futures = [
            await deltas.send(topics.deltas, v, key=k, partition=p, headers=h)
            for p, w in enumerate(written)
            for k, v, h in w.deltas
        ]
        await asyncio.gather(*futures)

    try:
        with Stopwatch() as watch:
            async with asyncio.timeout(600):
                await asyncio.gather(
                    *(one_partition(p) for p in range(len(written))), all_deltas()
                )
    finally:
        for producer in [*producers, deltas]:
            await producer.stop()
    done = sum(per_partition)
    return {
        "transactions": done,
        "records": sum(len(w.events) + len(w.states) for w in written),
        "delta_records": sum(len(w.deltas) for w in written),
        "elapsed_s": round(watch.wall, 3),
        "txn_per_s": round(done / watch.wall, 1),
        "cpu_s": round(watch.cpu, 3),
    }


Around = Callable[[], contextlib.AbstractContextManager[Any]]


async def run_turnstream(
    bootstrap: str,
    topics: TopicNames,
    prefix: str,
    *,
    loops: int,
    turns: int,
    kind: str,
    partitions: int,
    around: Around | None = None,
) -> dict[str, Any]:
    """Pre-produce the backlog, run the service over it; return the numbers."""
    session = uuid.uuid4()
    loop_ids = loops_balanced(loops, partitions)
    commands = [
        submit_command(loop, session, f"{QUESTION} (#{t})")
        for t in range(turns)
        for loop in loop_ids
    ]
    await produce_commands(bootstrap, topics.commands, commands)
    metrics = ServiceMetrics()
    service = service_for(
        bootstrap,
        topics,
        group_id=f"{prefix}actors",
        models=model_pool(kind, turns),
        metrics=metrics,
    )
    expected = loops * turns
    guard = around or contextlib.nullcontext
    async with service:
        await wait_until(lambda: metrics.ready, timeout=60)
        with Stopwatch() as watch, guard():
            await wait_until(
                lambda: sum(metrics.terminals.values()) >= expected,
                timeout=600,
                interval=0.005,
            )
    appends = sum(size * n for size, n in metrics.group_sizes.items())
    return {
        "loops": loops,
        "turns_per_loop": turns,
        "turns": expected,
        "terminals": dict(metrics.terminals),
        "steps": metrics.steps_committed,
        "elapsed_s": round(watch.wall, 3),
        "turns_per_s": round(expected / watch.wall, 1),
        "cpu_s": round(watch.cpu, 3),
        "cpu_ms_per_turn": round(1000 * watch.cpu / expected, 3),
        "transactions": metrics.commits,
        "appends": appends,
        "txn_per_turn": round(metrics.commits / expected, 3),
        "appends_per_turn": round(appends / expected, 3),
        "group_sizes": {str(k): v for k, v in sorted(metrics.group_sizes.items())},
        "commit_retries": metrics.commit_retries,
        "deltas_sent": metrics.deltas_sent,
        "deltas_dropped": metrics.deltas_dropped,
        "mean_commit_latency_ms": round(
            1000 * metrics.commit_latency.total / max(metrics.commit_latency.count, 1),
            2,
        ),
    }


async def bench_case(
    bootstrap: str,
    *,
    loops: int,
    turns: int,
    kind: str,
    partitions: int,
    raw: bool = True,
    ungrouped_sample: int = 200,
    around: Around | None = None,
    gc_threshold: int = DEFAULT_GC_THRESHOLD,
) -> dict[str, Any]:
    """One workload: turnstream, then the raw replays of its writes.

    ``ungrouped_sample`` bounds the one-transaction-per-append replay: it
    writes the first that many appends' worth of records per run (0: skip).
    ``gc_threshold``: the collector's first-generation threshold for the case
    (the deployable's by default; 0: CPython's), restored afterwards.
    """
    before = gc.get_threshold()
    try:
        in_force = apply_gc_threshold(gc_threshold)
        result = await _case(
            bootstrap,
            loops=loops,
            turns=turns,
            kind=kind,
            partitions=partitions,
            raw=raw,
            ungrouped_sample=ungrouped_sample,
            around=around,
        )
    finally:
        gc.set_threshold(*before)
    result["gc_threshold"] = in_force[0]
    return result


async def _case(
    bootstrap: str,
    *,
    loops: int,
    turns: int,
    kind: str,
    partitions: int,
    raw: bool,
    ungrouped_sample: int,
    around: Around | None,
) -> dict[str, Any]:
    async with topic_set(bootstrap, f"turns-{kind}", partitions=partitions) as (
        prefix,
        topics,
    ):
        ts = await run_turnstream(
            bootstrap,
            topics,
            prefix,
            loops=loops,
            turns=turns,
            kind=kind,
            partitions=partitions,
            around=around,
        )
        if not raw:
            return {"kind": kind, "partitions": partitions, "turnstream": ts}
        written = await read_back(bootstrap, topics, partitions)
        sizes = Counter[str]()
        for w in written:
            sizes["events"] += len(w.events)
            sizes["event_bytes"] += sum(len(v) for _, v, _ in w.events)
            sizes["states"] += len(w.states)
            sizes["state_bytes"] += sum(len(v) for _, v, _ in w.states)
            sizes["deltas"] += len(w.deltas)
        replay = await raw_replay(
            bootstrap, topics, written, ts["transactions"], group_id=f"{prefix}raw"
        )
        raw_ungrouped = None
        if ungrouped_sample:
            fraction = min(1.0, ungrouped_sample / max(ts["appends"], 1))
            sample = [
                Written(
                    events=w.events[: round(len(w.events) * fraction)],
                    states=w.states[: round(len(w.states) * fraction)],
                    deltas=w.deltas[: round(len(w.deltas) * fraction)],
                )
                for w in written
            ]
            raw_ungrouped = await raw_replay(
                bootstrap,
                topics,
                sample,
                min(ungrouped_sample, ts["appends"]),
                group_id=f"{prefix}raw1",
            )
    raw_turns_per_s = replay["txn_per_s"] / ts["txn_per_turn"]
    result: dict[str, Any] = {
        "kind": kind,
        "partitions": partitions,
        "turnstream": ts,
        "records": dict(sizes),
        "raw_same_transactions": replay,
        "raw_equivalent_turns_per_s": round(raw_turns_per_s, 1),
        "ratio": round(ts["turns_per_s"] / raw_turns_per_s, 3),
    }
    if raw_ungrouped is not None:
        limit = raw_ungrouped["txn_per_s"] / ts["appends_per_turn"]
        result["raw_one_txn_per_append"] = raw_ungrouped
        result["raw_ungrouped_turns_per_s"] = round(limit, 1)
        result["ratio_vs_ungrouped"] = round(ts["turns_per_s"] / limit, 3)
    return result


@contextlib.asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    yield


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    started = time.time()
    cases = []
    for kind in args.kind:
        case = await bench_case(
            args.bootstrap,
            loops=args.loops,
            turns=args.turns,
            kind=kind,
            partitions=args.partitions,
            raw=args.raw,
            gc_threshold=args.gc_threshold,
        )
        print(json.dumps(case), flush=True)
        cases.append(case)
    return {
        "benchmark": "turn throughput vs raw aiokafka transactions",
        "measured_at": now_iso(),
        "duration_s": round(time.time() - started, 1),
        "machine": machine(),
        "cases": cases,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=bootstrap_servers())
    parser.add_argument("--loops", type=int, default=200)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--kind", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument(
        "--no-raw", dest="raw", action="store_false", help="turnstream only"
    )
    parser.add_argument(
        "--gc-threshold",
        type=int,
        default=DEFAULT_GC_THRESHOLD,
        help="collector's first-generation threshold (0: CPython's)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    quiet_kafka_logs()
    doc = asyncio.run(_main(args))
    write_json(args.out, doc)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
