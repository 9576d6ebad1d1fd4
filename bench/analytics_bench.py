"""Analytics throughput: the pure fold, and the faust app end to end on the broker.

Two measurements, written to ``bench/results/analytics.json``:

* **pure** (no broker): a synthetic journal (``turnstream.analytics.sample``,
  mixed outcomes, 2 steps and 1 tool call per turn) folded into per-loop
  state -- ``fold`` alone on typed events, and ``unmarshal_event`` + ``fold``
  on the Avro frames (what the faust agent does per record, minus faust) --
  plus the cost of merging every loop into one snapshot. Median of
  repetitions, with ``time.perf_counter``.
* **end to end** (real broker): N events are pre-produced with the real codec
  in transactions to a fresh 3-partition topic; then an ``AnalyticsApp`` is
  started in-process with a fresh app id and the clock runs until every
  record has been folded. Reported: start-up (until table recovery is done),
  processing time and events/s, per processing guarantee. Each run uses its
  own topics, deleted afterwards.

Usage::

    python bench/analytics_bench.py                 # full run, writes the JSON
    python bench/analytics_bench.py --quick         # small N, no file
    python bench/analytics_bench.py --no-broker     # pure part only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from turnstream.analytics.aggregate import FoldConfig, TerminalKind, fold_journal
from turnstream.analytics.app import AnalyticsApp
from turnstream.analytics.report import build_snapshot
from turnstream.analytics.sample import LoopPlan, TurnPlan, build_journal
from turnstream.analytics.settings import AnalyticsSettings, Guarantee
from turnstream.events import EnduringEvent, FailureKind
from turnstream.wire.codec import marshal_event, unmarshal_event

RESULTS = Path(__file__).resolve().parent / "results" / "analytics.json"
PARTITIONS = 3
OUTCOMES = (
    TerminalKind.DONE,
    TerminalKind.DONE,
    TerminalKind.FAILED,
    TerminalKind.DONE,
    TerminalKind.INTERRUPTED,
)
EVENTS_PER_TURN = 5  # TurnStarted, 2 x StepDone, terminal, LoopIdle


def make_journal(events: int, loops: int) -> list[EnduringEvent]:
    turns = max(1, (events // loops - 1) // EVENTS_PER_TURN)
    plans = [
        LoopPlan(
            model=f"model-{i % 3}",
            turns=[
                TurnPlan(
                    OUTCOMES[(i + t) % len(OUTCOMES)],
                    steps=2,
                    tool_calls_per_step=1,
                    latency_ms=500 + 37 * ((i * 7 + t) % 100),
                    failure=FailureKind.PROVIDER,
                )
                for t in range(turns)
            ],
        )
        for i in range(loops)
    ]
    return build_journal(plans, seed=7)


def _timed(fn: Any, repetitions: int) -> tuple[float, float]:
    times = []
    for _ in range(repetitions):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def bench_pure(events: int, loops: int, repetitions: int) -> dict[str, Any]:
    journal = make_journal(events, loops)
    frames = [marshal_event(e) for e in journal]
    config = FoldConfig()
    n = len(journal)
    fold_median, fold_best = _timed(lambda: fold_journal(journal, config), repetitions)
    dec_median, dec_best = _timed(
        lambda: fold_journal(map(unmarshal_event, frames), config), repetitions
    )
    states = fold_journal(journal, config)
    snap_median, _ = _timed(
        lambda: build_snapshot(states.values(), config, app_id="bench"), repetitions
    )
    state_bytes = statistics.median(
        len(json.dumps(s.to_dict(), separators=(",", ":"))) for s in states.values()
    )
    return {
        "events": n,
        "loops": loops,
        "fold_only": {
            "events_per_s": round(n / fold_median),
            "events_per_s_best": round(n / fold_best),
            "us_per_event": round(fold_median / n * 1e6, 2),
        },
        "decode_and_fold": {
            "events_per_s": round(n / dec_median),
            "events_per_s_best": round(n / dec_best),
            "us_per_event": round(dec_median / n * 1e6, 2),
        },
        "snapshot_build_ms": round(snap_median * 1000, 2),
        "loop_state_json_bytes_median": state_bytes,
        "repetitions": repetitions,
    }


async def _produce(
    bootstrap: str, topic: str, journal: Sequence[EnduringEvent]
) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=f"bench-analytics-{uuid.uuid4().hex[:8]}",
        linger_ms=5,
    )
    await producer.start()
    try:
        for start in range(0, len(journal), 1_000):
            async with producer.transaction():
                for event in journal[start : start + 1_000]:
                    await producer.send(
                        topic,
                        key=str(event.header.loop_id).encode(),
                        value=marshal_event(event),
                    )
    finally:
        await producer.stop()


async def _admin(bootstrap: str) -> AIOKafkaAdminClient:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    return admin


async def bench_e2e(
    bootstrap: str, events: int, loops: int, guarantee: Guarantee
) -> dict[str, Any]:
    prefix = f"bench-analytics-{uuid.uuid4().hex[:8]}."
    settings = AnalyticsSettings(
        bootstrap=bootstrap,
        app_id=f"{prefix}app",
        events_topic=f"{prefix}events",
        analytics_topic=f"{prefix}analytics",
        partitions=PARTITIONS,
        web_enabled=False,
        data_dir=Path(tempfile.mkdtemp(prefix="analytics-bench-")),
        guarantee=guarantee,
    )
    journal = make_journal(events, loops)
    admin = await _admin(bootstrap)
    try:
        await admin.create_topics([NewTopic(settings.events_topic, PARTITIONS, 1)])
        produce_start = time.perf_counter()
        await _produce(bootstrap, settings.events_topic, journal)
        produce_s = time.perf_counter() - produce_start

        app = AnalyticsApp(settings)
        t0 = time.perf_counter()
        await app.start()
        ready = time.perf_counter()
        try:
            async with asyncio.timeout(600):
                while app.records < len(journal):  # noqa: ASYNC110 - a counter, no event
                    await asyncio.sleep(0.05)
            done = time.perf_counter()
            snap = app.snapshot()
        finally:
            await app.stop()
        assert snap.events_applied == len(journal), snap.events_applied
        processing = done - ready
        return {
            "guarantee": guarantee.value,
            "events": len(journal),
            "loops": loops,
            "partitions": PARTITIONS,
            "produce_s": round(produce_s, 2),
            "startup_s": round(ready - t0, 2),
            "processing_s": round(processing, 2),
            "events_per_s": round(len(journal) / processing),
            "events_per_s_including_startup": round(len(journal) / (done - t0)),
        }
    finally:
        topics = [t for t in await admin.list_topics() if t.startswith(prefix)]
        if topics:
            await admin.delete_topics(topics)
        await admin.close()


def environment() -> dict[str, Any]:
    import aiokafka
    import fastavro
    import faust

    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "faust_streaming": faust.__version__,
        "aiokafka": aiokafka.__version__,
        "fastavro": fastavro.__version__,
    }


async def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--loops", type=int, default=200)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="small N, no results file")
    parser.add_argument("--no-broker", action="store_true", help="pure part only")
    args = parser.parse_args(argv)
    if args.quick:
        args.events, args.loops, args.repetitions = 2_000, 40, 2
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)

    result: dict[str, Any] = {
        "generated_at": datetime.now(tz=UTC).isoformat(timespec="seconds"),
        "command": "python bench/analytics_bench.py " + " ".join(argv or sys.argv[1:]),
        "environment": environment(),
        "pure": bench_pure(args.events, args.loops, args.repetitions),
        "end_to_end": [],
    }
    print(json.dumps(result["pure"], indent=2))
    if not args.no_broker:
        bootstrap = (
            os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip() or "127.0.0.1:19092"
        )
        result["environment"]["bootstrap"] = bootstrap
        for guarantee in (Guarantee.EXACTLY_ONCE, Guarantee.AT_LEAST_ONCE):
            row = await bench_e2e(bootstrap, args.events, args.loops, guarantee)
            print(json.dumps(row))
            result["end_to_end"].append(row)
    if not args.quick:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
