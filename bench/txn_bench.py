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
  transaction (the service's commit latency histogram).

Turns run one at a time, so a transaction is one turn's and nothing is group
committed with another loop's. ``--out`` writes the numbers as JSON.

    python bench/txn_bench.py --conversations 20 --turns 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

import turnstream_systems
import workload

from _support import (
    bootstrap_servers,
    load_average,
    machine,
    now_iso,
    quiet_kafka_logs,
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
        commits = metrics.commits - before
        doc["transactions"] = commits
        doc["transactions_per_turn"] = round(commits / doc["turns"], 3)
        appends = metrics.commit_latency.count - waited[1]
        doc["mean_append_to_commit_ms"] = round(
            1000 * (metrics.commit_latency.total - waited[0]) / max(appends, 1), 2
        )
        doc["deltas_dropped"] = system.metrics.deltas_dropped
        return doc


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    """Every requested kind, one after another."""
    started = now_iso()
    load = load_average()
    results = {
        kind: await one_kind(
            kind,
            bootstrap=args.bootstrap,
            conversations=args.conversations,
            turns=args.turns,
        )
        for kind in args.kind
    }
    return {
        "started": started,
        "finished": now_iso(),
        "load_average_start": load,
        "load_average_end": load_average(),
        "machine": machine(),
        "config": {"conversations": args.conversations, "turns": args.turns},
        "results": results,
    }


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
    doc = asyncio.run(bench(args))
    for kind, result in doc["results"].items():
        lat = result["latency_ms"]
        print(
            f"{kind}: {result['transactions_per_turn']} txns/turn, "
            f"latency p50 {lat['p50']} / p99 {lat['p99']} ms, "
            f"CPU {result['cpu_ms_per_turn']} ms/turn, "
            f"append->commit {result['mean_append_to_commit_ms']} ms, "
            f"deviations {result['deviations']['count']}"
        )
    if args.out:
        write_json(args.out, doc)
    else:
        print(json.dumps(doc["results"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
