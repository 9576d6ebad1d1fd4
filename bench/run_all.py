"""Every benchmark, side by side in one run: ``python bench/run_all.py``.

Runs, in this order and on the same machine and broker: the codec (Avro vs
pydantic JSON), turn throughput vs raw aiokafka transactions (text and tool
turns), latency seen by a subscriber vs Kafka's own (and where a token delta's
latency goes), one turn at a time (transactions, the CPU split between this
process and the broker, and the raw writes alone), restore time vs journal
length (with and without the state snapshot), state at scale (bytes per turn as a
conversation grows, a takeover's ready time and memory by idle loops, memory after
many loops used once), scale-out (1 vs 2 loop-actor processes), the memory of
idle loops, tool side effects of continuing turns under kill -9 churn (the
ledger counts, 60 s of churn), the HTTP gateway (``bench/gateway_bench.py``:
1,000 SSE clients on one gateway process, beside an in-process ``attach``
client), the CPU cost of OpenTelemetry tracing per turn
(``bench/tracing_bench.py``: off vs on at 100 % sampling, exported to a real
Jaeger) and, when the peer frameworks are installed (``pip install -e
'.[peers]'`` into ``.venv-peers``, see ``make bench-peers``), the peer
comparison of ``bench/peers/``. Writes ``bench/results/latest.json`` (every
number, plus the machine and its load at start and end) and
``bench/results/latest.md`` (the tables), and prints the tables.

Each benchmark creates its own uniquely prefixed topics and consumer groups,
deletes them afterwards and stops every process it started; a benchmark that
fails is recorded as an error and the run goes on. The full run takes about
5-10 minutes on a 2-core box; ``--quick`` (smaller counts, about 2 minutes) is
for checking that everything works, not for numbers. ``--wait-load 1.5``
first waits (up to ``--wait-max`` seconds) for the 1-minute load average to
drop below 1.5, since the box may be shared. Needs the broker
(``turnstream broker up``); ``KAFKA_BOOTSTRAP_SERVERS`` overrides its address.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

import peers_bench

import codec_bench
import delta_path
import gateway_bench
import latency_bench
import memory_bench
import restore_bench
import resume_churn_bench
import scale_bench
import state_scale_bench
import tracing_bench
import turns_bench
import txn_bench
from _support import (
    RESULTS_DIR,
    ROOT,
    bootstrap_servers,
    load_average,
    machine,
    now_iso,
    quiet_kafka_logs,
    uptime_line,
    write_json,
)

OUT_JSON = RESULTS_DIR / "latest.json"
OUT_MD = RESULTS_DIR / "latest.md"

FULL: dict[str, Any] = {
    "codec": {"number": 2000, "reps": 5, "warmup": 200},
    "turns": {
        "loops": 200,
        "turns": 5,
        "partitions": 4,
        "ungrouped_sample": 200,
        "repeat": 3,
    },
    "latency": {"cases": [(1, 100), (20, 5)], "partitions": 4, "raw_samples": 300},
    "delta_path": {"cases": [(1, 100), (20, 5)], "partitions": 4},
    "one_at_a_time": {"conversations": 20, "turns": 5},
    "restore": {"turns": [250, 1000, 2500], "repeat": 3},
    "state": {
        "marks": [50, 200, 500, 1000],
        "idle": [0, 20_000, 200_000],
        "probes": 50,
        "used_once": 200_000,
        "budgets": [1000],
    },
    "scale": {"loops": 200, "turns": 5, "partitions": 4, "counts": [1, 2, 1, 2]},
    "memory": {"steps": [0, 1000, 5000], "partitions": 4, "settle": 2.0},
    "peers": {"conversations": 200, "turns": 5, "latency_conversations": 20},
    "resume_churn": {"seconds": 60, "loops": 100},
    "gateway": {"clients": 1000, "turns": 10, "chunks": 10, "delay": 0.05},
    "tracing": tracing_bench.FULL,
}
QUICK: dict[str, Any] = {
    "codec": {"number": 300, "reps": 3, "warmup": 50},
    "turns": {
        "loops": 60,
        "turns": 3,
        "partitions": 4,
        "ungrouped_sample": 60,
        "repeat": 1,
    },
    "latency": {"cases": [(1, 8), (8, 3)], "partitions": 4, "raw_samples": 30},
    "delta_path": {"cases": [(1, 8), (8, 3)], "partitions": 4},
    "one_at_a_time": {"conversations": 3, "turns": 3},
    "restore": {"turns": [100, 400], "repeat": 2},
    "state": {
        "marks": [10, 30],
        "idle": [0, 500],
        "probes": 10,
        "used_once": 300,
        "budgets": [100],
    },
    "scale": {"loops": 60, "turns": 3, "partitions": 4, "counts": [1, 2]},
    "memory": {"steps": [0, 200, 1000], "partitions": 4, "settle": 1.0},
    "peers": {"conversations": 20, "turns": 3, "latency_conversations": 5},
    "resume_churn": {"seconds": 15, "loops": 10},
    "gateway": {"clients": 50, "turns": 2, "chunks": 5, "delay": 0.05},
    "tracing": tracing_bench.QUICK,
}
PEERS_PYTHON = Path(os.environ.get("PEERS_PYTHON", ROOT / ".venv-peers/bin/python"))
PEERS_SCRIPT = Path(__file__).resolve().parent / "peers" / "peers_bench.py"
PEERS_POSTGRES: dict[str, Any] = {}  # set from the command line in main()


# ---------------------------------------------------------------- sections


async def codec_section(_bootstrap: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """The codec bench's rows (encode and decode, three events, four impls)."""
    doc = codec_bench.run(cfg["number"], cfg["reps"], cfg["warmup"])
    return {
        "method": doc["method"],
        "environment": doc["environment"],
        "rows": doc["results"],
    }


async def turns_section(bootstrap: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """Text and tool turns, each against its raw replays, ``repeat`` times.

    Runs alternate between the kinds; per kind the run with the median ratio
    is the one tabled, and every run's turns/s and ratio are kept.
    """
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in turns_bench.KINDS}
    for _ in range(cfg["repeat"]):
        for kind in turns_bench.KINDS:
            case = await turns_bench.bench_case(
                bootstrap,
                loops=cfg["loops"],
                turns=cfg["turns"],
                kind=kind,
                partitions=cfg["partitions"],
                ungrouped_sample=cfg["ungrouped_sample"],
            )
            print(
                f"   {kind}: {case['turnstream']['turns_per_s']} turns/s, "
                f"ratio {case['ratio']}",
                flush=True,
            )
            runs[kind].append(case)
    cases = []
    for done in runs.values():
        ranked = sorted(done, key=lambda c: c["ratio"])
        median = dict(ranked[len(ranked) // 2])
        median["all_runs"] = [
            {
                "turns_per_s": c["turnstream"]["turns_per_s"],
                "raw_equivalent_turns_per_s": c["raw_equivalent_turns_per_s"],
                "ratio": c["ratio"],
                "cpu_ms_per_turn": c["turnstream"]["cpu_ms_per_turn"],
            }
            for c in done
        ]
        cases.append(median)
    return {"cases": cases}


async def latency_section(bootstrap: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """Subscriber latencies at each concurrency, and Kafka's floor."""
    return await latency_bench.bench(
        bootstrap,
        cases=cfg["cases"],
        partitions=cfg["partitions"],
        raw_samples=cfg["raw_samples"],
    )


async def delta_path_section(bootstrap: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """``bench/delta_path.py``: a token delta's latency, stage by stage."""
    return await delta_path.bench(
        bootstrap, cases=cfg["cases"], partitions=cfg["partitions"]
    )


async def one_at_a_time_section(bootstrap: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """``bench/txn_bench.py``: one turn at a time, its CPU split, raw writes."""
    return await txn_bench.run(
        bootstrap,
        conversations=cfg["conversations"],
        turns=cfg["turns"],
        kinds=["text", "tool"],
    )


async def restore_section(bootstrap: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """``bench/restore_bench.py``'s cases (snapshot vs full replay)."""
    cases = [
        await restore_bench.bench_case(bootstrap, turns, cfg["repeat"])
        for turns in cfg["turns"]
    ]
    return {"cases": cases}


async def state_section(bootstrap: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """``bench/state_scale_bench.py``: state bytes per turn as a loop grows, a
    takeover's ready time and RSS by idle loops, RSS after loops used once."""
    return await state_scale_bench.bench(bootstrap, **cfg)


async def scale_section(bootstrap: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """1 vs 2 loop-actor processes, same workload."""
    return await scale_bench.bench(
        bootstrap,
        counts=cfg["counts"],
        loops=cfg["loops"],
        turns=cfg["turns"],
        partitions=cfg["partitions"],
    )


async def memory_section(bootstrap: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """RSS of one actor process at each idle-loop count."""
    return await memory_bench.bench(
        bootstrap,
        steps=cfg["steps"],
        partitions=cfg["partitions"],
        settle=cfg["settle"],
    )


async def resume_churn_section(bootstrap: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """``bench/resume_churn_bench.py``: tool effects of continuing turns under
    kill -9 every 3 s with 3 actors (the counts that must be 0)."""
    return await resume_churn_bench.bench(bootstrap, **cfg)


async def peers_section(bootstrap: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """``bench/peers/peers_bench.py``: in this process if the peers import, else
    in the ``.venv-peers`` interpreter (``PEERS_PYTHON``) as a child process;
    skipped, with the reason, when neither has them.
    """
    argv = [
        "--bootstrap",
        bootstrap,
        "--conversations",
        str(cfg["conversations"]),
        "--turns",
        str(cfg["turns"]),
        "--latency-conversations",
        str(cfg["latency_conversations"]),
    ]
    if PEERS_POSTGRES.get("dsn"):
        argv += ["--postgres", PEERS_POSTGRES["dsn"]]
    elif PEERS_POSTGRES.get("temp"):
        argv.append("--postgres-temp")
    reason = peers_bench.peers_importable()
    if reason is None:
        # Same interpreter: the sections share the event loop already running.
        args = peers_bench.parser().parse_args(argv)
        args.argv = argv
        dsn = args.postgres
        with contextlib.ExitStack() as stack:
            if not dsn and args.postgres_temp:
                from pg_temp import temp_cluster

                dsn = stack.enter_context(temp_cluster())
            return await peers_bench.run(args, dsn)
    if not PEERS_PYTHON.exists():  # noqa: ASYNC240 - one stat
        print(f"   peers skipped: {reason}; no {PEERS_PYTHON} (make bench-peers)")
        return {"section_skipped": f"{reason}; no {PEERS_PYTHON}"}
    out = RESULTS_DIR / "peers-run_all.json.tmp"
    child = await asyncio.create_subprocess_exec(
        str(PEERS_PYTHON),
        str(PEERS_SCRIPT),
        *argv,
        "--out",
        str(out),
        "--md",
        str(out.with_suffix(".md.tmp")),
    )
    code = await child.wait()
    doc = _take_child_result(out)
    if code == 2 or doc is None:
        return {
            "section_skipped": f"{PEERS_PYTHON} could not run the peers (exit {code})"
        }
    doc["interpreter"] = str(PEERS_PYTHON)
    return doc


async def gateway_section(bootstrap: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """``bench/gateway_bench.py``: many SSE clients on one gateway process."""
    return await gateway_bench.bench(
        bootstrap,
        clients=cfg["clients"],
        turns=cfg["turns"],
        chunks=cfg["chunks"],
        delay=cfg["delay"],
    )


def _take_child_result(out: Path) -> dict[str, Any] | None:
    """The child's JSON document (its files are removed), or ``None``."""
    out.with_suffix(".md.tmp").unlink(missing_ok=True)
    if not out.exists():
        return None
    doc: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    out.unlink()
    return doc


async def tracing_section(bootstrap: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """CPU per turn with tracing off vs on (100 % sampled, OTLP to Jaeger)."""
    return await tracing_bench.bench(bootstrap, cfg)


Section = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
SECTIONS: dict[str, Section] = {
    "codec": codec_section,
    "turns": turns_section,
    "latency": latency_section,
    "delta_path": delta_path_section,
    "one_at_a_time": one_at_a_time_section,
    "restore": restore_section,
    "state": state_section,
    "scale": scale_section,
    "memory": memory_section,
    "resume_churn": resume_churn_section,
    "gateway": gateway_section,
    "tracing": tracing_section,
    "peers": peers_section,
}


# ------------------------------------------------------------------ tables


def _num(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def _codec_md(sec: dict[str, Any]) -> list[str]:
    rows = {(r["event"], r["impl"], r["op"]): r for r in sec["rows"]}
    native = sec.get("environment", {}).get("native")
    lines = [
        f"Avro codec on its native (C) path: {'yes' if native else 'no'}; "
        "the Python paths alone (no compiler) in the last two columns.",
        "",
        "| event | op | Avro codec events/s | pydantic JSON events/s "
        "| **Avro / JSON** | Avro bytes | JSON bytes | Python path events/s "
        "| Python / JSON |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|",
    ]

    def ratio(row: dict[str, Any], js: dict[str, Any]) -> float:
        # The paired per-repetition ratio where the bench gives it.
        value: float = row.get(
            "vs_pydantic_json", row["events_per_s"] / js["events_per_s"]
        )
        return value

    for event in ("TokenDelta", "StepDone", "TurnDone"):
        for op in ("encode", "decode"):
            avro = rows[(event, "avro codec", op)]
            js = rows[(event, "pydantic json", op)]
            py = rows.get((event, "avro codec (py)", op))
            py_cells = (
                f"{_num(py['events_per_s'])} | {ratio(py, js):.2f}"
                if py
                else "n/a | n/a"
            )
            lines.append(
                f"| {event} | {op} | {_num(avro['events_per_s'])} "
                f"| {_num(js['events_per_s'])} "
                f"| **{ratio(avro, js):.2f}** "
                f"| {avro['bytes']} | {js['bytes']} | {py_cells} |"
            )
    return lines


def _turns_md(sec: dict[str, Any]) -> list[str]:
    thresholds = sorted({c.get("gc_threshold", 700) for c in sec["cases"]})
    lines = [
        "Collector's first-generation threshold: "
        f"{', '.join(f'{t:,}' for t in thresholds)} (the deployable's, "
        "`turnstream.loop_actor.gc_policy`; CPython's own is 700), for the "
        "service and the raw replays alike.",
        "",
        "| workload | turnstream turns/s | txns/turn (appends/turn) "
        "| raw, same txns: txn/s → turns/s | **ratio** | ratio, all runs "
        "| raw, 1 txn per append: turns/s | ratio vs that |",
        "|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for case in sec["cases"]:
        ts = case["turnstream"]
        raw = case["raw_same_transactions"]
        spread = ", ".join(f"{r['ratio']:.2f}" for r in case.get("all_runs", []))
        lines.append(
            f"| {ts['turns']} {case['kind']} turns ({ts['loops']} loops x "
            f"{ts['turns_per_loop']}, {case['partitions']} partitions) "
            f"| {_num(ts['turns_per_s'], 1)} "
            f"| {ts['txn_per_turn']:.3f} ({ts['appends_per_turn']:.2f}) "
            f"| {_num(raw['txn_per_s'], 1)} → "
            f"{_num(case['raw_equivalent_turns_per_s'], 1)} "
            f"| **{case['ratio']:.2f}** "
            f"| {spread} "
            f"| {_num(case.get('raw_ungrouped_turns_per_s', 0), 1)} "
            f"| {case.get('ratio_vs_ungrouped', 0):.2f} |"
        )
    lines += [
        "",
        "| workload | CPU ms/turn (service process) | transactions | group sizes "
        "| mean commit latency ms | records (events + states), deltas |",
        "|---|--:|--:|---|--:|---|",
    ]
    for case in sec["cases"]:
        ts, rec = case["turnstream"], case["records"]
        groups = ", ".join(f"{k}x{v}" for k, v in ts["group_sizes"].items())
        lines.append(
            f"| {case['kind']} | {ts['cpu_ms_per_turn']:.2f} | {ts['transactions']} "
            f"| {groups} | {ts['mean_commit_latency_ms']:.0f} "
            f"| {rec['events']} + {rec['states']}, {rec['deltas']} |"
        )
    return lines


def _lat(p: dict[str, Any]) -> str:
    return f"{p['p50']:.1f} / {p['p99']:.1f} / {p['max']:.1f}"


def _latency_md(sec: dict[str, Any]) -> list[str]:
    raw = sec["raw"]
    lines = [
        "| path (ms: p50 / p99 / max) | loops in parallel | turnstream "
        "| raw Kafka floor | p50 ratio | p99 ratio | samples (turnstream, floor) |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    started_n = raw["command_to_committed_record_ms"]
    ended_n = raw["command_to_second_committed_record_ms"]
    delta_n = raw["acks1_record_to_reader_ms"]
    for case in sec["cases"]:
        lines.append(
            f"| submit → TurnStarted seen | {case['loops']} "
            f"| {_lat(case['submit_to_turn_started_ms'])} "
            f"| {_lat(raw['command_to_committed_record_ms'])} "
            f"| {case['p50_ratio_turn_started_vs_raw']:.2f} | "
            f"| {_n(case['submit_to_turn_started_ms'], started_n)} |"
        )
        lines.append(
            f"| submit → turn end (LoopIdle) seen; floor: 2 serial transactions "
            f"| {case['loops']} "
            f"| {_lat(case['submit_to_turn_end_ms'])} "
            f"| {_lat(raw['command_to_second_committed_record_ms'])} "
            f"| {case['p50_ratio_turn_end_vs_raw']:.2f} | "
            f"| {_n(case['submit_to_turn_end_ms'], ended_n)} |"
        )
        lines.append(
            f"| model chunk → TokenDelta seen | {case['loops']} "
            f"| {_lat(case['chunk_to_token_delta_ms'])} "
            f"| {_lat(raw['acks1_record_to_reader_ms'])} "
            f"| {case['p50_ratio_token_delta_vs_raw']:.2f} "
            f"| {case['p99_ratio_token_delta_vs_raw']:.2f} "
            f"| {_n(case['chunk_to_token_delta_ms'], delta_n)} |"
        )
        burst_n = raw.get("acks1_burst_record_to_reader_ms")
        if burst_n is not None and "p50_ratio_token_delta_vs_raw_burst" in case:
            lines.append(
                f"| model chunk → TokenDelta seen; floor: the turn's "
                f"{raw['burst_records']} records as one burst | {case['loops']} "
                f"| {_lat(case['chunk_to_token_delta_ms'])} "
                f"| {_lat(burst_n)} "
                f"| {case['p50_ratio_token_delta_vs_raw_burst']:.2f} "
                f"| {case['p99_ratio_token_delta_vs_raw_burst']:.2f} "
                f"| {_n(case['chunk_to_token_delta_ms'], burst_n)} |"
            )
    for case in sec["cases"]:
        split = case.get("chunk_to_token_delta_ms_by_chunk")
        if split:
            per_chunk = ", ".join(
                f"{i + 1}: {p['p50']:.1f} / {p['p99']:.1f}" for i, p in enumerate(split)
            )
            lines.append(
                f"\nModel chunk → TokenDelta by chunk number, {case['loops']} "
                f"loop(s) in parallel (ms p50 / p99): {per_chunk}."
            )
    return lines


def _n(ours: dict[str, Any], floor: dict[str, Any]) -> str:
    return f"{ours.get('n', '?')}, {floor.get('n', '?')}"


def _restore_md(sec: dict[str, Any]) -> list[str]:
    lines = [
        "| turns in journal | loop events | journal KiB | state KiB "
        "| snapshot s | snapshot + open-turn tail s | full replay s | speed-up |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for c in sec["cases"]:
        lines.append(
            f"| {c['turns']} | {c['loop_events']} "
            f"| {c['journal_bytes_per_loop'] / 1024:,.0f} "
            f"| {c['state_bytes'] / 1024:,.0f} | {c['snapshot_s']:.3f} "
            f"| {c['snapshot_open_turn_s']:.3f} | {c['full_replay_s']:.3f} "
            f"| {c['speedup']:.1f}x |"
        )
    return lines


def _state_md(sec: dict[str, Any]) -> list[str]:
    lines = [
        "One loop, text turns one after another (~420-byte input and answer):",
        "",
        "| turns | state MB | journal MB | state KB/turn | journal KB/turn "
        "| state / journal |",
        "|--:|--:|--:|--:|--:|--:|",
    ]
    for r in sec["bytes_per_turn"]:
        lines.append(
            f"| {r['turns']:,} | {r['state_mb']:,.2f} | {r['journal_mb']:,.3f} "
            f"| {r['state_kb_per_turn']:,.2f} | {r['journal_kb_per_turn']:,.2f} "
            f"| {r['state_per_journal']:.1f} |"
        )
    restart = sec.get("restart_after_the_long_loop") or {}
    if restart:
        lines += [
            "",
            f"A new actor process taking that partition over after the loop's "
            f"{restart['turns_of_the_loop']:,} turns: ready after "
            f"{restart['ready_s']} s, RSS {restart['rss_mib_at_ready']} MiB.",
        ]
    lines += [
        "",
        "A new owner of one partition with N idle loops (20 messages of 400 B "
        "each); cold = a loop's first turn on the new owner, warm = its second "
        "(submit → LoopIdle ms):",
        "",
        "| idle loops | state MB | ready s | RSS MiB at ready | cold p50 / p99 "
        "| warm p50 / p99 |",
        "|--:|--:|--:|--:|--:|--:|",
    ]
    for r in sec["takeover"]:
        cold, warm = r.get("cold_turn_ms", {}), r.get("warm_turn_ms", {})
        lines.append(
            f"| {r['idle_loops']:,} | {r['state_mb_on_topic']:,.1f} "
            f"| {r['ready_s']:.2f} | {r['rss_mib_at_ready']:,.1f} "
            f"| {cold.get('p50', '-')} / {cold.get('p99', '-')} "
            f"| {warm.get('p50', '-')} / {warm.get('p99', '-')} |"
        )
    lines += [
        "",
        "| loops used once | --max-resident-loops | seconds | RSS MiB before "
        "| RSS MiB after |",
        "|--:|--:|--:|--:|--:|",
    ]
    for r in sec["used_once"]:
        lines.append(
            f"| {r['loops']:,} | {r['max_resident_loops']:,} | {r['seconds']} "
            f"| {r['rss_mib_ready']} | {r['rss_mib_after']} |"
        )
    return lines


def _scale_md(sec: dict[str, Any]) -> list[str]:
    lines = [
        "| loop-actor processes | turns | turns/s | speed-up | CPU s per process "
        "| CPU ms/turn |",
        "|--:|--:|--:|--:|---|--:|",
    ]
    for c in sec["cases"]:
        cpu = ", ".join(f"{x:.1f}" for x in c["process_cpu_s"])
        lines.append(
            f"| {c['processes']} | {c['turns']} | {_num(c['turns_per_s'], 1)} "
            f"| {c['speedup']:.2f}x | {cpu} | {c['cpu_ms_per_turn']:.2f} |"
        )
    return lines


def _memory_md(sec: dict[str, Any]) -> list[str]:
    lines = [
        "| idle loops | VmRSS MiB | bytes/loop vs 0 loops | marginal bytes/loop |",
        "|--:|--:|--:|--:|",
    ]
    for r in sec["steps"]:
        lines.append(
            f"| {r['loops']} | {r['rss_mib']:.1f} "
            f"| {_num(r.get('bytes_per_loop_vs_first', 0))} "
            f"| {_num(r.get('marginal_bytes_per_loop', 0))} |"
        )
    return lines


def _resume_churn_md(sec: dict[str, Any]) -> list[str]:
    zero = sec["must_be_zero"]
    lines = [
        f"{sec['actors']} actors, kill -9 every {sec['kill_every']:g} s for "
        f"{sec['seconds']:g} s ({sec['kills']} kills), {sec['loops']} loops, "
        f"{sec['turns']} turns of {sec['tool_steps_per_turn']} tool steps; "
        f"{sec['turns_resumed']} turns resumed, {sec['unknown_reported']} "
        "outcome-unknown results, "
        f"{sec['refunds_run_again_with_key']} refunds run again with their key"
        + (
            f"; {sec['kafka_effects']} Kafka effect records (read_committed)."
            if sec.get("kafka_effects_checked")
            else "."
        ),
        "",
        "| must be 0 | count |",
        "|---|--:|",
    ]
    lines += [f"| {name} | {count} |" for name, count in zero.items()]
    return lines


def _gateway_md(sec: dict[str, Any]) -> list[str]:
    sse, attach = sec["chunk_to_sse_event_ms"], sec["chunk_to_attach_item_ms"]
    return [
        "| client | chunk -> event p50 ms | p99 ms | samples |",
        "|---|--:|--:|--:|",
        f"| {sec['clients']} SSE clients, one gateway process "
        f"| {sse['p50']} | {sse['p99']} | {sse['n']} |",
        f"| one in-process `KafkaSession.attach` | {attach['p50']} "
        f"| {attach['p99']} | {attach['n']} |",
        "",
        f"Gateway CPU: {sec['gateway_cpu_ms_per_delta']} ms per delta "
        f"({sec['gateway_cpu_us_per_event']} µs per event delivered), "
        f"{sec['turns']} turns x {sec['chunks_per_turn']} chunks "
        f"{sec['chunk_delay_ms']} ms apart.",
    ]


def _peers_md(sec: dict[str, Any]) -> list[str]:
    if "section_skipped" in sec:
        return [f"skipped: {sec['section_skipped']}"]
    lines = peers_bench.table(sec)
    peers = ", ".join(f"{k} {v}" for k, v in sec["machine"].get("peers", {}).items())
    return [*lines, "", f"Peers: {peers}. Load at start {sec['load_start']}."]


TABLES: dict[str, tuple[str, Callable[[dict[str, Any]], list[str]]]] = {
    "codec": ("Codec: Avro codec vs pydantic JSON (same events)", _codec_md),
    "turns": ("Turn throughput vs raw aiokafka transactions", _turns_md),
    "latency": ("Latency seen by a subscriber vs Kafka's own", _latency_md),
    "delta_path": (
        "Where a token delta's latency goes (stamped run)",
        delta_path.table,
    ),
    "one_at_a_time": (
        "One turn at a time: transactions and where the CPU goes",
        txn_bench.table,
    ),
    "restore": ("Restore one loop: snapshot vs full journal replay", _restore_md),
    "state": ("State at scale: bytes per turn, takeover, resident loops", _state_md),
    "scale": ("Scale-out: 1 vs 2 loop-actor processes", _scale_md),
    "memory": ("Memory: one actor process holding N idle loops", _memory_md),
    "resume_churn": (
        "Tool side effects of continuing turns under kill -9 churn",
        _resume_churn_md,
    ),
    "gateway": ("Gateway: many SSE clients on one loop's stream", _gateway_md),
    "tracing": (
        "Tracing: CPU per turn, off vs on at 100 % sampling (OTLP to Jaeger)",
        tracing_bench.table,
    ),
    "peers": (
        "Peers: one agent workload on turnstream, LangGraph, OpenAI Agents SDK",
        _peers_md,
    ),
}


def markdown(doc: dict[str, Any]) -> str:
    """All tables, with the run's header."""
    m = doc["machine"]
    out = [
        f"Run {doc['started_at']} → {doc['finished_at']} ({doc['duration_s']:.0f} s), "
        f"`{doc['command']}`",
        "",
        f"Machine: {m['nproc']} CPUs, {m['cpu_model']}; Python {m['python']}, "
        f"aiokafka {m['aiokafka']}, fastavro {m['fastavro']} (C extension: "
        f"{m['fastavro_c_extension']}), pydantic {m['pydantic']}; {m['broker']}.",
        f"Load average (1/5/15 min) at start {doc['load_start']}, "
        f"at end {doc['load_end']}.",
    ]
    for name, (title, render) in TABLES.items():
        section = doc["sections"].get(name)
        if section is None:
            continue
        out += ["", f"### {title}", ""]
        if "error" in section:
            out.append(f"failed: `{section['error']}`")
        else:
            out += render(section["result"])
            out.append(f"\n({section['seconds']:.0f} s)")
    return "\n".join(out) + "\n"


# -------------------------------------------------------------------- main


async def wait_for_load(limit: float, longest: float) -> None:
    """Wait until the 1-minute load average is below ``limit`` (bounded)."""
    deadline = time.monotonic() + longest
    while os.getloadavg()[0] >= limit and time.monotonic() < deadline:
        print(f"load {load_average()} >= {limit}; waiting", flush=True)
        await asyncio.sleep(30)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the selected sections; the result document."""
    if args.wait_load:
        await wait_for_load(args.wait_load, args.wait_max)
    config = QUICK if args.quick else FULL
    doc: dict[str, Any] = {
        "command": " ".join(["python", "bench/run_all.py", *sys.argv[1:]]),
        "quick": args.quick,
        "started_at": now_iso(),
        "uptime_start": uptime_line(),
        "load_start": load_average(),
        "machine": machine(),
        "bootstrap": args.bootstrap,
        "config": config,
        "sections": {},
    }
    started = time.perf_counter()
    for name, section in SECTIONS.items():
        if args.only and name not in args.only:
            continue
        print(f"== {name} (load {load_average()})", flush=True)
        t0 = time.perf_counter()
        try:
            result = await section(args.bootstrap, config[name])
        except Exception as exc:  # record it, run the rest
            traceback.print_exc()
            doc["sections"][name] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        seconds = time.perf_counter() - t0
        doc["sections"][name] = {
            "seconds": round(seconds, 1),
            "load_after": load_average(),
            "result": result,
        }
        print(f"   {name}: {seconds:.0f} s", flush=True)
    doc["finished_at"] = now_iso()
    doc["duration_s"] = round(time.perf_counter() - started, 1)
    doc["uptime_end"] = uptime_line()
    doc["load_end"] = load_average()
    return doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=bootstrap_servers())
    parser.add_argument("--quick", action="store_true", help="small, ~2 minutes")
    parser.add_argument(
        "--only", nargs="+", choices=list(SECTIONS), help="run just these sections"
    )
    parser.add_argument(
        "--wait-load", type=float, default=0.0, help="wait for load below this"
    )
    parser.add_argument("--wait-max", type=float, default=900.0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--md", type=Path, default=None)
    parser.add_argument(
        "--peers-postgres",
        default=os.environ.get("PEERS_POSTGRES_DSN") or None,
        help="peers: a Postgres DSN for LangGraph + Postgres",
    )
    parser.add_argument(
        "--peers-postgres-temp",
        action="store_true",
        help="peers: start a throwaway local Postgres cluster",
    )
    args = parser.parse_args(argv)
    PEERS_POSTGRES.update(dsn=args.peers_postgres, temp=args.peers_postgres_temp)
    quiet_kafka_logs()
    doc = asyncio.run(run(args))
    suffix = "-quick" if args.quick else ""
    out = args.out or OUT_JSON.with_name(f"latest{suffix}.json")
    md_out = args.md or OUT_MD.with_name(f"latest{suffix}.md")
    write_json(out, doc)
    table = markdown(doc)
    md_out.write_text(table, encoding="utf-8")
    print()
    print(table)
    print(f"wrote {out} and {md_out}")
    failed = [n for n, s in doc["sections"].items() if "error" in s]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
