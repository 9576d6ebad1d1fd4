"""The CPU cost of tracing per turn: the actor with tracing off vs on at 100 %.

``python bench/tracing_bench.py [--quick] [--pairs N] [--loops N]``: the same
backlog of tool turns (two tool steps, then a text answer: 1 turn, 3 steps, 3
model requests, 2 tool calls = 9 spans) runs through an in-process loop-actor
service twice per pair, tracing off and tracing on with every turn sampled and
exported over OTLP/HTTP to a real Jaeger (``infra/jaeger/build.sh``'s binary).
CPU is the run's process's (every thread: the OTLP exporter's too), from the
first turn to the last terminal plus the exporter's final flush.

The box is shared, so one run's CPU moves by as much as the target. Each run
gets a fresh process (measured: five identical runs back to back in one
process spread over 3.58-5.26 ms per turn, the collector's full passes slower
run after run); each pair runs off and on back to back, in alternating order (off-on,
on-off, ...) so a load that rises or falls through the bench weighs on both
sides alike. The result is the ratio of the medians (target: on costs at most
10 % more CPU per turn) with each side's spread, and the median and spread of
the per-pair ratios. Writes ``bench/results/tracing.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.jaeger import jaeger_binary, running_jaeger

from _support import (
    RESULTS_DIR,
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
from turns_bench import QUESTION, model_pool
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.runtime.tracing import TraceContexts, ratio_sampler
from turnstream.tracing import LiveTracer, TracingSettings
from turnstream.tracing.otlp import OtlpSink

OUT = RESULTS_DIR / "tracing.json"
FULL = {"loops": 200, "turns": 5, "partitions": 4, "pairs": 12}
QUICK = {"loops": 20, "turns": 3, "partitions": 4, "pairs": 1}
KIND = "tool"
SPANS_PER_TURN = 9


class GcClock:
    """The collector's passes and CPU time, per generation, while installed."""

    def __init__(self) -> None:
        self.passes = [0, 0, 0]
        self.cpu = 0.0
        self._start = 0.0

    def __enter__(self) -> GcClock:
        gc.callbacks.append(self._observe)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._observe)

    def _observe(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.thread_time()
        else:
            self.passes[info["generation"]] += 1
            self.cpu += time.thread_time() - self._start


async def run_once(
    bootstrap: str, *, loops: int, turns: int, partitions: int, endpoint: str | None
) -> dict[str, Any]:
    """One backlog through the service; ``endpoint``: trace every turn to it."""
    mode = "on" if endpoint else "off"
    async with topic_set(bootstrap, f"tracing-{mode}", partitions=partitions) as (
        prefix,
        topics,
    ):
        session = uuid.uuid4()
        loop_ids = loops_balanced(loops, partitions)
        commands = [
            submit_command(loop, session, f"{QUESTION} (#{t})")
            for t in range(turns)
            for loop in loop_ids
        ]
        await produce_commands(bootstrap, topics.commands, commands)
        metrics = ServiceMetrics()
        sink = None
        traces = TraceContexts()
        tracer = None
        if endpoint:
            sink = OtlpSink(TracingSettings(endpoint=endpoint))
            traces = TraceContexts(ratio_sampler(1.0))
            tracer = LiveTracer(sink, traces)
        service = service_for(
            bootstrap,
            topics,
            group_id=f"{prefix}actors",
            models=model_pool(KIND, turns),
            metrics=metrics,
            traces=traces,
            tracer=tracer,
        )
        expected = loops * turns
        async with service:
            await wait_until(lambda: metrics.ready, timeout=60)
            with Stopwatch() as watch, GcClock() as collector:
                await wait_until(
                    lambda: sum(metrics.terminals.values()) >= expected,
                    timeout=600,
                    interval=0.005,
                )
                if sink is not None:
                    # The exporter's work for these turns counts too.
                    flushed = await asyncio.to_thread(sink.flush)
        if sink is not None:
            sink.close()
    result: dict[str, Any] = {
        "tracing": mode,
        "turns": expected,
        "elapsed_s": round(watch.wall, 3),
        "turns_per_s": round(expected / watch.wall, 1),
        "cpu_s": round(watch.cpu, 3),
        "cpu_ms_per_turn": round(1000 * watch.cpu / expected, 3),
        "gc_passes": collector.passes,
        "gc_cpu_s": round(collector.cpu, 3),
    }
    if sink is not None:
        result["spans"] = expected * SPANS_PER_TURN
        result["flushed"] = flushed
    return result


def run_apart(cfg: dict[str, Any], endpoint: str | None) -> dict[str, Any]:
    """:func:`run_once` in a fresh process (``--run``); its result."""
    command = [sys.executable, __file__, "--run", json.dumps(cfg)]
    if endpoint:
        command += ["--endpoint", endpoint]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"run failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def receiver_cpu() -> float:
    """CPU seconds so far of this process's Jaeger child (the span receiver)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)
        except OSError:
            continue
        rest = fields[1].split()
        if int(rest[1]) == os.getpid() and "jaeger" in fields[0]:
            total += (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")
    return total


def spread(values: list[float]) -> dict[str, float]:
    """Median, quartiles and range of ``values``."""
    ordered = sorted(values)
    if len(ordered) > 1:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    return {
        "median": round(statistics.median(ordered), 3),
        "q1": round(q1, 3),
        "q3": round(q3, 3),
        "min": ordered[0],
        "max": ordered[-1],
    }


async def bench(bootstrap: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """Paired off/on runs against a real Jaeger; medians, spreads and ratios."""
    binary = jaeger_binary()
    if binary is None:
        return {"section_skipped": "no Jaeger binary (infra/jaeger/build.sh needs Go)"}
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    ratios: list[float] = []
    load = [os.getloadavg()[0]]
    with (
        tempfile.TemporaryDirectory() as tmp,
        running_jaeger(binary, Path(tmp)) as jaeger,
    ):
        for pair in range(cfg["pairs"]):
            order = (None, jaeger.otlp_endpoint)
            pair_runs: dict[str, dict[str, Any]] = {}
            for endpoint in order if pair % 2 == 0 else order[::-1]:
                before = receiver_cpu()
                run = await asyncio.to_thread(run_apart, cfg, endpoint)
                # Not the actor's CPU: the other process sharing the cores.
                run["receiver_cpu_s"] = round(receiver_cpu() - before, 2)
                print(
                    f"   pair {pair + 1} tracing {run['tracing']}: "
                    f"{run['cpu_ms_per_turn']} ms CPU/turn, "
                    f"{run['turns_per_s']} turns/s, GC {run['gc_cpu_s']} s "
                    f"in {run['gc_passes']} passes, Jaeger {run['receiver_cpu_s']} s",
                    flush=True,
                )
                runs[run["tracing"]].append(run)
                pair_runs[run["tracing"]] = run
            ratios.append(
                pair_runs["on"]["cpu_ms_per_turn"] / pair_runs["off"]["cpu_ms_per_turn"]
            )
            load.append(os.getloadavg()[0])
    off = spread([r["cpu_ms_per_turn"] for r in runs["off"]])
    on = spread([r["cpu_ms_per_turn"] for r in runs["on"]])
    paired = spread([round(100 * (r - 1), 1) for r in ratios])
    return {
        "kind": KIND,
        "spans_per_turn": SPANS_PER_TURN,
        "sample_ratio": 1.0,
        "exporter": (
            "OTLP/HTTP (protobuf) to Jaeger, "
            "span worker thread writing the protobuf directly"
        ),
        "cpu_ms_per_turn_off": off["median"],
        "cpu_ms_per_turn_on": on["median"],
        "overhead_pct": round(100 * (on["median"] - off["median"]) / off["median"], 1),
        "target_pct": 10,
        "cpu_ms_per_turn_off_spread": off,
        "cpu_ms_per_turn_on_spread": on,
        "paired_overhead_pct": paired,
        "load_average_1m": [round(x, 2) for x in load],
        "runs": runs,
        "config": cfg,
    }


def table(sec: dict[str, Any]) -> list[str]:
    """The markdown rows of one result."""
    if "section_skipped" in sec:
        return [f"skipped: {sec['section_skipped']}"]

    def row(label: str, mode: str) -> str:
        s = sec[f"cpu_ms_per_turn_{mode}_spread"]
        return (
            f"| {label} | {s['median']} | {s['q1']}-{s['q3']} | {s['min']}-{s['max']} |"
        )

    paired = sec["paired_overhead_pct"]
    return [
        "| tracing | CPU ms per turn (median) | quartiles | range |",
        "|---|---:|---|---|",
        row("off", "off"),
        row("on, 100 % sampled, OTLP to Jaeger", "on"),
        "",
        f"Overhead {sec['overhead_pct']} % (ratio of the medians; target at most "
        f"{sec['target_pct']} %); per pair: median {paired['median']} %, "
        f"quartiles {paired['q1']} to {paired['q3']} %, "
        f"range {paired['min']} to {paired['max']} %; "
        f"{sec['spans_per_turn']} spans per {sec['kind']} turn; "
        f"load average {sec['load_average_1m']}.",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pairs", type=int, help="off/on pairs (default 12)")
    parser.add_argument("--loops", type=int, help="loops per run (default 200)")
    parser.add_argument("--run", help=argparse.SUPPRESS)  # one run, this config
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    quiet_kafka_logs()
    if args.run:
        one = json.loads(args.run)
        result = asyncio.run(
            run_once(
                bootstrap_servers(),
                loops=one["loops"],
                turns=one["turns"],
                partitions=one["partitions"],
                endpoint=args.endpoint,
            )
        )
        print(json.dumps(result))
        return 0
    started = time.time()
    cfg = dict(QUICK if args.quick else FULL)
    if args.pairs:
        cfg["pairs"] = args.pairs
    if args.loops:
        cfg["loops"] = args.loops
    result = asyncio.run(bench(bootstrap_servers(), cfg))
    doc = {
        "started": now_iso(),
        "machine": machine(),
        "seconds": round(time.time() - started, 1),
        **result,
    }
    write_json(OUT, doc)
    print("\n".join(table(result)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
