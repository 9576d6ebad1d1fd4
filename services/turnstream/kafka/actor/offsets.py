"""Which commands-partition offset is safe to commit.

Owns :class:`CommandOffsets`, the per-partition ledger of commands read from
``turnstream.commands.v1``: what was processed, which inputs still wait for a
durable answer, and the *committable* offset derived from both. Pure and
synchronous: the partition's writer task is its only user, so it needs no
locks. Must not import aiokafka, the runtime or the wire codec.

The rule: the committable offset is the smallest offset of a command that is
not yet resolved durably, else the last processed offset + 1. A
``SubmitInput`` is resolved when an event answering it (``reply_to()`` equal
to its command id) is committed; every other command is resolved once the actor
has taken it. A crash therefore never loses a queued input (the next owner
re-reads it) and never re-runs a resolved one (it is deduplicated by command
id against the loop's resolved set).
"""

from __future__ import annotations

from collections.abc import Iterable
from uuid import UUID

__all__ = ["CommandOffsets"]


class CommandOffsets:
    """The offset ledger of one commands partition (single owner: its writer).

    Offsets must be reported in increasing order, as the consumer reads them.
    """

    def __init__(self) -> None:
        self._next: int | None = None
        self._pending: dict[int, UUID] = {}
        self._offset_of: dict[UUID, int] = {}
        self._committed: int | None = None

    @property
    def pending(self) -> int:
        """How many read inputs still wait for their durable answer."""
        return len(self._pending)

    @property
    def committed(self) -> int | None:
        """The last offset committed for the group (``None``: not yet)."""
        return self._committed

    @property
    def next_offset(self) -> int | None:
        """The offset after the last one processed (``None``: nothing read)."""
        return self._next

    def processed(self, offset: int) -> None:
        """Record that the command at ``offset`` needs nothing more."""
        self._advance(offset)

    def awaiting(self, offset: int, command_id: UUID) -> None:
        """Record that the input at ``offset`` waits for a durable answer.

        Receiving the same command id twice keeps the first (smaller) offset.
        """
        self._advance(offset)
        if command_id in self._offset_of:
            return
        self._pending[offset] = command_id
        self._offset_of[command_id] = offset

    def committable(self, resolving: Iterable[UUID] = ()) -> int | None:
        """The offset to commit if ``resolving`` were resolved, or ``None``.

        ``resolving`` are the command ids answered inside the transaction that
        will carry this offset, so the answer and the offset move atomically.
        """
        skip = {self._offset_of[c] for c in resolving if c in self._offset_of}
        waiting = [o for o in self._pending if o not in skip]
        if waiting:
            return min(waiting)
        return self._next

    def resolve(self, command_ids: Iterable[UUID]) -> None:
        """Forget inputs whose answers are now committed (unknown ids ignored)."""
        for command_id in command_ids:
            offset = self._offset_of.pop(command_id, None)
            if offset is not None:
                self._pending.pop(offset, None)

    def mark_committed(self, offset: int) -> None:
        """Record that ``offset`` was committed for the group."""
        if self._committed is None or offset > self._committed:
            self._committed = offset

    def needs_commit(self) -> bool:
        """Whether the committable offset is ahead of the committed one."""
        target = self.committable()
        return target is not None and (
            self._committed is None or target > self._committed
        )

    def _advance(self, offset: int) -> None:
        if offset < 0:
            raise ValueError("offsets are never negative")
        if self._next is None or offset + 1 > self._next:
            self._next = offset + 1
