"""Tool side effects of continuing turns under kill -9 churn: the ledger counts.

Three ``python -m turnstream.loop_actor`` processes host
``tests.support.ledger_agents:ledger`` (``on_restore="continue"``) on an
isolated topic set; ``--loops`` loops run turns back to back, each of 4 tool
steps alternating an idempotent ``refund`` (applied once per idempotency key
by a keyed store) and a non-idempotent ``notify``, each waiting
``--tool-delay`` seconds so kills land mid-step. Every ``--kill-every``
seconds one actor is killed with SIGKILL and a replacement started at once.
The tools write a SQLite ledger outside the actors and (unless
``--no-kafka-effects``) each call also stages a Kafka record for an effect
topic, committed with its step; afterwards the journal, the ledger and the
effect topic (``read_committed``) are compared (see
``tests/support/ledger_churn.py`` for each count). Writes
``bench/results/resume_churn.json``; exits non-zero if a count that must be 0
is not. Run with a broker up::

    python bench/resume_churn_bench.py --seconds 60 --loops 100
    python bench/resume_churn_bench.py --no-write -- --instance-id none  # dynamic
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.kafka_harness import apply_topic_set, delete_topic_set
from tests.support.ledger_agents import LEDGER_STEPS
from tests.support.ledger_churn import run_ledger_churn

RESULTS = Path(__file__).resolve().parent / "results" / "resume_churn.json"


async def bench(
    bootstrap: str,
    *,
    seconds: float = 60,
    loops: int = 100,
    kill_every: float = 3.0,
    actors: int = 3,
    partitions: int = 6,
    tool_delay: float = 0.2,
    max_resumes: int = 3,
    logs: Path | None = None,
    actor_args: tuple[str, ...] = (),
    kafka_effects: bool = True,
) -> dict[str, object]:
    """One churn run on its own topic set; the counts and the run's parameters."""
    prefix = f"bench-ledger-{uuid.uuid4().hex[:8]}."
    topics = await apply_topic_set(bootstrap, prefix, partitions=partitions)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ledger-") as tmp:
        try:
            report = await run_ledger_churn(
                bootstrap,
                prefix,
                topics,
                ledger_path=Path(tmp) / "ledger.sqlite",
                duration=seconds,
                partitions=partitions,
                kill_every=kill_every,
                actors=actors,
                loops=loops,
                tool_delay=tool_delay,
                max_resumes=max_resumes,
                log_dir=logs,
                extra=actor_args,
                kafka_effects=kafka_effects,
            )
        except BaseException:
            print(f"failed; topics kept under {prefix!r}, actor logs in {logs}")
            raise
    await delete_topic_set(bootstrap, prefix)
    zero = report.zero_counts()
    return {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpu",
        "seconds": seconds,
        "wall_s": round(time.monotonic() - started, 1),
        "kill_every": kill_every,
        "actors": actors,
        "loops": loops,
        "partitions": partitions,
        "tool_steps_per_turn": LEDGER_STEPS,
        "tool_delay_s": tool_delay,
        "max_resumes": max_resumes,
        "actor_args": list(actor_args),
        "must_be_zero": zero,
        **{k: v for k, v in report.as_dict().items() if k not in zero},
    }


async def main(args: argparse.Namespace) -> dict[str, object]:
    summary = await bench(
        os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19092"),
        seconds=args.seconds,
        loops=args.loops,
        kill_every=args.kill_every,
        actors=args.actors,
        partitions=args.partitions,
        tool_delay=args.tool_delay,
        max_resumes=args.max_resumes,
        logs=args.logs,
        actor_args=tuple(args.actor_args),
        kafka_effects=not args.no_kafka_effects,
    )
    print(json.dumps(summary, indent=2))
    if not args.no_write:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps(summary, indent=2) + "\n")
    return summary


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--kill-every", type=float, default=3.0)
    parser.add_argument("--actors", type=int, default=3)
    parser.add_argument("--loops", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--tool-delay", type=float, default=0.2)
    parser.add_argument("--max-resumes", type=int, default=3)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument(
        "--no-kafka-effects",
        action="store_true",
        help="the tools stage no Kafka record (the ledger alone)",
    )
    parser.add_argument("--logs", type=Path, help="write each actor's log here")
    parser.add_argument("actor_args", nargs="*", help="extra actor flags (after --)")
    result = asyncio.run(main(parser.parse_args()))
    zero_counts = result["must_be_zero"]
    assert isinstance(zero_counts, dict)
    if any(zero_counts.values()):
        sys.exit(f"counts that must be 0 are not: {zero_counts}")
