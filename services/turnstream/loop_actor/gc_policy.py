"""The loop-actor process's garbage-collector setting.

Owns :func:`apply_gc_threshold`. A turn allocates many short-lived containers
(events, their headers, futures, records, queue entries), and CPython runs its
youngest collection every 700 net allocations by default, its middle one every
10 of those, and a full one after 10 middle ones once the long-lived objects
have grown by a quarter: with hundreds of turns in flight the collector runs
thousands of times a second and rescans the turns' live objects each time.
The deployable raises the first threshold (default 10,000): with
``bench/scale_bench.py --processes 1`` (one ``python -m turnstream.loop_actor``
process, 1,000 turns, three interleaved rounds, ``bench/results/history/gc-threshold/``)
a turn cost 1.47-1.52 CPU ms at CPython's 700 and 1.26-1.42 at 10,000. Garbage
in reference cycles lives a little longer (at most 10,000 allocations more);
full collections, the only long pauses, become rarer, not more frequent.

A process-wide setting, so it belongs to the composition root: the deployable
applies it, the library (``LocalSession``, ``KafkaSession``, the service
class) never touches the collector of the application it runs in.
"""

from __future__ import annotations

import gc
from typing import Final

__all__ = ["DEFAULT_GC_THRESHOLD", "apply_gc_threshold"]

DEFAULT_GC_THRESHOLD: Final = 10_000
"""The deployable's first-generation threshold (CPython's own is 700)."""


def apply_gc_threshold(threshold: int) -> tuple[int, int, int]:
    """Set the first generation's threshold; ``0`` leaves CPython's as it is.

    The older generations' thresholds are kept. Returns the thresholds in force.
    """
    if threshold > 0:
        _, middle, oldest = gc.get_threshold()
        gc.set_threshold(threshold, middle, oldest)
    return gc.get_threshold()
