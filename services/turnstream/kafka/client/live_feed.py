"""A session's live feed: the readers behind its subscriptions.

Owns :class:`LiveFeed`, the live side of
:class:`~turnstream.kafka.client.session.KafkaSession`: one reader per topic,
every events partition assigned at its end (``read_committed``) and every
deltas partition at its end (``read_uncommitted``), each pumped by a task
that decodes the records with the codec and offers every event to each
subscription with the cursor after it (:mod:`turnstream.kafka.client.live`).
It learns each opened gate's loop on the way, so a gate answer finds its
loop. Also :class:`RecentLoops`, the bounded table of which loop a recent
command or gate belongs to. Part of ``turnstream.kafka``; never imports the
session.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from uuid import UUID

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from turnstream.errors import DecodeError
from turnstream.events import AnyEvent, GateOpened
from turnstream.ids import LoopId
from turnstream.kafka.client.cursor import Kind
from turnstream.kafka.client.live import CursorSubscription, LivePositions, Position
from turnstream.kafka.clients import KafkaClients, stop_client
from turnstream.kafka.diagnose import authorization_error
from turnstream.kafka.faults import transport_error
from turnstream.kafka.topology import TopicNames
from turnstream.runtime.input_queue import SEEN_WINDOW
from turnstream.runtime.subscription import EventFilter, Subscription
from turnstream.runtime.supervision import cancel_and_wait
from turnstream.wire import Codec

__all__ = ["LiveFeed", "RecentLoops"]

_log = logging.getLogger(__name__)
_FETCH_MS = 100
K = TypeVar("K")


class RecentLoops(Generic[K]):
    """Which loop each of the last ``SEEN_WINDOW`` keys belongs to (oldest go first)."""

    def __init__(self) -> None:
        self._loops: OrderedDict[K, LoopId] = OrderedDict()

    def remember(self, key: K, loop_id: LoopId) -> None:
        """Record ``key``'s loop, forgetting the oldest key past the window."""
        self._loops[key] = loop_id
        while len(self._loops) > SEEN_WINDOW:
            self._loops.popitem(last=False)

    def get(self, key: K) -> LoopId | None:
        """``key``'s loop, if it is remembered."""
        return self._loops.get(key)

    def keys_of(self, loop_id: LoopId) -> set[K]:
        """The remembered keys of ``loop_id``."""
        return {key for key, loop in self._loops.items() if loop == loop_id}


@dataclass(eq=False, repr=False, kw_only=True)
class LiveFeed:
    """The live readers of one session and its subscriptions (see module docstring)."""

    clients: KafkaClients
    topics: TopicNames
    codec: Codec
    capacity: int
    _readers: list[Any] = field(init=False, default_factory=list)
    _tasks: list[asyncio.Task[None]] = field(init=False, default_factory=list)
    _subscriptions: list[Subscription] = field(init=False, default_factory=list)
    _positions: LivePositions | None = field(init=False, default=None)
    gates: RecentLoops[UUID] = field(init=False, default_factory=RecentLoops)
    undecodable: int = field(init=False, default=0)

    async def start(self, counts: dict[str, int]) -> None:
        """Start both readers at the topics' ends, then their pump tasks.

        Raises:
            KafkaAuthorizationError: an ACL denies Read on a topic.
            TransportError: Kafka could not be reached in time.
        """
        seconds = self.clients.connection.connect_timeout
        positions = LivePositions(counts[self.topics.events])
        kinds: tuple[tuple[str, bool, Callable[[bytes], AnyEvent], Kind], ...] = (
            (self.topics.events, True, self.codec.unmarshal_event, "e"),
            (self.topics.deltas, False, self.codec.unmarshal_ephemeral, "d"),
        )
        pumps: list[tuple[Any, Callable[[bytes], AnyEvent], Kind, str]] = []
        for topic, committed, decode, kind in kinds:
            reader = self.clients.consumer(
                "live", read_committed=committed, auto_offset_reset="latest"
            )
            await self.clients.start(
                reader, operation="start live reader", seconds=seconds
            )
            self._readers.append(reader)
            assigned = [TopicPartition(topic, p) for p in range(counts[topic])]
            reader.assign(assigned)
            try:
                async with asyncio.timeout(self.clients.connection.request_timeout):
                    await reader.seek_to_end(*assigned)
                    for tp in assigned:  # resolve the positions now: live from here
                        positions.start(
                            kind, tp.partition, int(await reader.position(tp))
                        )
            except (TimeoutError, KafkaError) as exc:
                denied = authorization_error(
                    exc,
                    security=self.clients.security,
                    operation=f"read {topic}",
                    permission="Read",
                    resource=topic,
                )
                raise denied or transport_error("position live reader", exc) from exc
            pumps.append((reader, decode, kind, topic))
        # Started once both topics' positions are known: a record's cursor
        # names both.
        self._positions = positions
        for reader, decode, kind, topic in pumps:
            self._tasks.append(
                asyncio.create_task(
                    self._pump(reader, decode, kind, positions), name=f"live-{topic}"
                )
            )

    async def close(self) -> None:
        """Stop the pump tasks, end every subscription, stop the readers."""
        await cancel_and_wait(self._tasks)
        for subscription in self._subscriptions:
            subscription.end()
        seconds = self.clients.connection.request_timeout
        for reader in self._readers:
            await stop_client(reader, seconds=seconds)

    def subscribe(
        self, event_filter: EventFilter, capacity: int | None
    ) -> CursorSubscription:
        """A subscription to every event read from now on (see the session's)."""
        subscription = CursorSubscription(
            event_filter, capacity or self.capacity, self._positions
        )
        self._subscriptions.append(subscription)
        return subscription

    async def _pump(
        self,
        reader: Any,
        decode: Callable[[bytes], AnyEvent],
        kind: Kind,
        positions: LivePositions,
    ) -> None:
        while True:
            try:
                batch = await reader.getmany(timeout_ms=_FETCH_MS)
            except KafkaError as exc:
                _log.warning("live read failed", extra={"exc_type": type(exc).__name__})
                await asyncio.sleep(0.5)
                continue
            for tp, records in batch.items():
                for record in records:
                    # Moved for every record, even one not offered: a cursor
                    # is a position in the log, not in what was decoded.
                    positions.read(kind, tp.partition, record.offset)
                    if record.value is None:
                        continue
                    try:
                        event = decode(record.value)
                    except DecodeError:
                        self.undecodable += 1
                        continue
                    self._offer(
                        event,
                        positions.here(tp.partition, kind)
                        if self._subscriptions
                        else None,
                    )

    def _offer(self, event: AnyEvent, position: Position | None = None) -> None:
        if isinstance(event, GateOpened) and event.header.loop_id is not None:
            self.gates.remember(event.gate_id, LoopId(event.header.loop_id))
        # Offered to every subscription; the closed ones are dropped only when
        # one is seen (rebuilding the list for every event cost ~2 % of a turn).
        closed = False
        for subscription in self._subscriptions:
            if subscription.active:
                subscription.offer(event, position)
            else:
                closed = True
        if closed:
            self._subscriptions = [s for s in self._subscriptions if s.active]
