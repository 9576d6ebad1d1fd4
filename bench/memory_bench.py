"""Resident memory of one loop-actor process holding N idle loops.

Starts one ``python -m turnstream.loop_actor`` process (demo model, no tools)
on a fresh topic set, waits until it is ready (group stable, partitions
assigned), and reads its ``VmRSS`` from ``/proc/PID/status`` with no loop
created yet (N = 0). It then creates loops in steps -- one ``SubmitInput`` per
new loop, so each loop runs one short turn and parks idle -- and after each
step, once every new loop's ``LoopIdle`` is committed and the process has had
``--settle`` seconds to go quiet, reads ``VmRSS`` again. Reported per step:
RSS, RSS growth over N = 0 per loop, and the marginal bytes per loop between
consecutive steps (one-off costs such as lazily imported modules and the first
turn's allocations fall in the first step, not the slope). Usage::

    python bench/memory_bench.py --loops 0 1000 5000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _support import (
    RESULTS_DIR,
    TypeCounter,
    actor_processes,
    bootstrap_servers,
    machine,
    now_iso,
    produce_commands,
    quiet_kafka_logs,
    rss_bytes,
    submit_command,
    topic_set,
    wait_until,
    write_json,
)
from scale_bench import wait_group

RESULTS = RESULTS_DIR / "memory.json"


async def settled_rss(pid: int, settle: float) -> int:
    """RSS after ``settle`` seconds of quiet: the lowest of a few reads."""
    await asyncio.sleep(settle)
    reads = []
    for _ in range(5):
        reads.append(rss_bytes(pid))
        await asyncio.sleep(0.2)
    return min(reads)


def _parked(counter: TypeCounter, loops: int) -> Callable[[], bool]:
    """Whether ``loops`` loops have parked (``LoopIdle`` committed) in total."""
    return lambda: counter.counts["LoopIdle"] >= loops


async def bench(
    bootstrap: str, *, steps: list[int], partitions: int, settle: float
) -> dict[str, Any]:
    """RSS of one actor process at each loop count in ``steps`` (ascending)."""
    rows: list[dict[str, Any]] = []
    async with topic_set(bootstrap, "memory", partitions=partitions) as (
        prefix,
        topics,
    ):
        group_id = f"{prefix}actors"
        counter = TypeCounter(bootstrap, topics.events, partitions)
        await counter.start()
        try:
            with actor_processes(
                1, bootstrap=bootstrap, prefix=prefix, group_id=group_id
            ) as (proc,):
                await wait_group(bootstrap, group_id, 1)
                session = uuid.uuid4()
                held = 0
                for target in sorted(set(steps)):
                    started = time.perf_counter()
                    if target > held:
                        new = [
                            submit_command(uuid.uuid4(), session, "hello")
                            for _ in range(target - held)
                        ]
                        await produce_commands(bootstrap, topics.commands, new)
                        await wait_until(
                            _parked(counter, target), timeout=900, interval=0.05
                        )
                        held = target
                    rss = await settled_rss(proc.pid, settle)
                    rows.append(
                        {
                            "loops": held,
                            "rss_bytes": rss,
                            "rss_mib": round(rss / 2**20, 1),
                            "create_s": round(time.perf_counter() - started, 1),
                        }
                    )
                    print(json.dumps(rows[-1]), flush=True)
                alive = proc.poll() is None
        finally:
            await counter.stop()
    base = rows[0]["rss_bytes"]
    for previous, row in zip([None, *rows[:-1]], rows, strict=True):
        if row["loops"]:
            row["bytes_per_loop_vs_first"] = round(
                (row["rss_bytes"] - base) / max(row["loops"] - rows[0]["loops"], 1)
            )
        if previous is not None and row["loops"] > previous["loops"]:
            row["marginal_bytes_per_loop"] = round(
                (row["rss_bytes"] - previous["rss_bytes"])
                / (row["loops"] - previous["loops"])
            )
    return {"steps": rows, "process_alive_at_end": alive}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=bootstrap_servers())
    parser.add_argument("--loops", type=int, nargs="+", default=[0, 1000, 5000])
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--settle", type=float, default=2.0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    quiet_kafka_logs()
    result = asyncio.run(
        bench(
            args.bootstrap,
            steps=args.loops,
            partitions=args.partitions,
            settle=args.settle,
        )
    )
    doc = {"measured_at": now_iso(), "machine": machine(), **result}
    write_json(args.out, doc)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
