"""Live subscriptions: which events a client sees and how a slow one is treated.

Owns :class:`LoopScope` and :class:`EventFilter` (contract §3.3: two
independent per-class loop selections; the zero filter matches no loop
event) and :class:`Subscription`, the bounded per-subscriber buffer (§3.4):

* no replay: a subscription sees only events offered after it was made;
* the hub offers without ever blocking; on a full buffer an *ephemeral* event
  is dropped for this subscriber only, while an *enduring* one fails the
  subscription with :class:`~turnstream.errors.SubscriptionLossError`
  (resync from the journal);
* :meth:`Subscription.close` is idempotent and ends iteration at once; a hub
  end (:meth:`Subscription.end`) lets the consumer drain what is buffered
  first; the first terminal state wins;
* a hub may offer each event with a *position* (opaque here: the Kafka session
  offers a cursor, where its stream stands just after the event);
  :attr:`Subscription.position` is the position of the last event taken, so a
  consumer can resume from where it read, not from where the hub stands.

Pure asyncio; imports only value types and errors.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from enum import StrEnum
from typing import Self
from uuid import UUID

from turnstream.errors import SubscriptionLossError
from turnstream.events import AnyEvent, Delivery, Scope

__all__ = [
    "DEFAULT_SUBSCRIBER_CAPACITY",
    "EventFilter",
    "LoopScope",
    "Positioned",
    "Subscription",
]

Positioned = tuple[AnyEvent, object | None]
"""An event and the hub's position just after it (``None``: the hub gives none)."""

DEFAULT_SUBSCRIBER_CAPACITY = 256


@dataclass(frozen=True, slots=True)
class LoopScope:
    """A selection of loops: all of them, or a set (empty matches nothing)."""

    all: bool = False
    loops: frozenset[UUID] = frozenset()

    @classmethod
    def every(cls) -> LoopScope:
        """Every loop."""
        return cls(all=True)

    @classmethod
    def only(cls, *loop_ids: UUID) -> LoopScope:
        """Just these loops."""
        return cls(loops=frozenset(loop_ids))

    def matches(self, loop_id: UUID | None) -> bool:
        """Whether events of ``loop_id`` are selected."""
        return self.all or (loop_id is not None and loop_id in self.loops)


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Independent loop scopes for ephemeral and enduring events."""

    ephemeral: LoopScope = LoopScope()
    enduring: LoopScope = LoopScope()

    @classmethod
    def everything(cls) -> EventFilter:
        """Every event of every loop."""
        return cls(ephemeral=LoopScope.every(), enduring=LoopScope.every())

    def should_deliver(self, event: AnyEvent) -> bool:
        """Session-scoped events always pass; loop events by class and loop."""
        if event.SCOPE is Scope.SESSION:
            return True
        scope = (
            self.ephemeral if event.DELIVERY is Delivery.EPHEMERAL else self.enduring
        )
        return scope.matches(event.header.loop_id)


class _State(StrEnum):
    OPEN = "open"
    ENDED = "ended"
    LOST = "lost"
    CLOSED = "closed"


class Subscription:
    """A bounded live feed of events; iterate it with ``async for``."""

    def __init__(
        self, event_filter: EventFilter, capacity: int = DEFAULT_SUBSCRIBER_CAPACITY
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.filter = event_filter
        self.capacity = capacity
        self.dropped = 0
        self._buffer: deque[Positioned] = deque()
        self._position: object | None = None
        self._state = _State.OPEN
        self._error: SubscriptionLossError | None = None
        self._wake = asyncio.Event()

    @property
    def err(self) -> SubscriptionLossError | None:
        """The loss that failed this subscription, if any (``None`` after close)."""
        return self._error

    @property
    def position(self) -> object | None:
        """The hub's position after the last event taken (``None`` before any)."""
        return self._position

    @property
    def active(self) -> bool:
        """Whether the hub should still offer events."""
        return self._state is _State.OPEN

    # -- hub side -------------------------------------------------------

    def offer(self, event: AnyEvent, position: object | None = None) -> None:
        """Hand over one event without blocking (filtered here).

        Args:
            event: the event.
            position: where the hub's stream stands just after it (opaque).
        """
        if self._state is not _State.OPEN or not self.filter.should_deliver(event):
            return
        if len(self._buffer) >= self.capacity:
            if event.DELIVERY is Delivery.EPHEMERAL:
                self.dropped += 1
                return
            self._error = SubscriptionLossError(event.DELIVERY.value, self.capacity)
            self._state = _State.LOST
        else:
            self._buffer.append((event, position))
        self._wake.set()

    def end(self) -> None:
        """No more events will come; buffered ones can still be read."""
        if self._state is _State.OPEN:
            self._state = _State.ENDED
            self._wake.set()

    # -- consumer side --------------------------------------------------

    def close(self) -> None:
        """Stop now and discard what is buffered. Idempotent."""
        if self._state in (_State.OPEN, _State.ENDED):
            self._state = _State.CLOSED
            self._buffer.clear()
            self._wake.set()

    def poll(self) -> list[AnyEvent]:
        """Take every buffered event without waiting."""
        return [event for event, _ in self.poll_positioned()]

    def poll_positioned(self) -> list[Positioned]:
        """Take every buffered event, each with its position, without waiting."""
        taken = list(self._buffer)
        self._buffer.clear()
        for event, position in taken:
            self._took(event, position)
        return taken

    def _took(self, event: AnyEvent, position: object | None) -> None:
        """Note an event just taken and its position (subclasses keep more)."""
        self._position = position

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> AnyEvent:
        event, _ = await self._next_positioned()
        return event

    async def _next_positioned(self) -> Positioned:
        while True:
            if self._buffer:
                item = self._buffer.popleft()
                self._took(*item)
                return item
            if self._state is _State.LOST and self._error is not None:
                raise self._error
            if self._state is not _State.OPEN:
                raise StopAsyncIteration
            self._wake.clear()
            await self._wake.wait()

    async def next(self, timeout: float) -> AnyEvent:  # noqa: ASYNC109 - a bounded read
        """The next event, waiting at most ``timeout`` seconds.

        Raises as :meth:`next_positioned`.
        """
        event, _ = await self.next_positioned(timeout)
        return event

    async def next_positioned(self, timeout: float) -> Positioned:  # noqa: ASYNC109 - a bounded read
        """The next event and its position, waiting at most ``timeout`` seconds.

        Raises:
            TimeoutError: nothing arrived in time.
            StopAsyncIteration: the subscription ended or was closed.
            SubscriptionLossError: the subscription fell behind.
        """
        async with asyncio.timeout(timeout):
            return await self._next_positioned()
