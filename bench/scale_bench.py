"""Scale-out: the same workload through 1 and through 2 loop-actor processes.

For each process count, on a fresh topic set (``--partitions``, 4 by default)
and a fresh consumer group: start that many ``python -m turnstream.loop_actor``
processes (built-in demo model, no tools: one text step per turn), wait until
the group is stable with every process holding partitions and a warm-up turn
has run on every partition, then produce the backlog -- ``loops`` x ``turns``
``SubmitInput`` commands -- and time from the first send until the last
``TurnDone`` is visible ``read_committed`` on the events topic (counted by
record header, no decoding). Also reports each process's CPU seconds during
that window (from ``/proc``). The processes are stopped with SIGTERM (SIGKILL
after 30 s) whatever happens. Usage::

    python bench/scale_bench.py --loops 200 --turns 5 --processes 1 2 1 2
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _support import (
    RESULTS_DIR,
    TypeCounter,
    actor_processes,
    bootstrap_servers,
    cpu_seconds,
    group_state,
    loops_balanced,
    machine,
    now_iso,
    produce_commands,
    quiet_kafka_logs,
    submit_command,
    topic_set,
    wait_until,
    write_json,
)

RESULTS = RESULTS_DIR / "scale.json"
QUESTION = "Summarise the incident report in two sentences."


async def wait_group(bootstrap: str, group_id: str, members: int) -> None:
    """Until the group is Stable with ``members`` members holding partitions."""
    async with asyncio.timeout(120):
        while True:
            try:
                state, assigned = await group_state(bootstrap, group_id)
            except Exception:
                state, assigned = "", 0
            if state == "Stable" and assigned == members:
                return
            await asyncio.sleep(0.5)


async def run_case(
    bootstrap: str, *, processes: int, loops: int, turns: int, partitions: int
) -> dict[str, Any]:
    """One process count: start, warm up, time the backlog, stop."""
    async with topic_set(bootstrap, f"scale-{processes}p", partitions=partitions) as (
        prefix,
        topics,
    ):
        group_id = f"{prefix}actors"
        counter = TypeCounter(bootstrap, topics.events, partitions)
        await counter.start()
        try:
            with actor_processes(
                processes, bootstrap=bootstrap, prefix=prefix, group_id=group_id
            ) as procs:
                await wait_group(bootstrap, group_id, processes)
                session = uuid.uuid4()
                warm = [
                    submit_command(loop, session, "warm up")
                    for loop in loops_balanced(partitions, partitions)
                ]
                await produce_commands(bootstrap, topics.commands, warm)
                await wait_until(
                    lambda: counter.counts["TurnDone"] >= partitions, timeout=120
                )
                state, assigned = await group_state(bootstrap, group_id)
                loop_ids = loops_balanced(loops, partitions)
                backlog = [
                    submit_command(loop, session, f"{QUESTION} (#{t})")
                    for t in range(turns)
                    for loop in loop_ids
                ]
                target = counter.counts["TurnDone"] + len(backlog)
                cpu_before = [cpu_seconds(p.pid) for p in procs]
                started = time.perf_counter()
                await produce_commands(bootstrap, topics.commands, backlog)
                await wait_until(
                    lambda: counter.counts["TurnDone"] >= target,
                    timeout=600,
                    interval=0.01,
                )
                elapsed = counter.last_seen - started
                cpu_used = [
                    round(cpu_seconds(p.pid) - c, 2)
                    for p, c in zip(procs, cpu_before, strict=True)
                ]
                alive = [p.poll() is None for p in procs]
        finally:
            await counter.stop()
    total = loops * turns
    return {
        "processes": processes,
        "partitions": partitions,
        "turns": total,
        "elapsed_s": round(elapsed, 3),
        "turns_per_s": round(total / elapsed, 1),
        "process_cpu_s": cpu_used,
        "cpu_ms_per_turn": round(1000 * sum(cpu_used) / total, 3),
        "group_state_after_warmup": f"{state}, {assigned} members assigned",
        "all_alive_at_end": all(alive),
    }


async def bench(
    bootstrap: str, *, counts: list[int], loops: int, turns: int, partitions: int
) -> dict[str, Any]:
    """Every process count in order (repeats allowed), then each run's speed-up.

    The speed-up is over the mean turns/s of the runs with ``counts[0]``
    processes.
    """
    cases = []
    for processes in counts:
        case = await run_case(
            bootstrap,
            processes=processes,
            loops=loops,
            turns=turns,
            partitions=partitions,
        )
        print(json.dumps(case), flush=True)
        cases.append(case)
    firsts = [c["turns_per_s"] for c in cases if c["processes"] == counts[0]]
    base = sum(firsts) / len(firsts)
    for case in cases:
        case["speedup"] = round(case["turns_per_s"] / base, 2)
    return {"loops": loops, "turns_per_loop": turns, "cases": cases}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=bootstrap_servers())
    parser.add_argument("--loops", type=int, default=200)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    quiet_kafka_logs()
    result = asyncio.run(
        bench(
            args.bootstrap,
            counts=args.processes,
            loops=args.loops,
            turns=args.turns,
            partitions=args.partitions,
        )
    )
    doc = {"measured_at": now_iso(), "machine": machine(), **result}
    write_json(args.out, doc)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
