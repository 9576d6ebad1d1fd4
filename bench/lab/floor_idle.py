"""Kafka's acks=1 floor vs how long the process was idle before the send.

The delta target compares turnstream's chunk -> ``TokenDelta`` latency with
a plain-aiokafka floor: one ``acks=1`` record to a ``read_uncommitted``
reader. This measures that floor alone, the reader polling in the background
(as every live reader does), after the process sat idle for ``--idle`` seconds
before each send (0: back to back). A token delta of a turn follows the
``TurnStarted`` commit, a wait on the broker, so its process is seldom hot.
Also once with the reader on all 4 partitions of the topic (a session's
reader) instead of one. Usage::

    python bench/lab/floor_idle.py --idle 0 0.003 0.05 --samples 300
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

from _support import (
    LAB_OUT_DIR,
    bootstrap_servers,
    machine,
    now_iso,
    percentiles,
    quiet_kafka_logs,
    topic_set,
    write_json,
)

RESULTS = LAB_OUT_DIR / "floor_idle.json"


async def floor(
    bootstrap: str, *, idle: float, samples: int, partitions: int
) -> dict[str, Any]:
    """``samples`` records, each sent after ``idle`` s; send -> seen latencies."""
    async with topic_set(bootstrap, "floor-idle", partitions=partitions) as (
        _prefix,
        topics,
    ):
        lossy = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=0)
        reader = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, isolation_level="read_uncommitted"
        )
        await lossy.start()
        await reader.start()
        try:
            tps = [TopicPartition(topics.deltas, p) for p in range(partitions)]
            reader.assign(tps)
            await reader.seek_to_end(*tps)
            for tp in tps:
                await reader.position(tp)
            seen: list[float] = []
            async with asyncio.timeout(60 + samples * (idle + 0.1)):
                for _ in range(samples + 1):  # the first one warms up
                    await asyncio.sleep(idle)
                    sent = time.monotonic()
                    await lossy.send(topics.deltas, b"x" * 300, partition=0)
                    while not await reader.getmany(timeout_ms=1000):
                        pass
                    seen.append(time.monotonic() - sent)
            return {
                "idle_s": idle,
                "partitions_read": partitions,
                "send_to_seen_ms": percentiles(seen[1:]),
            }
        finally:
            await reader.stop()
            await lossy.stop()


async def bench(bootstrap: str, *, idles: list[float], samples: int) -> dict[str, Any]:
    """Every idle time on one partition, then the first one on four."""
    cases = [
        await floor(bootstrap, idle=idle, samples=samples, partitions=1)
        for idle in idles
    ]
    cases.append(await floor(bootstrap, idle=idles[0], samples=samples, partitions=4))
    return {"at": now_iso(), "machine": machine(), "cases": cases}


def main(argv: list[str] | None = None) -> int:
    """Run and print (and write) the floors."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=bootstrap_servers())
    parser.add_argument("--idle", type=float, nargs="+", default=[0.0, 0.003, 0.05])
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    quiet_kafka_logs()
    doc = asyncio.run(bench(args.bootstrap, idles=args.idle, samples=args.samples))
    for case in doc["cases"]:
        p = case["send_to_seen_ms"]
        print(
            f"idle {case['idle_s'] * 1000:g} ms, {case['partitions_read']} partition(s)"
            f" read: p50 {p['p50']} / p99 {p['p99']} ms"
        )
    write_json(args.out, doc)
    print(json.dumps({"wrote": str(args.out)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
