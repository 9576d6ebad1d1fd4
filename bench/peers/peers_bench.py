"""Peer comparison: the same scripted agent workload on turnstream and its peers.

``python bench/peers/peers_bench.py`` (in the ``peers`` venv: ``make
bench-peers``) runs, for each system and for text and tool turns, the
workload of :mod:`workload` (200 conversations x 5 turns by default, a
zero-latency scripted model streaming a 20-chunk answer, tool turns calling
``add(2, 3)`` once) and writes ``bench/results/peers.json`` and ``peers.md``.

Systems (``--only`` picks some): turnstream embedded (``LocalSession`` in
memory) and on Kafka (service + ``KafkaSession`` client, CPU of the broker
JVM included; once with the service in this process, once as the deployable
``turnstream.loop_actor`` process hosting :mod:`bench_agent`, its CPU
included); LangGraph with ``InMemorySaver`` (``astream`` and ``invoke``),
``AsyncSqliteSaver`` (a file) and ``AsyncPostgresSaver`` (only with
``--postgres DSN``, ``PEERS_POSTGRES_DSN``, or ``--postgres-temp`` for a
throwaway local cluster; the server's CPU included); the OpenAI Agents SDK
(``Runner.run``, ``Runner.run_streamed``, and ``Runner.run`` with an
``SQLiteSession`` file).

Per system and kind: a warm-up (2 conversations, not measured), the
throughput phase (every conversation at once, ``--concurrency`` in flight;
sync ``invoke`` runs one at a time), then the latency phase (``--latency-
conversations`` conversations one at a time). Every turn is checked (20 text
chunks seen by a streaming caller, the exact answer, the tool run once in a
tool turn); a deviation fails that system. Usage::

    python bench/peers/peers_bench.py                 # full, a few minutes
    python bench/peers/peers_bench.py --quick         # smoke: 20 x 3, -> peers-quick.*
    python bench/peers/peers_bench.py --postgres-temp --only langgraph-postgres
    python bench/peers/peers_bench.py --wait-load 1.5  # first wait for a quiet box
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import workload

from _support import (
    RESULTS_DIR,
    bootstrap_servers,
    load_average,
    machine,
    now_iso,
    quiet_kafka_logs,
    uptime_line,
    write_json,
)

OUT_JSON = RESULTS_DIR / "peers.json"

# key -> (module, opener, group label, in-memory peer?)
SYSTEMS: dict[str, tuple[str, str, str, bool]] = {
    "turnstream-embedded": ("turnstream_systems", "open_embedded", "turnstream", False),
    "turnstream-kafka": ("turnstream_systems", "open_kafka", "turnstream", False),
    "turnstream-kafka-process": (
        "turnstream_systems",
        "open_kafka_process",
        "turnstream",
        False,
    ),
    "langgraph-memory": ("langgraph_peer", "open_memory", "peer", True),
    "langgraph-memory-invoke": ("langgraph_peer", "open_memory_invoke", "peer", True),
    "langgraph-sqlite": ("langgraph_peer", "open_sqlite", "peer", False),
    "langgraph-postgres": ("langgraph_peer", "open_postgres", "peer", False),
    "agents-run": ("openai_agents_peer", "open_run", "peer", True),
    "agents-streamed": ("openai_agents_peer", "open_streamed", "peer", True),
    "agents-sqlite": ("openai_agents_peer", "open_sqlite", "peer", False),
}
KAFKA_SYSTEMS = {"turnstream-kafka", "turnstream-kafka-process"}
WARMUP_CONVERSATIONS = 2
IDLE_SAMPLE_S = 3.0


def peers_importable() -> str | None:
    """``None`` if the peer frameworks import, else why not."""
    for name in ("langgraph", "langchain_core", "agents", "aiosqlite"):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            return f"{name} not importable ({exc}); pip install -e '.[peers]'"
    return None


def versions() -> dict[str, str]:
    """Versions of the peer packages."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in (
        "langgraph",
        "langchain-core",
        "langgraph-checkpoint",
        "langgraph-checkpoint-sqlite",
        "langgraph-checkpoint-postgres",
        "psycopg",
        "openai-agents",
        "openai",
    ):
        with contextlib.suppress(PackageNotFoundError):
            out[dist] = version(dist)
    return out


async def bench_system(
    key: str, kind: str, cfg: dict[str, Any], options: dict[str, Any]
) -> dict[str, Any]:
    """Warm-up, throughput and latency of one system for one kind of turn."""
    module, opener_name, _group, _memory = SYSTEMS[key]
    opener: Callable[..., Any] = getattr(importlib.import_module(module), opener_name)
    turns = cfg["turns"]
    async with opener(kind, turns, **options) as system:
        for i in range(WARMUP_CONVERSATIONS):
            await workload.latency(
                system, kind, conversations=1, turns=turns, first_index=10_000 + i
            )
        servers = system.server_pids()
        idle = (
            await asyncio.to_thread(workload.server_idle_rate, servers, IDLE_SAMPLE_S)
            if servers
            else 0.0
        )
        tp = await workload.throughput(
            system,
            kind,
            conversations=cfg["conversations"],
            turns=turns,
            concurrency=cfg["concurrency"] or cfg["conversations"],
        )
        if servers:
            tp["server_idle_cpu_ms_per_s"] = idle
            background = idle * tp["elapsed_s"] / tp["turns"]
            tp["cpu_ms_per_turn_net_of_idle"] = round(
                tp["cpu_ms_per_turn"] - background, 3
            )
        lat = await workload.latency(
            system,
            kind,
            conversations=cfg["latency_conversations"],
            turns=turns,
            first_index=20_000,
        )
        facts = system.facts() if hasattr(system, "facts") else {}
    failed = [
        f"{phase}: {doc['deviations']['count']} turns deviated from the script "
        f"(e.g. {doc['deviations']['examples'][0]})"
        for phase, doc in (("throughput", tp), ("latency", lat))
        if doc["deviations"]["count"]
    ]
    failed += [
        f"{phase}: {problem}"
        for phase, doc in (("throughput", tp), ("latency", lat))
        for problem in doc["deviations"]["phase"]
    ]
    if facts.get("deltas_dropped"):
        failed.append(f"the service dropped {facts['deltas_dropped']} deltas")
    return {
        "name": system.name,
        "streamed_to_caller": system.streamed,
        "throughput": tp,
        "latency": lat,
        **({"facts": facts} if facts else {}),
        **({"failed": failed} if failed else {}),
    }


def ok(row: dict[str, Any]) -> bool:
    """Whether every kind of a system's row ran, and ran as scripted."""
    kinds = [v for k, v in row.items() if k in workload.KINDS]
    return bool(kinds) and all("error" not in v and "failed" not in v for v in kinds)


def ratios(systems: dict[str, Any]) -> dict[str, Any]:
    """CPU per turn of each system over turnstream embedded's, per kind.

    Systems marked failed (a deviation, dropped deltas) are included, since
    their CPU was measured; systems whose run raised are not.
    """
    out: dict[str, Any] = {}
    base = systems.get("turnstream-embedded", {})
    for kind in workload.KINDS:
        ref = base.get(kind, {}).get("throughput", {}).get("cpu_ms_per_turn")
        if not ref:
            continue
        per = {}
        for key, row in systems.items():
            cpu = row.get(kind, {}).get("throughput", {}).get("cpu_ms_per_turn")
            if cpu:
                per[key] = round(cpu / ref, 2)
        memory = {
            k: systems[k][kind]["throughput"]["cpu_ms_per_turn"]
            for k in systems
            if SYSTEMS[k][3] and "throughput" in systems[k].get(kind, {})
        }
        entry: dict[str, Any] = {"cpu_vs_embedded": per}
        if memory:
            cheapest = min(memory, key=memory.__getitem__)
            factor = round(memory[cheapest] / ref, 2)
            entry["cheapest_in_memory_peer"] = cheapest
            entry["cheapest_in_memory_peer_over_embedded"] = factor
            entry["embedded_at_least_3x_cheaper"] = factor >= 3.0
        streaming = {
            k: v for k, v in memory.items() if systems[k]["streamed_to_caller"]
        }
        if streaming:
            cheapest = min(streaming, key=streaming.__getitem__)
            entry["cheapest_streaming_in_memory_peer"] = cheapest
            entry["cheapest_streaming_in_memory_peer_over_embedded"] = round(
                streaming[cheapest] / ref, 2
            )
        out[kind] = entry
    return out


async def run(args: argparse.Namespace, dsn: str | None) -> dict[str, Any]:
    """Every selected system and kind; the result document."""
    cfg = {
        "conversations": args.conversations,
        "turns": args.turns,
        "concurrency": args.concurrency,
        "latency_conversations": args.latency_conversations,
        "chunks": workload.CHUNKS,
        "kinds": args.kinds,
    }
    options = {"bootstrap": args.bootstrap, "postgres": dsn}
    doc: dict[str, Any] = {
        "benchmark": "peer comparison: one scripted agent workload on each system",
        "command": " ".join(["python", "bench/peers/peers_bench.py", *args.argv]),
        "started_at": now_iso(),
        "uptime_start": uptime_line(),
        "load_start": load_average(),
        "machine": {**machine(), "peers": versions()},
        "config": cfg,
        "systems": {},
        "skipped": {},
    }
    started = time.perf_counter()
    for key in SYSTEMS:
        if args.only and key not in args.only:
            continue
        if key == "langgraph-postgres" and not dsn:
            doc["skipped"][key] = "no Postgres (--postgres DSN, PEERS_POSTGRES_DSN, "
            doc["skipped"][key] += "or --postgres-temp)"
            print(f"-- {key}: skipped ({doc['skipped'][key]})", flush=True)
            continue
        row: dict[str, Any] = {}
        for kind in args.kinds:
            print(f"== {key} {kind} (load {load_average()})", flush=True)
            try:
                result = await bench_system(key, kind, cfg, options)
            except Exception as exc:  # record it, run the rest
                traceback.print_exc()
                row[kind] = {"error": f"{type(exc).__name__}: {exc}"}
                continue
            row["name"] = result.pop("name")
            row["streamed_to_caller"] = result.pop("streamed_to_caller")
            row[kind] = result
            tp, lat = result["throughput"], result["latency"]["latency_ms"]
            print(
                f"   {tp['cpu_ms_per_turn']:.2f} CPU ms/turn, "
                f"{tp['turns_per_s']} turns/s; p50 {lat['p50']} ms, "
                f"p99 {lat['p99']} ms",
                flush=True,
            )
            for reason in result.get("failed", []):
                print(f"   FAILED: {reason}", flush=True)
        doc["systems"][key] = row
    doc["ratios"] = ratios(
        {
            k: v
            for k, v in doc["systems"].items()
            if all("error" not in v.get(kd, {}) for kd in args.kinds)
        }
    )
    doc["finished_at"] = now_iso()
    doc["duration_s"] = round(time.perf_counter() - started, 1)
    doc["uptime_end"] = uptime_line()
    doc["load_end"] = load_average()
    return doc


# ------------------------------------------------------------------ tables


def _cell(row: dict[str, Any], kind: str, path: tuple[str, ...], digits: int) -> str:
    value: Any = row.get(kind, {})
    for part in path:
        if not isinstance(value, dict):
            return "-"
        value = value.get(part)
    if value is None:
        return "error" if "error" in row.get(kind, {}) else "-"
    return f"{value:,.{digits}f}"


def table(doc: dict[str, Any]) -> list[str]:
    """The comparison table (and the ratio lines), markdown."""
    cfg = doc["config"]
    lines = [
        f"{cfg['conversations']} conversations x {cfg['turns']} turns per kind, "
        f"{cfg['chunks']}-chunk answers, up to "
        f"{cfg['concurrency'] or cfg['conversations']} conversations in flight; "
        f"latency: {cfg['latency_conversations']} conversations one at a time.",
        "",
        "| system | streamed to caller | CPU ms/turn text / tool "
        "| server share text / tool | turns/s text / tool "
        "| latency p50 / p99 ms, text | latency p50 / p99 ms, tool "
        "| CPU ms/turn one at a time, text / tool |",
        "|---|:-:|--:|--:|--:|--:|--:|--:|",
    ]
    for key, row in doc["systems"].items():

        def server(kind: str, row: dict[str, Any] = row) -> str:
            tp = row.get(kind, {}).get("throughput", {})
            share = sum(tp.get("server_cpu_ms_per_turn", {}).values())
            return f"{share:.2f}" if tp.get("server_cpu_ms_per_turn") else "-"

        streamed = "yes" if row.get("streamed_to_caller") else "no"
        lines.append(
            f"| {row.get('name', key)} | {streamed} "
            f"| {_cell(row, 'text', ('throughput', 'cpu_ms_per_turn'), 2)} / "
            f"{_cell(row, 'tool', ('throughput', 'cpu_ms_per_turn'), 2)} "
            f"| {server('text')} / {server('tool')} "
            f"| {_cell(row, 'text', ('throughput', 'turns_per_s'), 0)} / "
            f"{_cell(row, 'tool', ('throughput', 'turns_per_s'), 0)} "
            f"| {_cell(row, 'text', ('latency', 'latency_ms', 'p50'), 1)} / "
            f"{_cell(row, 'text', ('latency', 'latency_ms', 'p99'), 1)} "
            f"| {_cell(row, 'tool', ('latency', 'latency_ms', 'p50'), 1)} / "
            f"{_cell(row, 'tool', ('latency', 'latency_ms', 'p99'), 1)} "
            f"| {_cell(row, 'text', ('latency', 'cpu_ms_per_turn'), 2)} / "
            f"{_cell(row, 'tool', ('latency', 'cpu_ms_per_turn'), 2)} |"
        )
    for key, reason in doc.get("skipped", {}).items():
        lines.append(f"| {key} | skipped: {reason} | | | | | | |")
    lines.append("")
    for key, row in doc["systems"].items():
        for kind in workload.KINDS:
            entry = row.get(kind, {})
            for reason in entry.get("failed", []):
                lines.append(f"- **FAILED** {key}, {kind}: {reason}")
            if "error" in entry:
                lines.append(f"- **ERROR** {key}, {kind}: `{entry['error']}`")
    for kind, entry in doc.get("ratios", {}).items():
        if "cheapest_in_memory_peer" in entry:
            lines.append(
                f"- {kind}: the cheapest in-memory peer "
                f"({entry['cheapest_in_memory_peer']}) uses "
                f"**{entry['cheapest_in_memory_peer_over_embedded']}x** the CPU per "
                f"turn of turnstream embedded (target ≥ 3x: "
                f"{'met' if entry['embedded_at_least_3x_cheaper'] else 'NOT met'})."
            )
        if "cheapest_streaming_in_memory_peer" in entry:
            lines.append(
                f"- {kind}, like for like (the caller sees every chunk, as with "
                f"turnstream): the cheapest streaming in-memory peer "
                f"({entry['cheapest_streaming_in_memory_peer']}) uses "
                f"**{entry['cheapest_streaming_in_memory_peer_over_embedded']}x**."
            )
    for key in sorted(KAFKA_SYSTEMS):
        kafka = doc["systems"].get(key, {})
        for kind in workload.KINDS:
            tp = kafka.get(kind, {}).get("throughput", {})
            if "server_idle_cpu_ms_per_s" not in tp:
                continue
            servers = "the broker" if key == "turnstream-kafka" else "broker + service"
            facts = kafka[kind].get("facts", {})
            lines.append(
                f"- {key}, {kind}: {servers} burned "
                f"{tp['server_idle_cpu_ms_per_s']} CPU ms/s while this bench sent "
                f"nothing (other users of the shared broker, timers, polls); net of "
                f"that, {tp['cpu_ms_per_turn_net_of_idle']:.2f} CPU ms/turn. "
                f"Deltas sent {facts.get('deltas_sent')}, "
                f"dropped {facts.get('deltas_dropped')}."
            )
    return lines


def markdown(doc: dict[str, Any]) -> str:
    """The whole report, with its run header."""
    m = doc["machine"]
    peers = ", ".join(f"{k} {v}" for k, v in m.get("peers", {}).items())
    out = [
        f"Run {doc['started_at']} → {doc['finished_at']} ({doc['duration_s']:.0f} s), "
        f"`{doc['command']}`",
        "",
        f"Machine: {m['nproc']} CPUs, {m['cpu_model']}; Python {m['python']}; {peers}.",
        f"`uptime` at start: `{doc['uptime_start']}`; at end: `{doc['uptime_end']}`.",
        "",
        *table(doc),
    ]
    return "\n".join(out) + "\n"


def parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", default=bootstrap_servers())
    p.add_argument("--quick", action="store_true", help="20 x 3, latency 5 (a smoke)")
    p.add_argument("--conversations", type=int, default=None)
    p.add_argument("--turns", type=int, default=None)
    p.add_argument(
        "--concurrency", type=int, default=0, help="in flight (0: all at once)"
    )
    p.add_argument("--latency-conversations", type=int, default=None)
    p.add_argument(
        "--kinds", nargs="+", choices=workload.KINDS, default=list(workload.KINDS)
    )
    p.add_argument("--only", nargs="+", choices=list(SYSTEMS))
    p.add_argument(
        "--postgres",
        default=os.environ.get("PEERS_POSTGRES_DSN") or None,
        help="libpq DSN for LangGraph + Postgres (or PEERS_POSTGRES_DSN)",
    )
    p.add_argument(
        "--postgres-temp",
        action="store_true",
        help="start a throwaway local cluster (Debian's postgresql package)",
    )
    p.add_argument(
        "--wait-load", type=float, default=0.0, help="first wait for load below this"
    )
    p.add_argument("--wait-max", type=float, default=900.0)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--md", type=Path, default=None)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    quick = args.quick
    args.conversations = args.conversations or (20 if quick else 200)
    args.turns = args.turns or (3 if quick else 5)
    args.latency_conversations = args.latency_conversations or (5 if quick else 20)
    reason = peers_importable()
    if reason:
        print(f"peer comparison skipped: {reason}")
        return 2
    quiet_kafka_logs()
    deadline = time.monotonic() + args.wait_max
    while args.wait_load and os.getloadavg()[0] >= args.wait_load:
        if time.monotonic() > deadline:
            break
        print(f"load {load_average()} >= {args.wait_load}; waiting", flush=True)
        time.sleep(30)
    with contextlib.ExitStack() as stack:
        dsn = args.postgres
        if not dsn and args.postgres_temp:
            from pg_temp import temp_cluster

            dsn = stack.enter_context(temp_cluster())
        doc = asyncio.run(run(args, dsn))
    suffix = "-quick" if quick else ""
    out = args.out or OUT_JSON.with_name(f"peers{suffix}.json")
    md_out = args.md or out.with_suffix(".md")
    write_json(out, doc)
    text = markdown(doc)
    md_out.write_text(text, encoding="utf-8")
    print()
    print(text)
    print(f"wrote {out} and {md_out}")
    failed = [k for k, row in doc["systems"].items() if not ok(row)]
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
