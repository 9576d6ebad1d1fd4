"""Profile the turn throughput benchmark's hot path with cProfile.

Runs one :mod:`turns_bench` workload (in-process service, pre-produced
backlog) with :mod:`cProfile` enabled only while the service works through the
backlog, then prints and writes (``bench/lab/out/profile_<kind>.txt``):

* the CPU split by area (codec/fastavro, pydantic, aiokafka, runtime, ...),
  from each function's own time;
* the top functions by own time and by cumulative time;
* with ``--profiler pyinstrument`` (``pip install pyinstrument``), a sampled
  call tree instead (low overhead, so the turns/s stay close to unprofiled).

cProfile slows Python code down (every call is timed), so the turns/s it
prints are lower than the unprofiled benchmark's; use it for *where* the time
goes, not for how much. Usage::

    python bench/lab/profile_turns.py --kind text --loops 200 --turns 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import pstats
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

from _support import (
    LAB_OUT_DIR,
    bootstrap_servers,
    now_iso,
    quiet_kafka_logs,
    topic_set,
)
from turns_bench import KINDS, run_turnstream

# Areas by file path fragment, first match wins.
AREAS: tuple[tuple[str, str], ...] = (
    ("turnstream/wire/", "turnstream.wire (codec mapping)"),
    ("fastavro", "fastavro"),
    ("turnstream/kafka/", "turnstream.kafka (service, writer, journal)"),
    ("turnstream/runtime/", "turnstream.runtime (actor, turn, fold)"),
    ("turnstream/testing/", "scripted model"),
    ("turnstream/", "turnstream value types, validation"),
    ("pydantic", "pydantic"),
    ("aiokafka", "aiokafka"),
    ("asyncio", "asyncio"),
    ("uuid", "uuid"),
    ("datetime", "datetime"),
)


def area_of(filename: str) -> str:
    """The area a profiled function's file belongs to."""
    for fragment, area in AREAS:
        if fragment in filename:
            return area
    if filename == "~":
        return "builtins (C calls: dict/list/str/json/...)"
    return "other Python"


def split_by_area(stats: pstats.Stats) -> list[tuple[str, float]]:
    """Own (total) time per area, largest first."""
    areas: defaultdict[str, float] = defaultdict(float)
    raw: Any = stats.stats  # type: ignore[attr-defined]
    for (filename, _line, name), (_cc, _nc, tottime, _ct, _callers) in raw.items():
        key = area_of(filename)
        if filename == "~" and "fastavro" in name:
            key = "fastavro"
        areas[key] += tottime
    return sorted(areas.items(), key=lambda item: -item[1])


def report(profile: cProfile.Profile, header: str, top: int = 30) -> str:
    """The area split and the top functions, as text."""
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    total = sum(t for _, t in split_by_area(stats)) or 1.0
    out.write(f"{header}\n\nCPU by area (own time, profiled window):\n")
    for area, seconds in split_by_area(stats):
        out.write(f"  {seconds:8.3f} s  {100 * seconds / total:5.1f} %  {area}\n")
    out.write(f"  {total:8.3f} s  total\n\nTop {top} by own time:\n")
    stats.sort_stats("tottime").print_stats(top)
    out.write(f"\nTop {top} by cumulative time:\n")
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def sampled_tree(session: Any, header: str) -> str:
    """A pyinstrument session as a text call tree."""
    from pyinstrument.renderers import ConsoleRenderer

    renderer = ConsoleRenderer(unicode=False, color=False, short_mode=False)
    return f"{header}\n\n{renderer.render(session)}"


async def profile_case(
    bootstrap: str,
    *,
    kind: str,
    loops: int,
    turns: int,
    partitions: int,
    sampler: Any = None,
) -> tuple[dict[str, Any], cProfile.Profile]:
    """Run one workload with a profiler on during the measured window.

    ``sampler`` is a pyinstrument ``Profiler`` to use instead of cProfile.
    """
    profile = cProfile.Profile()

    @contextlib.contextmanager
    def profiling() -> Iterator[None]:
        if sampler is not None:
            sampler.start()
        else:
            profile.enable()
        try:
            yield
        finally:
            if sampler is not None:
                sampler.stop()
            else:
                profile.disable()

    async with topic_set(bootstrap, f"prof-{kind}", partitions=partitions) as (
        prefix,
        topics,
    ):
        result = await run_turnstream(
            bootstrap,
            topics,
            prefix,
            loops=loops,
            turns=turns,
            kind=kind,
            partitions=partitions,
            around=profiling,
        )
    return result, profile


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=bootstrap_servers())
    parser.add_argument("--kind", choices=KINDS, default="text")
    parser.add_argument("--loops", type=int, default=200)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument(
        "--profiler", choices=("cprofile", "pyinstrument"), default="cprofile"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    quiet_kafka_logs()
    sampler = None
    if args.profiler == "pyinstrument":
        from pyinstrument import Profiler

        sampler = Profiler(interval=0.0005, async_mode="disabled")
    result, profile = asyncio.run(
        profile_case(
            args.bootstrap,
            kind=args.kind,
            loops=args.loops,
            turns=args.turns,
            partitions=args.partitions,
            sampler=sampler,
        )
    )
    header = (
        f"profile of turns_bench ({args.kind}, {args.loops} loops x {args.turns} "
        f"turns, {args.partitions} partitions) at {now_iso()}\n"
        f"under {args.profiler}: {json.dumps(result)}"
    )
    if sampler is not None:
        text = sampled_tree(sampler.last_session, header)
    else:
        text = report(profile, header, args.top)
    print(text)
    suffix = "" if sampler is None else "_sampled"
    out = args.out or LAB_OUT_DIR / f"profile_{args.kind}{suffix}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
