"""Garbage-collector pauses of one benchmark run, at a given first threshold.

Sets the collector's first-generation threshold (``0``: CPython's 700), runs
another benchmark script in this process, and prints, per generation, how many
collections ran and how long they paused the process (``gc.callbacks``, one
monotonic clock): the total, the median, the p99 and the longest. Everything
in the process counts (the service, the benchmark's own raw Kafka side and its
setup), so compare two thresholds on the same script. Usage::

    python bench/lab/gc_pauses.py 0 bench/turns_bench.py --kind text --out t0.json
    python bench/lab/gc_pauses.py 10000 bench/turns_bench.py --kind text --out t1.json
"""

from __future__ import annotations

import atexit
import gc
import runpy
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

from turnstream.loop_actor.gc_policy import apply_gc_threshold


class Pauses:
    """Each collection's pause, per generation, in ms."""

    def __init__(self) -> None:
        self.ms: dict[int, list[float]] = {0: [], 1: [], 2: []}
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            pause = (time.perf_counter() - self._started) * 1000
            self.ms[info["generation"]].append(pause)

    def report(self, threshold: int) -> str:
        """One line per generation that collected."""
        lines = []
        for generation, seen in self.ms.items():
            if not seen:
                lines.append(f"threshold {threshold} gen{generation}: none")
                continue
            pauses = sorted(seen)
            lines.append(
                f"threshold {threshold} gen{generation}: {len(pauses)} collections, "
                f"{sum(pauses):.1f} ms in all; pause p50 "
                f"{pauses[len(pauses) // 2]:.3f}, p99 "
                f"{pauses[min(len(pauses) - 1, int(len(pauses) * 0.99))]:.3f}, "
                f"max {pauses[-1]:.2f} ms"
            )
        return "\n".join(lines)


def main() -> None:
    """``gc_pauses.py THRESHOLD SCRIPT [ARGS...]``."""
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    threshold = int(sys.argv[1])
    script = sys.argv[2]
    sys.argv = sys.argv[2:]
    shown = apply_gc_threshold(threshold)[0]
    pauses = Pauses()
    gc.callbacks.append(pauses)
    atexit.register(lambda: print(pauses.report(shown)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
