"""CPU per delta send: keyed (aiokafka hashes the key) vs an explicit partition.

``DeltaPublisher`` sends every delta with its loop key and no partition, so
aiokafka runs its pure-Python murmur2 partitioner per record. This measures,
on the real broker (``acks=1``, ``linger_ms=5``, a fresh 4-partition topic),
the process-CPU microseconds per ``send`` -- including the producer's sender
work until every delivery is acknowledged -- for 5,000 records over 200 keys:
keyed only, then keyed with the partition computed once per key (proposal 3).
Rounds alternate the two. Also times the partitioner alone. Usage::

    python bench/lab/profile_deltas_send.py --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

from _support import (
    LAB_OUT_DIR,
    bootstrap_servers,
    now_iso,
    quiet_kafka_logs,
    topic_set,
    write_json,
)

SENDS = 5000
PARTITIONS = [0, 1, 2, 3]


async def one_round(
    producer: AIOKafkaProducer, topic: str, keys: list[bytes], *, cached: bool
) -> float:
    """CPU µs per send for one batch of ``SENDS`` records."""
    partitioner = DefaultPartitioner()
    cache: dict[bytes, int] = {}
    value = b"x" * 180
    futures = []
    started = time.process_time()
    for i in range(SENDS):
        key = keys[i % len(keys)]
        partition = None
        if cached:
            partition = cache.get(key)
            if partition is None:
                partition = cache[key] = partitioner(key, PARTITIONS, PARTITIONS)
        futures.append(await producer.send(topic, value, key=key, partition=partition))
    await asyncio.gather(*futures)
    return (time.process_time() - started) / SENDS * 1e6


async def bench(bootstrap: str, rounds: int) -> dict[str, Any]:
    """Alternating rounds of both modes, and the partitioner alone."""
    keys = [uuid.uuid4().bytes for _ in range(200)]
    keyed: list[float] = []
    explicit: list[float] = []
    async with topic_set(bootstrap, "deltas-send", partitions=len(PARTITIONS)) as (
        _prefix,
        topics,
    ):
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5)
        await producer.start()
        try:
            await one_round(producer, topics.deltas, keys, cached=False)  # warm-up
            for _ in range(rounds):
                keyed.append(
                    await one_round(producer, topics.deltas, keys, cached=False)
                )
                explicit.append(
                    await one_round(producer, topics.deltas, keys, cached=True)
                )
        finally:
            await producer.stop()
    partitioner = DefaultPartitioner()
    started = time.process_time()
    for i in range(20_000):
        partitioner(keys[i % len(keys)], PARTITIONS, PARTITIONS)
    alone = (time.process_time() - started) / 20_000 * 1e6
    return {
        "sends_per_round": SENDS,
        "keyed_us_per_send": [round(x, 1) for x in keyed],
        "explicit_partition_us_per_send": [round(x, 1) for x in explicit],
        "partitioner_alone_us": round(alone, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=bootstrap_servers())
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--out", type=Path, default=LAB_OUT_DIR / "profile_deltas_send.json"
    )
    args = parser.parse_args(argv)
    quiet_kafka_logs()
    doc = {"measured_at": now_iso(), **asyncio.run(bench(args.bootstrap, args.rounds))}
    print(json.dumps(doc, indent=2))
    write_json(args.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
