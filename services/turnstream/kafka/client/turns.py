"""Submit and wait: follow one input to the end of the turn that answered it.

Owns :class:`Turn` (a handle on one submitted input: an async iterator of the
events of its answer and its turn, then its :class:`TurnOutcome`),
:class:`TurnOutcome` and :class:`TurnStatus`. A client of
:class:`~turnstream.kafka.client.session.KafkaSession`; imports the value types
and the runtime's subscription types, never the actor or admin side.

How an input is followed (the loop's Reply rule: the events answering a
command carry its id as ``reply_to()``):

1. the *answer*: ``TurnStarted`` (the input began its own turn),
   ``TurnFoldedInto`` (it joined the running turn: ``header.turn_id`` names
   it), ``TurnRejected`` or ``InputCancelled`` (no turn: the outcome is final).
   A live-only ``InputQueued`` may come first (it waited behind a turn);
2. the *turn*: every event whose ``header.turn_id`` is the answer's turn,
   until its terminal (``TurnDone``, ``TurnFailed``, ``TurnInterrupted``).
   After an actor takeover the restored loop closes a turn that was open with
   ``TurnInterrupted``, so a wait never hangs on a dead actor's turn.

The live subscription is made before the input is sent, so nothing of the
answer can pass unseen. Deltas come from another topic than the journal, so a
turn's first ones may be read before its ``TurnStarted``: live-only events of
a turn not known yet are held (bounded) and, when the answer starts that turn,
yielded right after it. The journal (:meth:`KafkaSession.replay_entries`) is
read as well when following an input sent earlier
(:meth:`KafkaSession.follow`), when the subscription falls behind, and after
``resync`` seconds without an event, so a wait survives a missed live record.
Journal events are deduplicated by ``header.event_id``.

:attr:`Turn.cursor` is where the handle stands in its loop's stream: the
cursor after the last event yielded, in the form
:meth:`KafkaSession.attach` takes, so a client that stops reading (or whose
process goes away) resumes with ``attach(loop_id, after=turn.cursor)`` and
gets the rest once. It is kept from the cursors the live feed offers
(:mod:`turnstream.kafka.client.live`) and the journal offsets read, each
topic's offset only moving forward; the early deltas yielded after their
``TurnStarted`` get cursors that still lie before them.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, Self
from uuid import UUID

from turnstream.content import AIMessage, text_of
from turnstream.errors import SessionError, SubscriptionLossError
from turnstream.events import (
    AnyEvent,
    InputCancelled,
    TurnDone,
    TurnFailed,
    TurnFoldedInto,
    TurnInterrupted,
    TurnRejected,
    TurnStarted,
)
from turnstream.ids import CommandId, LoopId
from turnstream.kafka.client.cursor import Cursor
from turnstream.kafka.client.live import CursorSubscription, cursor_at
from turnstream.runtime.subscription import EventFilter, LoopScope, Subscription

if TYPE_CHECKING:
    from turnstream.kafka.reader import JournalEntry


class TurnSource(Protocol):
    """What a :class:`Turn` reads through: the session's live feed and journal.

    :class:`~turnstream.kafka.client.session.KafkaSession` is one; declared
    here so this module does not import the session that imports it.
    """

    def subscribe_events(
        self, event_filter: EventFilter, *, capacity: int | None = None
    ) -> Subscription:
        """Watch events from now on."""
        ...

    async def replay_entries(
        self, loop_id: UUID, *, from_: int = 0
    ) -> list[JournalEntry]:
        """The loop's committed events with their offsets, from ``from_``."""
        ...


__all__ = [
    "DEFAULT_RESYNC",
    "Answer",
    "Terminal",
    "Turn",
    "TurnOutcome",
    "TurnSource",
    "TurnStatus",
]

DEFAULT_RESYNC = 2.0
"""Seconds without a live event after which the journal is read again."""
_HELD_MAX = 10_000
"""Live-only events held while the answer is not known yet (oldest go first)."""

Answer = TurnStarted | TurnFoldedInto | TurnRejected | InputCancelled
"""The event that answers an input."""

Terminal = TurnDone | TurnFailed | TurnInterrupted
"""The event that ends a turn."""

_Item = tuple[AnyEvent, Cursor | None]
"""An event to yield and the cursor after it (``None``: no live reader)."""


class TurnStatus(StrEnum):
    """How a followed input ended."""

    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    REJECTED = "rejected"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """The end of one input: its answer, its turn's terminal, what was seen.

    Attributes:
        status: how it ended.
        command_id: the input's command id.
        loop_id: its loop.
        answer: the event that answered it.
        terminal: its turn's terminal (``None`` when rejected or cancelled).
        events: every event yielded while following it, in order.
    """

    status: TurnStatus
    command_id: CommandId
    loop_id: LoopId
    answer: Answer
    terminal: Terminal | None
    events: tuple[AnyEvent, ...]

    @property
    def folded(self) -> bool:
        """Whether the input joined a turn that was already running."""
        return isinstance(self.answer, TurnFoldedInto)

    @property
    def turn_id(self) -> UUID | None:
        """The turn that answered it (``None`` when rejected or retracted)."""
        if isinstance(self.answer, TurnRejected):
            return None
        return self.answer.header.turn_id

    @property
    def turn_index(self) -> int | None:
        """That turn's index in its loop (``None`` without a turn)."""
        if isinstance(self.answer, TurnStarted | TurnFoldedInto):
            return self.answer.turn_index
        return None

    @property
    def message(self) -> AIMessage | None:
        """The final answer (``TurnDone`` only)."""
        return self.terminal.message if isinstance(self.terminal, TurnDone) else None

    @property
    def text(self) -> str:
        """The final answer's text (empty unless ``TurnDone``)."""
        message = self.message
        return "" if message is None else text_of(message.blocks)


class Turn:
    """A handle on one submitted input (see module docstring).

    Iterate it (``async for event in turn``) to see the answer, the turn's
    journal events and, if asked, its ``TokenDelta`` chunks; then
    :meth:`outcome` (or just ``await turn.outcome()``, which reads to the end).
    Close it (``async with`` or :meth:`close`) if you stop early; to go on
    later, keep :attr:`cursor` and ``attach(turn.loop_id, after=cursor)``.
    """

    def __init__(
        self,
        session: TurnSource,
        loop_id: LoopId,
        *,
        tokens: bool,
        resync: float = DEFAULT_RESYNC,
    ) -> None:
        scope = LoopScope.only(loop_id)
        self._session = session
        self.loop_id = loop_id
        self.command_id: CommandId | None = None
        self._subscription: Subscription = session.subscribe_events(
            EventFilter(enduring=scope, ephemeral=scope if tokens else LoopScope())
        )
        self._cursor: Cursor | None = (
            self._subscription.cursor_for(loop_id)
            if isinstance(self._subscription, CursorSubscription)
            else None
        )
        self._at: Cursor | None = None
        self._resync = resync
        self._tokens = tokens
        self._position = 0
        self._pending: list[_Item] = []
        self._seen_ids: set[UUID] = set()
        self._answer: Answer | None = None
        self._terminal: Terminal | None = None
        self._events: list[AnyEvent] = []
        self._held: deque[_Item] = deque(maxlen=_HELD_MAX)
        self._outcome: TurnOutcome | None = None
        self._live = True

    def bind(self, command_id: CommandId, *, from_journal: bool) -> None:
        """Follow ``command_id`` (sent after this handle subscribed, or earlier)."""
        self.command_id = command_id
        if from_journal:
            self._live = False  # read the journal first: the answer may be there
            if self._cursor is not None:
                # The journal is read from its start: so is the stream.
                self._cursor = Cursor(self._cursor.partition, 0, self._cursor.deltas)

    @property
    def cursor(self) -> Cursor | None:
        """Where this handle stands in its loop's stream, for ``attach(after=...)``.

        The cursor after the last event yielded (before any: where following
        began). ``attach(turn.loop_id, after=turn.cursor)``, in this process
        or another, yields every event of the loop after it once and none
        this handle yielded; its tokens too, whether this handle was asked
        for them or not. ``None`` when the session has no live reader.
        """
        return self._cursor

    # -------------------------------------------------------------- reading

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> AnyEvent:
        while self._outcome is None:
            if not self._pending:
                await self._fill()
            while self._pending:
                event, self._at = self._pending.pop(0)
                if self._take(event):  # may move ``_at`` (early deltas)
                    self._advance(self._at)
                    return event
        self.close()
        raise StopAsyncIteration

    async def outcome(self) -> TurnOutcome:
        """Read to the terminal (or the final answer) and return the outcome.

        Waits without bound (wrap it in ``asyncio.timeout``).

        Raises:
            SessionError: the session closed before the outcome.
            DecodeError: a journal record of the loop is not a valid event.
            TransportError: the journal could not be read.
        """
        async for _ in self:
            pass
        if self._outcome is None:  # unreachable: iteration ends only with one
            raise RuntimeError("turn ended without an outcome")
        return self._outcome

    def close(self) -> None:
        """Stop following (idempotent); the turn itself is not affected."""
        self._subscription.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        self.close()

    # ------------------------------------------------------------ internals

    async def _fill(self) -> None:
        if self._live:
            try:
                event, position = await self._subscription.next_positioned(self._resync)
            except TimeoutError:
                pass  # quiet: make sure nothing was missed
            except SubscriptionLossError:
                self._live = False  # fell behind: the journal from here on
            except StopAsyncIteration:
                raise SessionError("session_closing") from None
            else:
                self._pending.append((event, cursor_at(position)))
                self._pending.extend(
                    (e, cursor_at(p)) for e, p in self._subscription.poll_positioned()
                )
                return
        await self._read_journal()

    async def _read_journal(self) -> None:
        entries = await self._session.replay_entries(self.loop_id, from_=self._position)
        if entries:
            self._position = entries[-1].offset + 1
            # A journal event says nothing of the deltas: 0 keeps their offset.
            here = self._cursor
            self._pending.extend(
                (
                    e.event,
                    None
                    if here is None
                    else Cursor(here.partition, e.offset + 1, 0, "e"),
                )
                for e in entries
            )
        elif not self._live and self._subscription.active:
            # Caught up with the journal: go back to live (deduplicated).
            self._live = True
        elif not self._live:
            await asyncio.sleep(min(self._resync, 0.5))  # no live feed: poll

    def _take(self, event: AnyEvent) -> bool:
        """Record ``event`` if it belongs to the followed input; True to yield it."""
        if event.is_enduring() and event.header.event_id is not None:
            if event.header.event_id in self._seen_ids:
                return False
            self._seen_ids.add(event.header.event_id)
        if self._answer is None:
            return self._take_answer(event)
        turn_id = self._answer.header.turn_id
        if turn_id is None or event.header.turn_id != turn_id:
            return False
        self._events.append(event)
        if isinstance(event, TurnDone | TurnFailed | TurnInterrupted):
            self._terminal = event
            self._finish(_terminal_status(event))
        return True

    def _take_answer(self, event: AnyEvent) -> bool:
        if self.command_id is None or event.reply_to() != self.command_id:
            if not event.is_enduring() and event.header.turn_id is not None:
                self._held.append((event, self._at))  # may be of our answer's turn
            return False
        self._events.append(event)
        if isinstance(event, TurnRejected):
            self._answer = event
            self._finish(TurnStatus.REJECTED)
        elif isinstance(event, InputCancelled):
            self._answer = event
            self._finish(TurnStatus.CANCELLED)
        elif isinstance(event, TurnStarted):
            self._answer = event
            # A new turn is wholly ours: its early live events come next.
            turn_id = event.header.turn_id
            early = [i for i in self._held if i[0].header.turn_id == turn_id]
            self._pending[:0] = self._before_early(early)
        elif isinstance(event, TurnFoldedInto):
            self._answer = event  # the running turn's events before it are not ours
        if self._answer is not None:
            self._held.clear()
        return True  # InputQueued (live-only) is yielded, not an answer

    def _before_early(self, early: list[_Item]) -> list[_Item]:
        """Re-cursor the early deltas yielded after ``TurnStarted`` (now ``_at``).

        They were read before it, so the cursor the feed gave ``TurnStarted``
        lies after them: resuming there would skip them. Each of them, and
        ``TurnStarted`` itself, gets the journal offset after
        ``TurnStarted`` and the deltas offset of the next early delta; the
        last one that of ``TurnStarted``.
        """
        started = self._at
        cursors = [c for _, c in early if c is not None]
        if not early or started is None or len(cursors) < len(early):
            return early
        # The deltas offset after each: the next early delta's own offset.
        ends = [c.deltas - 1 for c in cursors[1:]]
        ends.append(max(started.deltas, cursors[-1].deltas))
        self._at = Cursor(started.partition, started.events, cursors[0].deltas - 1, "e")
        return [
            (event, Cursor(started.partition, started.events, end, "d"))
            for (event, _), end in zip(early, ends, strict=True)
        ]

    def _advance(self, at: Cursor | None) -> None:
        """Move :attr:`cursor` past an event yielded with cursor ``at``.

        Each topic's offset only moves forward: an event found in the journal
        before the live feed read it leaves the journal offset ahead of the
        deltas that feed yields next. Without ``tokens`` no delta was taken,
        so the deltas offset stays where following began.
        """
        if at is None or self._cursor is None:
            return
        deltas = self._cursor.deltas
        if self._tokens:
            deltas = max(deltas, at.deltas)
        self._cursor = Cursor(
            at.partition, max(self._cursor.events, at.events), deltas, at.kind
        )

    def _finish(self, status: TurnStatus) -> None:
        if self._answer is None or self.command_id is None:
            raise RuntimeError("finished without an answer")
        self._outcome = TurnOutcome(
            status=status,
            command_id=self.command_id,
            loop_id=self.loop_id,
            answer=self._answer,
            terminal=self._terminal,
            events=tuple(self._events),
        )
        self._pending.clear()
        self.close()


def _terminal_status(event: Terminal) -> TurnStatus:
    if isinstance(event, TurnDone):
        return TurnStatus.DONE
    if isinstance(event, TurnFailed):
        return TurnStatus.FAILED
    return TurnStatus.INTERRUPTED
