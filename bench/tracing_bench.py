"""The CPU cost of tracing per turn: the actor with tracing off vs on at 100 %.

``python bench/tracing_bench.py [--quick]``: the same backlog of tool turns
(a tool step, then a text answer: 1 turn, 2 steps, 2 model requests, 1 tool
call = 6 spans) runs through an in-process loop-actor service twice per
repeat, tracing off and tracing on with every turn sampled and exported over
OTLP/HTTP to a real Jaeger (``infra/jaeger/build.sh``'s binary). CPU is this
process's (every thread: the OTLP exporter's too), from the first turn to the
last terminal plus the exporter's final flush. Runs alternate off/on; the
median of each is compared (target: on costs at most 10 % more CPU per turn).
Writes ``bench/results/tracing.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
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
FULL = {"loops": 100, "turns": 5, "partitions": 4, "repeat": 5}
QUICK = {"loops": 20, "turns": 3, "partitions": 4, "repeat": 1}
KIND = "tool"
SPANS_PER_TURN = 6


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
            with Stopwatch() as watch:
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
    }
    if sink is not None:
        result["spans"] = expected * SPANS_PER_TURN
        result["flushed"] = flushed
    return result


async def bench(bootstrap: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """Alternating off/on runs against a real Jaeger; the medians and the ratio."""
    binary = jaeger_binary()
    if binary is None:
        return {"section_skipped": "no Jaeger binary (infra/jaeger/build.sh needs Go)"}
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    with (
        tempfile.TemporaryDirectory() as tmp,
        running_jaeger(binary, Path(tmp)) as jaeger,
    ):
        for _ in range(cfg["repeat"]):
            for endpoint in (None, jaeger.otlp_endpoint):
                run = await run_once(
                    bootstrap,
                    loops=cfg["loops"],
                    turns=cfg["turns"],
                    partitions=cfg["partitions"],
                    endpoint=endpoint,
                )
                print(
                    f"   tracing {run['tracing']}: {run['cpu_ms_per_turn']} ms "
                    f"CPU/turn, {run['turns_per_s']} turns/s",
                    flush=True,
                )
                runs[run["tracing"]].append(run)
    off = statistics.median(r["cpu_ms_per_turn"] for r in runs["off"])
    on = statistics.median(r["cpu_ms_per_turn"] for r in runs["on"])
    return {
        "kind": KIND,
        "spans_per_turn": SPANS_PER_TURN,
        "sample_ratio": 1.0,
        "exporter": (
            "OTLP/HTTP (protobuf) to Jaeger, "
            "span worker thread writing the protobuf directly"
        ),
        "cpu_ms_per_turn_off": off,
        "cpu_ms_per_turn_on": on,
        "overhead_pct": round(100 * (on - off) / off, 1),
        "target_pct": 10,
        "runs": runs,
        "config": cfg,
    }


def table(sec: dict[str, Any]) -> list[str]:
    """The markdown rows of one result."""
    if "section_skipped" in sec:
        return [f"skipped: {sec['section_skipped']}"]
    return [
        "| tracing | CPU ms per turn (median) | runs |",
        "|---|---:|---|",
        f"| off | {sec['cpu_ms_per_turn_off']} | "
        + ", ".join(str(r["cpu_ms_per_turn"]) for r in sec["runs"]["off"])
        + " |",
        f"| on, 100 % sampled, OTLP to Jaeger | {sec['cpu_ms_per_turn_on']} | "
        + ", ".join(str(r["cpu_ms_per_turn"]) for r in sec["runs"]["on"])
        + " |",
        "",
        f"Overhead {sec['overhead_pct']} % (target at most {sec['target_pct']} %); "
        f"{sec['spans_per_turn']} spans per {sec['kind']} turn.",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    quiet_kafka_logs()
    started = time.time()
    cfg = QUICK if args.quick else FULL
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
