"""A journal wrapper that fails or stalls on demand.

Owns :class:`FlakyJournal`: it delegates to an
:class:`~turnstream.memory.InMemoryJournal` and can be told to fail the next
appends, to fail appends that match a predicate, or to stall an append until
released; it keeps every committed append's events (``batches``). Imports the
memory adapter and value types.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from turnstream.events import EnduringEvent
from turnstream.ids import LoopId
from turnstream.memory.journal import InMemoryJournal
from turnstream.runtime.effects import StagedRecord
from turnstream.runtime.ports import Recovery
from turnstream.runtime.progress import CommandProgress

__all__ = ["FlakyJournal", "JournalFailure"]


class JournalFailure(RuntimeError):
    """The injected append failure."""


class FlakyJournal:
    """An in-memory journal with injectable failures."""

    def __init__(self, inner: InMemoryJournal | None = None) -> None:
        self.inner = inner or InMemoryJournal()
        self.appends = 0
        self.batches: list[tuple[EnduringEvent, ...]] = []  # committed, in order
        self.progress: CommandProgress | None = None  # the last one given
        self._fail_next = 0
        self._fail_when: Callable[[Sequence[EnduringEvent]], bool] | None = None
        self._stall: asyncio.Event | None = None

    def fail_next(self, count: int = 1) -> None:
        """Fail the next ``count`` appends."""
        self._fail_next += count

    def fail_when(
        self, predicate: Callable[[Sequence[EnduringEvent]], bool] | None
    ) -> None:
        """Fail every append whose events match ``predicate`` (``None`` clears)."""
        self._fail_when = predicate

    def stall(self) -> asyncio.Event:
        """Make appends wait until the returned event is set."""
        self._stall = asyncio.Event()
        return self._stall

    async def append(
        self,
        loop_id: LoopId,
        events: Sequence[EnduringEvent],
        progress: CommandProgress | None = None,
        effects: Sequence[StagedRecord] = (),
    ) -> None:
        """Append through the inner journal, unless told to fail."""
        self.appends += 1
        if progress is not None:
            self.progress = progress
        if self._stall is not None:
            await self._stall.wait()
        if self._fail_next:
            self._fail_next -= 1
            raise JournalFailure("injected append failure")
        if self._fail_when is not None and self._fail_when(events):
            raise JournalFailure("injected append failure")
        await self.inner.append(loop_id, events, progress, effects)
        self.batches.append(tuple(events))

    async def recover(self, loop_id: LoopId) -> Recovery:
        """Delegate."""
        return await self.inner.recover(loop_id)

    def events(self, loop_id: LoopId) -> tuple[EnduringEvent, ...]:
        """Delegate."""
        return self.inner.events(loop_id)

    @property
    def effects(self) -> list[tuple[LoopId, StagedRecord]]:
        """The committed staged records (see :attr:`InMemoryJournal.effects`)."""
        return self.inner.effects
