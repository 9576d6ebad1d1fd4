"""Plumbing the event-watching commands share: connect, read, print.

Owns :func:`connect_session` (probe the broker, then open a
:class:`~turnstream.kafka.client.session.KafkaSession` on the configured topic
set), :func:`loop_filter`, :func:`next_events` (one bounded read of a
subscription through :class:`~turnstream.cli.ordering.LiveOrder`) and
:class:`EventPrinter` (the renderer's text to a rich console, styled on a
terminal, plain elsewhere, never wrapped). Must not import aiokafka.
"""

from __future__ import annotations

import time
from typing import Final
from uuid import UUID

from rich.console import Console

from turnstream.cli.ordering import LiveOrder
from turnstream.cli.render import EventRenderer, style_of
from turnstream.cli.settings import KafkaTarget
from turnstream.events import AnyEvent
from turnstream.ids import LoopId
from turnstream.kafka.admin.probe import check_broker
from turnstream.kafka.client.session import KafkaSession
from turnstream.runtime.subscription import EventFilter, LoopScope, Subscription

__all__ = [
    "TICK",
    "EventPrinter",
    "connect_session",
    "loop_filter",
    "next_events",
]

TICK: Final = 0.2
"""Seconds one read waits before the caller gets control back (deadlines, hints)."""


async def connect_session(
    target: KafkaTarget, *, loop_id: UUID | None = None
) -> KafkaSession:
    """Check that Kafka answers, then connect a session client.

    Both use ``target``'s security settings (TLS, SASL).

    Raises:
        BrokerUnreachableError: Kafka does not answer at the bootstrap servers.
        ConfigError: a topic of the set does not exist.
        TransportError: a later Kafka call failed or timed out.
    """
    await check_broker(target.connection, security=target.security)
    return await KafkaSession.connect(
        clients=target.clients("turnstream-cli"),
        topics=target.topics,
        loop_id=LoopId(loop_id) if loop_id is not None else None,
    )


def loop_filter(loop_id: UUID) -> EventFilter:
    """Every event (live and journaled) of one loop."""
    scope = LoopScope.only(loop_id)
    return EventFilter(ephemeral=scope, enduring=scope)


async def next_events(
    subscription: Subscription, order: LiveOrder, *, wait: float = TICK
) -> list[AnyEvent]:
    """The events to show next: at most ``wait`` seconds of waiting.

    Returns an empty list when nothing arrived (the caller checks its deadlines).

    Raises:
        StopAsyncIteration: the subscription ended (the session closed).
        SubscriptionLossError: the subscription fell behind on journal events.
    """
    due = order.next_due(time.monotonic())
    if due is not None:
        wait = min(wait, max(due, 0.01))
    try:
        first = await subscription.next(timeout=wait)
    except TimeoutError:
        return order.expire(time.monotonic())
    now = time.monotonic()
    shown = order.accept(first, now)
    for event in subscription.poll():
        shown.extend(order.accept(event, now))
    return shown


class EventPrinter:
    """Writes rendered events to a console as they arrive.

    Args:
        console: where to write (styles are dropped when it is not a terminal).
        renderer: formats the events.
    """

    def __init__(self, console: Console, renderer: EventRenderer) -> None:
        self._console = console
        self._renderer = renderer

    def show(self, event: AnyEvent) -> None:
        """Print ``event`` (a delta continues the open line)."""
        text = self._renderer.feed(event)
        if text:
            self._write(text, style_of(event))

    def note(self, text: str, style: str = "dim") -> None:
        """Print a line of commentary (closing an open delta line first)."""
        self._write(self._renderer.close() + text + "\n", style)

    def close(self) -> None:
        """End an open delta line."""
        self._write(self._renderer.close(), "")

    def _write(self, text: str, style: str) -> None:
        if not text:
            return
        self._console.print(
            text,
            style=style or None,
            end="",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
