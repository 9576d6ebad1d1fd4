"""Analytics over the turn journal: pure aggregation plus a faust-streaming worker.

The only package that imports faust (the ``[analytics]`` extra), and only in
:mod:`.codecs`, :mod:`.transport`, :mod:`.app` and :mod:`.examples`; it
imports neither :mod:`turnstream.runtime` nor :mod:`turnstream.kafka`.
Importing this package does not import faust.

Contents:

* :mod:`~turnstream.analytics.aggregate` -- :class:`LoopStats`, :func:`fold`:
  the per-loop state, folded from typed events, idempotent under redelivery.
* :mod:`~turnstream.analytics.percentiles` -- :class:`LatencySketch`, the
  bounded, mergeable latency histogram (1 % relative accuracy).
* :mod:`~turnstream.analytics.report` -- merge loop states into an
  :class:`~turnstream.wire.analytics_codec.AnalyticsSnapshot`; JSON views.
* :mod:`~turnstream.analytics.sample` -- synthetic journals with known outcomes.
* :mod:`~turnstream.analytics.settings` -- :class:`AnalyticsSettings` from env/flags.
* :mod:`~turnstream.analytics.codecs` -- the faust codecs (``turnstream_avro`` …).
* :mod:`~turnstream.analytics.transport` -- the ``read_committed`` faust transport.
* :mod:`~turnstream.analytics.app` -- :class:`AnalyticsApp`, the faust wiring.
* :mod:`~turnstream.analytics.worker` -- :func:`run`, the worker's start-up
  until stopped (``turnstream analytics run``, alias ``python -m
  turnstream.analytics``), and :func:`serve`.
* :mod:`~turnstream.analytics.examples.failure_streak` -- a user-written processor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from turnstream.analytics.aggregate import (
    Aggregates,
    FoldConfig,
    LoopStats,
    Outcome,
    Position,
    TerminalKind,
    fold,
)
from turnstream.analytics.percentiles import LatencySketch, SketchParams
from turnstream.analytics.report import build_snapshot, totals_view, windows_view
from turnstream.analytics.settings import AnalyticsSettings, Guarantee

if TYPE_CHECKING:
    from turnstream.analytics.worker import run, serve

__all__ = [
    "Aggregates",
    "AnalyticsSettings",
    "FoldConfig",
    "Guarantee",
    "LatencySketch",
    "LoopStats",
    "Outcome",
    "Position",
    "SketchParams",
    "TerminalKind",
    "build_snapshot",
    "fold",
    "run",
    "serve",
    "totals_view",
    "windows_view",
]


def __getattr__(name: str) -> Any:
    # serve pulls in faust; import it only when asked for, so the pure modules
    # stay usable without faust.
    if name in ("run", "serve"):
        from turnstream.analytics import worker  # noqa: PLC0415 - lazy

        return getattr(worker, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
