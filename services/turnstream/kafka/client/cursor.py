"""Stream cursors: where a client is in one loop's stream, as a short opaque string.

Owns :class:`Cursor`, :class:`Streamed` (an event with the cursor after it),
:class:`DeltasExpired` (the notice that tokens after a cursor are gone) and
:data:`AttachItem`. Pure: imports value types and errors only.

A loop's stream is two co-partitioned topics: its journal (``read_committed``)
and its deltas. A cursor is the position *after* an item in both: the loop's
partition, the next journal offset and the next deltas offset to read, plus
which topic the item came from. Resuming from it reads each topic from its
offset, so nothing before it comes again and nothing after it is skipped,
whoever wrote the records (any actor, before or after a takeover) and
whichever client process read them first.

The text form (``Cursor.encode``) is ``<kind><partition>-<events>-<deltas>``
with the numbers in lower-case hex, e.g. ``d0-1a-3f``: URL-safe, fit for an
SSE ``id:``, and opaque to users (parse it only with :meth:`Cursor.decode`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from turnstream.errors import InvalidCursorError
from turnstream.events import AnyEvent

__all__ = ["AttachItem", "Cursor", "DeltasExpired", "Streamed"]

Kind = Literal["e", "d", "s"]
"""Where the item came from: ``e`` journal, ``d`` deltas, ``s`` a start point."""

_TEXT = re.compile(r"^([eds])([0-9a-f]{1,8})-([0-9a-f]{1,16})-([0-9a-f]{1,16})$")


@dataclass(frozen=True, slots=True)
class Cursor:
    """A position in one loop's stream (see module docstring).

    Attributes:
        partition: the loop's partition (the same on both topics).
        events: the next journal offset to read.
        deltas: the next deltas offset to read.
        kind: which topic the item before it came from.
    """

    partition: int
    events: int
    deltas: int
    kind: Kind = "s"

    def encode(self) -> str:
        """The cursor's text form (URL-safe)."""
        return f"{self.kind}{self.partition:x}-{self.events:x}-{self.deltas:x}"

    @classmethod
    def decode(cls, text: str) -> Cursor:
        """Parse a cursor's text form.

        Raises:
            InvalidCursorError: ``text`` is not a cursor (reason ``malformed``).
        """
        match = _TEXT.match(text.strip())
        if match is None:
            raise InvalidCursorError("malformed")
        kind, partition, events, deltas = match.groups()
        return cls(
            partition=int(partition, 16),
            events=int(events, 16),
            deltas=int(deltas, 16),
            kind="e" if kind == "e" else "d" if kind == "d" else "s",
        )

    @property
    def offset(self) -> int | None:
        """The offset of the item before it, in its own topic (``None``: a start)."""
        if self.kind == "e":
            return self.events - 1
        if self.kind == "d":
            return self.deltas - 1
        return None

    def __str__(self) -> str:
        return self.encode()


@dataclass(frozen=True, slots=True)
class Streamed:
    """One event of the stream and the cursor just after it.

    Attributes:
        event: a journal event or a live-only one (a ``TokenDelta`` ...).
        cursor: resume here to get what follows this event.
    """

    event: AnyEvent
    cursor: Cursor


@dataclass(frozen=True, slots=True)
class DeltasExpired:
    """The live-only events after the cursor asked for are no longer kept.

    The deltas topic keeps records for its retention (an hour as
    ``infra/topics.yaml`` sets it); the journal keeps every committed event, so
    the committed text (each ``StepDone`` and ``TurnDone``) is still complete.
    The stream goes on with the journal from the cursor and the deltas from
    the oldest one kept.

    Attributes:
        requested: the deltas offset the cursor asked for.
        earliest: the oldest deltas offset still kept (the stream resumes there).
        cursor: the position the stream resumes from.
    """

    requested: int
    earliest: int
    cursor: Cursor


AttachItem = Streamed | DeltasExpired
"""What an attachment yields."""
