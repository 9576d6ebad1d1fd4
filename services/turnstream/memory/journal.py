"""An in-process journal: the durable port without a broker.

Owns :class:`InMemoryJournal`, a production-grade implementation of
:class:`turnstream.runtime.ports.Journal` for embedded use (a CLI, a notebook,
tests): per-loop, append-only, totally ordered lists of enduring events.
"Durable" here means for the life of the process. Like a real journal it
refuses what could not be restored: ephemeral events, events that break their
coordinate profile, events of another loop; and it is idempotent by
``event_id`` (an identical retry is a no-op, a different event under a known id
is refused). Imports value types, validation and runtime ports only.
"""

from __future__ import annotations

from collections.abc import Sequence

from turnstream.errors import (
    ContractError,
    EphemeralNotPersistableError,
    InvalidEventError,
)
from turnstream.events import EnduringEvent, EventBase
from turnstream.ids import LoopId
from turnstream.runtime.effects import StagedRecord
from turnstream.runtime.ports import Recovery
from turnstream.runtime.progress import CommandProgress
from turnstream.validation import validate_event

__all__ = ["IdempotencyCollisionError", "InMemoryJournal"]


class IdempotencyCollisionError(ContractError):
    """A different event was appended under an ``event_id`` already used."""

    kind = "idempotency_collision"

    def __init__(self, event_type: str) -> None:
        self.event_type = event_type
        super().__init__(f"event {event_type}: event_id already used by another event")


class InMemoryJournal:
    """Per-loop event lists in memory; one call to :meth:`append` is atomic."""

    def __init__(self) -> None:
        self._logs: dict[LoopId, list[EnduringEvent]] = {}
        self._by_id: dict[object, EnduringEvent] = {}
        self.effects: list[tuple[LoopId, StagedRecord]] = []
        """The records tool calls staged, committed with their steps, in order."""

    async def append(
        self,
        loop_id: LoopId,
        events: Sequence[EnduringEvent],
        progress: CommandProgress | None = None,
        effects: Sequence[StagedRecord] = (),
    ) -> None:
        """Validate every event, then append them all (or none).

        ``progress`` is ignored: in memory there is no command log to redeliver.
        ``effects`` are kept in :attr:`effects` with the events, or not at all
        (an identical retry of the events keeps them once).

        Raises:
            EphemeralNotPersistableError: an ephemeral event was given.
            InvalidEventError: an event breaks its profile or names another loop.
            IdempotencyCollisionError: a known ``event_id`` with other content.
        """
        fresh: list[EnduringEvent] = []
        for event in events:
            self._check(loop_id, event)
            known = self._by_id.get(event.header.event_id)
            if known is not None:
                if known != event:
                    raise IdempotencyCollisionError(event.type_name)
                continue  # an identical retry: committed once, kept once
            fresh.append(event)
        log = self._logs.setdefault(loop_id, [])
        log.extend(fresh)
        for event in fresh:
            self._by_id[event.header.event_id] = event
        if fresh:
            self.effects.extend((loop_id, record) for record in effects)

    @staticmethod
    def _check(loop_id: LoopId, event: EventBase) -> None:
        if not event.is_enduring():
            raise EphemeralNotPersistableError(event.type_name)
        validate_event(event)
        if event.header.loop_id != loop_id:
            raise InvalidEventError(event.type_name, "loop_id", "is invalid")

    async def recover(self, loop_id: LoopId) -> Recovery:
        """No snapshots here: every event of the loop, in order."""
        return Recovery(snapshot=None, events=tuple(self._logs.get(loop_id, ())))

    async def read(self, loop_id: LoopId, after: int = -1) -> list[EnduringEvent]:
        """The loop's events at positions greater than ``after`` (0-based)."""
        return list(self._logs.get(loop_id, ())[after + 1 :])

    def events(self, loop_id: LoopId) -> tuple[EnduringEvent, ...]:
        """Every committed event of ``loop_id`` (a snapshot)."""
        return tuple(self._logs.get(loop_id, ()))

    def loop_ids(self) -> tuple[LoopId, ...]:
        """Every loop with at least one committed event."""
        return tuple(self._logs)
