"""Transactions, latency and CPU per turn, one conversation at a time (issue 22).

The peer workload's turnstream-on-Kafka system (``bench/peers``: the in-process
``LoopActorService`` on a fresh 4-partition topic set and a ``KafkaSession``
client; the scripted model answers in 20 text chunks, a tool turn first asks for
one ``add`` call) without the peer frameworks, so it runs in the project's own
virtualenv. Per kind of turn, after one warm-up conversation:

* **transactions per turn**: the service's commits counter (every Kafka
  transaction it committed, offsets-only ones included) over the phase, divided
  by the turns;
* **latency**: submit -> the ``TurnDone`` seen by the client, per turn,
  nearest-rank p50/p99;
* **CPU ms per turn**: this process (service + client) plus the broker JVM;
* **mean append -> commit ms**: how long one journal append waited for its
  transaction (the service's commit latency histogram);
* **CPU split**: the same CPU as this process's and the broker's;
* **raw floor**: the turn's own writes with plain aiokafka, one turn at a time
  -- each journal append as one transaction of the same number of records and
  bytes (the first also committing a consumer offset, as the service's first
  does), and the turn's deltas as ``acks=1`` records between them -- with the
  client's and the broker's CPU per turn. No reader and no command consumer:
  a lower bound on what the writes alone cost.

Turns run one at a time, so a transaction is one turn's and nothing is group
committed with another loop's. ``--out`` writes the numbers as JSON.

    python bench/txn_bench.py --conversations 20 --turns 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

import turnstream_systems
import workload
from aiokafka import AIOKafkaProducer, TopicPartition

from _support import (
    bootstrap_servers,
    load_average,
    machine,
    now_iso,
    quiet_kafka_logs,
    topic_set,
    write_json,
)


async def one_kind(
    kind: str, *, bootstrap: str, conversations: int, turns: int
) -> dict[str, Any]:
    """Warm-up, then ``conversations`` one at a time, for one kind of turn."""
    async with turnstream_systems.open_kafka(
        kind, turns, bootstrap=bootstrap
    ) as system:
        await workload.latency(
            system, kind, conversations=1, turns=turns, first_index=10_000
        )
        metrics = system.metrics
        before = metrics.commits
        waited = metrics.commit_latency.total, metrics.commit_latency.count
        doc = await workload.latency(
            system, kind, conversations=conversations, turns=turns, first_index=20_000
        )
        doc["broker_cpu_ms_per_turn"] = round(
            sum(doc["server_cpu_ms_per_turn"].values()), 2
        )
        commits = metrics.commits - before
        doc["transactions"] = commits
        doc["transactions_per_turn"] = round(commits / doc["turns"], 3)
        appends = metrics.commit_latency.count - waited[1]
        doc["mean_append_to_commit_ms"] = round(
            1000 * (metrics.commit_latency.total - waited[0]) / max(appends, 1), 2
        )
        doc["deltas_dropped"] = system.metrics.deltas_dropped
        return doc


# One turn's writes as the service makes them one turn at a time (this bench:
# 2.2 / 3.2 transactions per turn; the peers bench: 20 / 24 deltas per turn):
# (records, bytes) per transaction -- events plus the state record -- and the
# deltas, sent after the first transaction.
TURN_SHAPES = {
    "text": ((2, 300), (4, 700)),
    "tool": ((2, 300), (3, 900), (4, 900)),
}
DELTAS_PER_TURN = {"text": 20, "tool": 24}
DELTA_BYTES = 180


async def raw_floor(kind: str, *, bootstrap: str, turns: int) -> dict[str, Any]:
    """The turn's writes with plain aiokafka, one turn at a time; CPU per turn."""
    shape = TURN_SHAPES[kind]
    deltas = DELTAS_PER_TURN[kind]
    broker = turnstream_systems.broker_pid()
    servers = [workload.ServerProcess("kafka broker", broker)] if broker else []
    async with topic_set(bootstrap, f"txn-raw-{kind}", partitions=4) as (
        prefix,
        topics,
    ):
        txn = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            transactional_id=f"{prefix}raw-{uuid.uuid4().hex[:8]}",
            linger_ms=0,
        )
        lossy = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=0)
        await txn.start()
        await lossy.start()
        commands = TopicPartition(topics.commands, 0)
        try:

            async def one_turn(n: int) -> None:
                for index, (records, size) in enumerate(shape):
                    if index == 1:  # the step's deltas stream after TurnStarted
                        sent = [
                            await lossy.send(
                                topics.deltas, b"d" * DELTA_BYTES, partition=0
                            )
                            for _ in range(deltas)
                        ]
                        await asyncio.gather(*sent)
                    await txn.begin_transaction()
                    futures = [
                        await txn.send(
                            topics.events, b"e" * (size // records), partition=0
                        )
                        for _ in range(records)
                    ]
                    await asyncio.gather(*futures)
                    if index == 0:
                        await txn.send_offsets_to_transaction(
                            {commands: n + 1}, f"{prefix}raw"
                        )
                    await txn.commit_transaction()

            await one_turn(0)  # warm-up: metadata, coordinator, connections
            with workload.CpuMeter(servers) as meter:
                for n in range(1, turns + 1):
                    await one_turn(n)
            return {
                "turns": turns,
                "transactions_per_turn": len(shape),
                "ms_per_turn": round(1000 * meter.wall / turns, 2),
                "own_cpu_ms_per_turn": round(1000 * meter.own / turns, 2),
                "broker_cpu_ms_per_turn": round(
                    1000 * sum(meter.server.values()) / turns, 2
                )
                if servers
                else None,
            }
        finally:
            await lossy.stop()
            await txn.stop()


async def run(
    bootstrap: str, *, conversations: int, turns: int, kinds: list[str]
) -> dict[str, Any]:
    """Every kind, then each kind's raw floor; the result document."""
    started = now_iso()
    load = load_average()
    results = {
        kind: await one_kind(
            kind, bootstrap=bootstrap, conversations=conversations, turns=turns
        )
        for kind in kinds
    }
    for kind in kinds:
        results[kind]["raw_floor"] = await raw_floor(
            kind, bootstrap=bootstrap, turns=conversations * turns
        )
    return {
        "started": started,
        "finished": now_iso(),
        "load_average_start": load,
        "load_average_end": load_average(),
        "machine": machine(),
        "config": {"conversations": conversations, "turns": turns},
        "results": results,
    }


def table(doc: dict[str, Any]) -> list[str]:
    """The markdown rows of one run."""
    lines = [
        "| kind | txns/turn | latency p50 / p99 ms | CPU ms/turn: process / broker "
        "/ both | raw writes alone: client / broker ms/turn | raw ms/turn |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for kind, r in doc["results"].items():
        raw = r["raw_floor"]
        lat = r["latency_ms"]
        lines.append(
            f"| {kind} | {r['transactions_per_turn']} | {lat['p50']} / {lat['p99']} "
            f"| {r['own_cpu_ms_per_turn']} / {r['broker_cpu_ms_per_turn']} / "
            f"{r['cpu_ms_per_turn']} | {raw['own_cpu_ms_per_turn']} / "
            f"{raw['broker_cpu_ms_per_turn']} | {raw['ms_per_turn']} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run the bench and print (and optionally write) its numbers."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=bootstrap_servers())
    parser.add_argument("--conversations", type=int, default=20)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument(
        "--kind", nargs="+", choices=("text", "tool"), default=["text", "tool"]
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    quiet_kafka_logs()
    doc = asyncio.run(
        run(
            args.bootstrap,
            conversations=args.conversations,
            turns=args.turns,
            kinds=args.kind,
        )
    )
    for kind, result in doc["results"].items():
        lat = result["latency_ms"]
        print(
            f"{kind}: {result['transactions_per_turn']} txns/turn, "
            f"latency p50 {lat['p50']} / p99 {lat['p99']} ms, "
            f"CPU {result['cpu_ms_per_turn']} ms/turn, "
            f"append->commit {result['mean_append_to_commit_ms']} ms, "
            f"deviations {result['deviations']['count']}"
        )
        raw = result["raw_floor"]
        print(
            f"  CPU split: process {result['own_cpu_ms_per_turn']}, broker "
            f"{result['broker_cpu_ms_per_turn']} ms/turn; raw floor of the writes: "
            f"client {raw['own_cpu_ms_per_turn']}, broker "
            f"{raw['broker_cpu_ms_per_turn']} ms/turn, {raw['ms_per_turn']} ms/turn"
        )
    if args.out:
        write_json(args.out, doc)
    else:
        print(json.dumps(doc["results"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
