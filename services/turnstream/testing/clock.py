"""Deterministic clock and id source fakes.

Owns :class:`FixedClock` and :class:`SequentialIds` (with injectable
failures). Imports only the standard library.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

__all__ = ["EPOCH", "FixedClock", "IdSourceFailure", "SequentialIds"]

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class FixedClock:
    """A clock that starts at ``start`` and advances ``tick`` per reading."""

    def __init__(self, start: datetime = EPOCH, tick: timedelta = timedelta(0)) -> None:
        self._now = start
        self._tick = tick
        self.readings = 0

    def now(self) -> datetime:
        """The fake time."""
        value = self._now
        self._now += self._tick
        self.readings += 1
        return value

    def advance(self, delta: timedelta) -> None:
        """Move the clock forward."""
        self._now += delta


class IdSourceFailure(RuntimeError):
    """Raised by :class:`SequentialIds` when told to fail."""


class SequentialIds:
    """Ids 1, 2, 3, … as UUIDs (never the zero UUID)."""

    def __init__(self, start: int = 1) -> None:
        self._next = start
        self._failures = 0
        self.minted = 0

    def new_id(self) -> UUID:
        """The next id, unless a failure is pending."""
        if self._failures:
            self._failures -= 1
            raise IdSourceFailure("id source failed")
        value = UUID(int=self._next)
        self._next += 1
        self.minted += 1
        return value

    def fail_next(self, count: int = 1) -> None:
        """Make the next ``count`` calls raise :class:`IdSourceFailure`."""
        self._failures += count
