"""Where a partition writer's next records land, predicted from its last commit.

Owns :class:`OffsetPrediction` and the offset-range helpers the writer checks
a prediction with. The partition's single writer knows where its next events
and history records land if nothing else reaches those partitions: after its
last record and that transaction's commit marker. Its state records go out
with the events on those predicted offsets (one produce round trip); the
offsets the records really got are compared before the commit, and a
misprediction (a foreign or misrouted record, an aborted transaction's marker)
makes the writer abort and write again the slow way. A failed transaction
leaves the prediction unknown, so the next one takes the slow way.

Part of ``turnstream.kafka``; imports nothing of aiokafka (records' metadata is
read by attribute).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["OffsetPrediction", "offset_ranges", "planned_ranges"]


class OffsetPrediction:
    """The next offsets of the partition's events and history records."""

    def __init__(self) -> None:
        # None: not known (the slow way).
        self._events: int | None = None
        self._history: int | None = None

    def take(self) -> tuple[int | None, int | None]:
        """The predicted ``(events, history)`` offsets, now unknown until settled.

        Taken, not peeked: a transaction that fails leaves them unknown.
        """
        taken = (self._events, self._history)
        self._events = self._history = None
        return taken

    def committed(
        self,
        *,
        events_at: int | None,
        offsets: Sequence[Sequence[Any]],
        history_at: int | None,
        history_offsets: Sequence[int],
    ) -> None:
        """A transaction committed: predict from where its records landed.

        ``events_at`` and ``history_at`` are what :meth:`take` returned for it,
        kept when it wrote nothing to that partition.
        """
        last = max((m.offset for metas in offsets for m in metas), default=None)
        # After this transaction's last record comes its commit marker.
        self._events = events_at if last is None else last + 2
        self._history = max(history_offsets) + 2 if history_offsets else history_at


def offset_ranges(offsets: Sequence[Sequence[Any]]) -> list[range]:
    """Per request, the offsets its events got, as first to last + 1.

    Not consecutive (something landed between them): the range is longer
    than the request's events, so it never equals a planned range.
    """
    return [
        range(min(m.offset for m in metas), max(m.offset for m in metas) + 1)
        if metas
        else range(0)
        for metas in offsets
    ]


def planned_ranges(counts: Sequence[int], first: int) -> list[range]:
    """Per request, where its events land if nothing else reaches the partition.

    ``counts[i]``: how many events request ``i`` has.
    """
    ranges: list[range] = []
    at = first
    for count in counts:
        ranges.append(range(at, at + count))
        at += count
    return ranges
