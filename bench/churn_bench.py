"""Takeover time under kill -9 churn, with the default group settings.

Three ``python -m turnstream.loop_actor`` processes (default session, heartbeat
and rebalance timeouts; default static membership, ``--instance-id auto``)
share a consumer group on an isolated topic set while loops run turns back to
back. Every ``--kill-every`` seconds one actor is killed with SIGKILL and a
replacement started at once (as a supervisor would). The takeover time of a
kill is measured per partition the victim owned: from the kill to the next
journal event committed on that partition (seen by the clients). Prints the
distribution and writes ``bench/results/churn_static.json`` (or
``churn_dynamic.json`` with ``--instance-id none``, so the two memberships sit
side by side); also checks the journal invariants and counts actor
self-exits. Run with a broker up::

    python bench/churn_bench.py --seconds 120 --kill-every 3
    python bench/churn_bench.py --seconds 120 -- --instance-id none   # dynamic
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import statistics
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.churn import run_churn
from tests.support.kafka_harness import (
    apply_topic_set,
    check_journal,
    check_snapshots,
    delete_topic_set,
    read_all,
)

RESULTS = Path(__file__).resolve().parent / "results"


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def _membership(actor_args: list[str]) -> str:
    """``dynamic`` when the actors run with ``--instance-id none``, else ``static``."""
    pairs = set(itertools.pairwise(actor_args))
    dynamic = ("--instance-id", "none") in pairs or "--instance-id=none" in actor_args
    return "dynamic" if dynamic else "static"


async def main(args: argparse.Namespace) -> None:
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19092")
    prefix = f"bench-churn-{uuid.uuid4().hex[:8]}."
    topics = await apply_topic_set(bootstrap, prefix, partitions=args.partitions)
    try:
        report = await run_churn(
            bootstrap,
            prefix,
            topics,
            duration=args.seconds,
            kill_every=args.kill_every,
            actors=args.actors,
            loops=args.loops,
            extra=tuple(args.actor_args),
            log_dir=args.logs,
        )
        entries = await read_all(bootstrap, topics, args.partitions)
        check_journal(entries, report.submitted)
        await check_snapshots(bootstrap, topics, args.partitions, entries)
        for name, code, lines in report.self_exits:
            print(f"{name} exited by itself with code {code}; its last lines:")
            print("\n".join(f"    {line}" for line in lines))
        for miss in report.interrupt_misses:
            print("interrupt miss (loop, turn, terminal, sent at):", *miss)
    except BaseException:
        print(f"failed; topics kept under {prefix!r}, actor logs in {args.logs}")
        raise
    else:
        await delete_topic_set(bootstrap, prefix)
    times = report.takeovers
    summary = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpu",
        "seconds": args.seconds,
        "kill_every": args.kill_every,
        "actors": args.actors,
        "loops": args.loops,
        "partitions": args.partitions,
        "actor_args": args.actor_args,
        "membership": _membership(args.actor_args),
        "kills": report.kills,
        "self_exits": len(report.self_exits),
        "submits": len(report.submitted),
        "terminals": dict(report.terminals),
        "interrupts": len(report.interrupted_turns),
        "interrupts_late": report.late_interrupts,
        "interrupts_not_interrupted": sum(
            1 for k in report.interrupted_turns.values() if k != "TurnInterrupted"
        ),
        "takeovers": len(times),
        "partitions_never_taken": report.untaken,
        "takeover_p50_s": round(statistics.median(times), 2) if times else None,
        "takeover_p90_s": round(_quantile(times, 0.9), 2) if times else None,
        "takeover_max_s": round(max(times), 2) if times else None,
        "journal_invariants": "ok",
        "snapshots_point_at_own_events": "ok",
    }
    print(json.dumps(summary, indent=2))
    if times:
        buckets = [1, 2, 5, 8, 12, 20, 30, 60, 120]
        print("takeover distribution (s):")
        low = 0.0
        for high in buckets:
            n = sum(1 for t in times if low < t <= high)
            print(f"  ({low:>4g}, {high:>4g}]  {n:4d}  {'#' * n}")
            low = high
        n = sum(1 for t in times if t > low)
        print(f"  > {low:g}        {n:4d}")
    if not args.no_write:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"churn_{summary['membership']}.json").write_text(
            json.dumps(summary, indent=2) + "\n"
        )
    if report.self_exits or report.interrupt_misses:
        sys.exit("actors exited by themselves or interrupts were missed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--kill-every", type=float, default=3.0)
    parser.add_argument("--actors", type=int, default=3)
    parser.add_argument("--loops", type=int, default=30)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--logs", type=Path, help="write each actor's log here")
    parser.add_argument("actor_args", nargs="*", help="extra actor flags (after --)")
    asyncio.run(main(parser.parse_args()))
