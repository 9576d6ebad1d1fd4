"""A/B the turn benchmark: this checkout vs a patched scratch copy, interleaved.

Runs ``bench/turns_bench.py --no-raw`` (in-process service, pre-produced
backlog, no raw replay) alternately against the package as installed ("A")
and against a scratch copy of ``services/`` ("B", put first on
``PYTHONPATH``), ``--rounds`` times each, A B A B ..., so both see the same
drift of a shared machine. Reports per variant and kind the median of the
service's CPU milliseconds per turn (process CPU time over the measured
window: less sensitive to other processes than turns/s) and of turns/s.
Usage::

    cp -r services /tmp/scratch/services   # then apply the proposed patch there
    python bench/lab/profile_ab.py --scratch /tmp/scratch/services --rounds 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

from _support import LAB_OUT_DIR, ROOT, load_average, now_iso, write_json


def one_run(scratch: Path | None, args: argparse.Namespace) -> list[dict[str, Any]]:
    """One turns_bench run; its cases' turnstream numbers."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if scratch is not None:
        env["PYTHONPATH"] = str(scratch)
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "turns_bench.py"),
            "--no-raw",
            "--loops",
            str(args.loops),
            "--turns",
            str(args.turns),
            "--kind",
            *args.kind,
            "--out",
            os.devnull,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    cases = []
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            case = json.loads(line)
            cases.append({"kind": case["kind"], **case["turnstream"]})
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scratch", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--loops", type=int, default=200)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--kind", nargs="+", default=["text", "tool"])
    parser.add_argument("--out", type=Path, default=LAB_OUT_DIR / "profile_ab.json")
    args = parser.parse_args(argv)
    samples: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    loads = []
    for round_no in range(args.rounds):
        for label, scratch in (("A", None), ("B", args.scratch)):
            loads.append(load_average()[0])
            for case in one_run(scratch, args):
                samples[(label, case["kind"])].append(case)
                print(
                    f"round {round_no + 1} {label} {case['kind']}: "
                    f"{case['turns_per_s']} turns/s, "
                    f"{case['cpu_ms_per_turn']} CPU ms/turn",
                    flush=True,
                )
    summary = {}
    for (label, kind), runs in sorted(samples.items()):
        summary[f"{label} {kind}"] = {
            "runs": len(runs),
            "median_cpu_ms_per_turn": round(
                statistics.median(r["cpu_ms_per_turn"] for r in runs), 3
            ),
            "median_turns_per_s": round(
                statistics.median(r["turns_per_s"] for r in runs), 1
            ),
            "cpu_ms_per_turn": [r["cpu_ms_per_turn"] for r in runs],
            "turns_per_s": [r["turns_per_s"] for r in runs],
        }
    doc = {
        "measured_at": now_iso(),
        "scratch": str(args.scratch),
        "loops": args.loops,
        "turns": args.turns,
        "load_1m_per_run": loads,
        "summary": summary,
    }
    print(json.dumps(summary, indent=2))
    write_json(args.out, doc)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
