"""The live feed's positions: a cursor on every event a session's subscription yields.

Owns :class:`LivePositions` (where a session's live reader stands on each
partition of the journal and of the deltas topic) and
:class:`CursorSubscription`, the subscription
:meth:`~turnstream.kafka.client.session.KafkaSession.subscribe_events` returns:
a :class:`~turnstream.runtime.subscription.Subscription` whose events each
come with the :class:`~turnstream.kafka.client.cursor.Cursor` just after them.
Part of ``turnstream.kafka``; imports the cursor, the record keys and the
runtime's subscription types, never the session.

Why a cursor taken here resumes exactly: the reader hands records to the
subscriptions in the order it reads them, and the cursor offered with each is
the next offset of *both* topics on its partition at that moment. Every record
of that partition before the cursor was offered before the event, so a
consumer that took the event took (or was not meant to see, by its filter)
everything before it, and nothing after it. ``attach(loop_id, after=cursor)``
reads each topic from the cursor's offsets: the rest, once. A subscription
whose filter leaves out a loop's tokens (or its journal events) never took
them, so its cursor for that loop keeps that topic's offset where the
subscription started: ``attach`` then yields them all. Tokens a full
subscription dropped (its overflow rule for ephemeral events) stay dropped.
"""

from __future__ import annotations

from typing import cast
from uuid import UUID

from turnstream.events import AnyEvent
from turnstream.kafka.client.cursor import Cursor, Kind
from turnstream.kafka.records import loop_key, partition_for
from turnstream.runtime.subscription import EventFilter, Subscription

__all__ = ["CursorSubscription", "LivePositions", "Position", "cursor_at"]

Position = tuple[int, int, int, Kind]
"""A cursor's fields (partition, journal offset, deltas offset, kind).

What the reader offers with each record: a plain tuple, since a frozen
``Cursor`` costs many times more to make and most are never looked at; it
becomes a :class:`~turnstream.kafka.client.cursor.Cursor` when asked for.
"""


def cursor_at(position: object | None) -> Cursor | None:
    """The cursor a live position names (``None``: the hub gave no position)."""
    if isinstance(position, tuple) and len(position) == 4:
        partition, events, deltas, kind = cast("Position", position)
        return Cursor(partition, events, deltas, kind)
    return None


class LivePositions:
    """The next journal and deltas offset the live reader hands out, per partition.

    The session's two reader tasks each move their own topic's offsets (one
    event loop: a record's cursor is read between two records, never mid-way).
    """

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self._events: dict[int, int] = {}
        self._deltas: dict[int, int] = {}

    def start(self, kind: Kind, partition: int, offset: int) -> None:
        """Where the reader of ``kind`` starts on ``partition``."""
        (self._events if kind == "e" else self._deltas)[partition] = offset

    def read(self, kind: Kind, partition: int, offset: int) -> None:
        """Note the record at ``offset`` of ``kind``'s topic read."""
        (self._events if kind == "e" else self._deltas)[partition] = offset + 1

    def here(self, partition: int, kind: Kind = "s") -> Position | None:
        """The position on ``partition`` now (``None`` before the readers started)."""
        try:
            return (partition, self._events[partition], self._deltas[partition], kind)
        except KeyError:
            return None


class CursorSubscription(Subscription):
    """A live subscription that knows where, in each loop's stream, its reader is.

    Iterate it as any :class:`~turnstream.runtime.subscription.Subscription`;
    :attr:`cursor` is the position after the last event taken and
    :meth:`cursor_for` that of one loop, ready for
    ``KafkaSession.attach(loop_id, after=...)`` (see module docstring).

    Args:
        event_filter: which events it takes.
        capacity: its buffer size.
        positions: the session's live positions (``None``: no live reader, so
            there is no cursor).
    """

    def __init__(
        self,
        event_filter: EventFilter,
        capacity: int,
        positions: LivePositions | None = None,
    ) -> None:
        super().__init__(event_filter, capacity)
        self._partitions = 0 if positions is None else positions.partitions
        # Where each partition stood when the subscription was made: it gets
        # every record read after that, so that is where it starts.
        self._start: dict[int, Position] = {}
        if positions is not None:
            for partition in range(self._partitions):
                start = positions.here(partition)
                if start is not None:
                    self._start[partition] = start
        self._at = dict(self._start)
        self._last: AnyEvent | None = None

    @property
    def cursor(self) -> Cursor | None:
        """The cursor after the last event taken (``None`` before any).

        It is :meth:`cursor_for` that event's loop; for a subscription to
        several loops use :meth:`cursor_for`.
        """
        if self._last is None:
            return None
        loop_id = self._last.header.loop_id
        if loop_id is None:  # a session-scoped event: no loop's filter
            return cursor_at(self.position)
        return self.cursor_for(loop_id)

    def cursor_for(self, loop_id: UUID) -> Cursor | None:
        """Where this subscription stands in ``loop_id``'s stream.

        After the last event taken of the loop's partition, or where the
        subscription started there if none was taken: every event of the loop
        it yielded is before it, every later one after it. ``None`` when the
        session has no live reader.
        """
        if self._partitions == 0:
            return None
        partition = partition_for(loop_key(loop_id), self._partitions)
        at, start = self._at.get(partition), self._start.get(partition)
        if at is None or start is None:
            return None
        _, events, deltas, kind = at
        return Cursor(
            partition,
            events if self.filter.enduring.matches(loop_id) else start[1],
            deltas if self.filter.ephemeral.matches(loop_id) else start[2],
            kind,
        )

    def _took(self, event: AnyEvent, position: object | None) -> None:
        # The base's bookkeeping inlined: this runs for every event taken.
        self._position = position
        if position is not None:
            at = cast("Position", position)  # this session's reader offers these
            self._at[at[0]] = at
            self._last = event
