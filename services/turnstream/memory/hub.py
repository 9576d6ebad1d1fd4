"""An in-process hub: live fan-out of events to subscriptions.

Owns :class:`InMemoryHub`, which implements both sides of the live path:
:class:`~turnstream.runtime.ports.LiveHub` (the actor publishes ephemeral
events and delivers committed enduring ones) and
:class:`~turnstream.runtime.ports.EventSource` (clients subscribe). Delivery is
a non-blocking offer to each subscription, which applies its filter and its
overflow policy (see :mod:`turnstream.runtime.subscription`). Publishers never
block and never see a subscriber's failure. Imports runtime ports and value
types only.
"""

from __future__ import annotations

from collections.abc import Sequence

from turnstream.events import AnyEvent, EnduringEvent, EphemeralEvent
from turnstream.runtime.subscription import (
    DEFAULT_SUBSCRIBER_CAPACITY,
    EventFilter,
    Subscription,
)

__all__ = ["InMemoryHub"]


class InMemoryHub:
    """Fan-out to subscriptions in this process (no replay)."""

    def __init__(self, *, default_capacity: int = DEFAULT_SUBSCRIBER_CAPACITY) -> None:
        self._default_capacity = default_capacity
        self._subscriptions: list[Subscription] = []
        self._closed = False

    def subscribe(
        self, event_filter: EventFilter, *, capacity: int | None = None
    ) -> Subscription:
        """Attach a subscription that sees only later events."""
        subscription = Subscription(event_filter, capacity or self._default_capacity)
        if self._closed:
            subscription.end()
        else:
            self._subscriptions.append(subscription)
        return subscription

    async def publish(self, event: EphemeralEvent) -> None:
        """Offer an ephemeral event to every subscription."""
        self._fan_out(event)

    async def deliver(self, events: Sequence[EnduringEvent]) -> None:
        """Offer committed enduring events, in order, to every subscription."""
        for event in events:
            self._fan_out(event)

    def _fan_out(self, event: AnyEvent) -> None:
        live: list[Subscription] = []
        for subscription in self._subscriptions:
            subscription.offer(event)
            if subscription.active:
                live.append(subscription)
        self._subscriptions = live  # lost, closed and ended ones are detached

    def close(self) -> None:
        """End every subscription (after its buffered events); idempotent."""
        self._closed = True
        for subscription in self._subscriptions:
            subscription.end()
        self._subscriptions = []
