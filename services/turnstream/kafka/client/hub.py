"""A fan-out hub: many loop streams in one process over one consumer per topic.

Owns :class:`StreamHub` and :class:`HubStream`. The hub reads every partition
of the journal (``read_committed``) and of the deltas topic
(``read_uncommitted``) from their ends, with one consumer each, and hands each
record of a loop that someone watches to that loop's streams, with the cursor
after it (:mod:`turnstream.kafka.client.cursor`). A record of a loop nobody
watches is not decoded. Part of ``turnstream.kafka``: the gateway's streams
come from here, so no web client ever holds a Kafka consumer.

A stream that starts from a cursor behind the hub first catches up with a
bounded :class:`~turnstream.kafka.client.attach.Attachment` (its own short-lived
consumers, reading up to where the hub stood when the stream registered), then
takes the hub's items, which were queued for it from that moment: no gap, and
an item at or before the stream's position is skipped, so no duplicate.

Back-pressure is per stream: each has a bounded queue; the hub never waits for
a stream. A stream whose queue is full is dropped (:class:`StreamDropped` is
raised by its iterator, with the cursor to resume from), so one slow client
never stalls the others. Across topics the hub keeps the attachment's order: a
journal batch is handed out once the deltas are read to their end as it was
after that batch was fetched.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Self
from uuid import UUID

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from turnstream.errors import DecodeError, TurnstreamError
from turnstream.events import AnyEvent
from turnstream.kafka.client.attach import Attachment, check_cursor, start_cursor
from turnstream.kafka.client.cursor import AttachItem, Cursor, Streamed
from turnstream.kafka.clients import KafkaClients, stop_client
from turnstream.kafka.diagnose import authorization_error
from turnstream.kafka.faults import transport_error
from turnstream.kafka.records import loop_key, parse_loop_key, partition_for
from turnstream.kafka.topology import TopicNames, partition_counts
from turnstream.runtime.supervision import cancel_and_wait
from turnstream.wire import Codec

__all__ = ["DEFAULT_STREAM_QUEUE", "HubStream", "StreamDropped", "StreamHub"]

_log = logging.getLogger(__name__)

DEFAULT_STREAM_QUEUE = 2000
"""Items one stream may have waiting before it is dropped as too slow."""
_FETCH_MS = 100
_RETRY_S = 0.5


class StreamDropped(TurnstreamError):
    """A stream fell too far behind (its queue was full) and was dropped.

    Reconnect from ``cursor``: nothing after it is lost.

    Attributes:
        cursor: the position after the last item the stream yielded.
        queue: the queue size it exceeded.
    """

    kind = "stream_dropped"
    retriable = True

    def __init__(self, cursor: Cursor, queue: int) -> None:
        self.cursor = cursor
        self.queue = queue
        super().__init__(
            f"stream dropped: more than {queue} items waiting; resume from {cursor}"
        )


class HubStream:
    """One loop's stream from the hub (see module docstring); iterate, then close."""

    def __init__(
        self,
        hub: StreamHub,
        loop_id: UUID,
        start: Cursor,
        catch_up: Attachment | None,
        queue: int,
    ) -> None:
        self.loop_id = loop_id
        self._hub = hub
        self._catch_up = catch_up
        self._queue: deque[Streamed] = deque()
        self._limit = queue
        self._wake = asyncio.Event()
        self._e_next = start.events
        self._d_next = start.deltas
        self._cursor = start
        self._dropped = False
        self._closed = False

    @property
    def cursor(self) -> Cursor:
        """The position after the last item yielded."""
        return self._cursor

    def offer(self, item: Streamed) -> None:
        """Queue a live item (the hub's side; never blocks)."""
        if self._dropped or self._closed:
            return
        if len(self._queue) >= self._limit:
            self._dropped = True
            self._queue.clear()
            self._hub.forget(self)
        else:
            self._queue.append(item)
        self._wake.set()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> AttachItem:
        while True:
            if self._catch_up is not None:
                try:
                    item = await self._catch_up.__anext__()
                except StopAsyncIteration:
                    await self._catch_up.close()
                    self._catch_up = None
                    continue
                if isinstance(item, Streamed) and not self._fresh(item):
                    continue
                self._advance(item.cursor)
                return item
            if self._dropped:
                raise StreamDropped(self._cursor, self._limit)
            if self._queue:
                live = self._queue.popleft()
                if not self._fresh(live):
                    continue
                self._advance(live.cursor)
                if self._cursor != live.cursor:
                    # A stream that started ahead of the hub on one topic (a
                    # cursor from another process): its own position is later.
                    return Streamed(live.event, self._cursor)
                return live
            if self._closed:
                raise StopAsyncIteration
            self._wake.clear()
            await self._wake.wait()

    def _fresh(self, item: Streamed) -> bool:
        offset = item.cursor.offset
        if offset is None:
            return True
        if item.cursor.kind == "e":
            return offset >= self._e_next
        return offset >= self._d_next

    def _advance(self, cursor: Cursor) -> None:
        self._e_next = max(self._e_next, cursor.events)
        self._d_next = max(self._d_next, cursor.deltas)
        self._cursor = Cursor(cursor.partition, self._e_next, self._d_next, cursor.kind)

    async def close(self) -> None:
        """Stop the stream (idempotent)."""
        self._closed = True
        self._hub.forget(self)
        self._wake.set()
        if self._catch_up is not None:
            await self._catch_up.close()
            self._catch_up = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()


@dataclass(eq=False, repr=False, kw_only=True)
class StreamHub:
    """One consumer per topic for every stream of the process (module docstring).

    Start it with :meth:`start`, open streams with :meth:`open`, stop it with
    :meth:`close`.
    """

    clients: KafkaClients
    codec: Codec
    topics: TopicNames
    queue: int = DEFAULT_STREAM_QUEUE
    _partitions: int = field(init=False, default=0)
    _streams: dict[UUID, set[HubStream]] = field(init=False, default_factory=dict)
    _next: dict[str, dict[int, int]] = field(
        init=False, default_factory=lambda: {"e": {}, "d": {}}
    )
    _consumers: dict[str, Any] = field(init=False, default_factory=dict)
    _tasks: list[asyncio.Task[None]] = field(init=False, default_factory=list)
    _deltas_read: asyncio.Event = field(init=False, default_factory=asyncio.Event)
    undecodable: int = field(init=False, default=0)

    @property
    def streams(self) -> int:
        """Streams open now."""
        return sum(len(s) for s in self._streams.values())

    def partition_of(self, loop_id: UUID) -> int:
        """The partition of ``loop_id`` on the co-partitioned topics."""
        return partition_for(loop_key(loop_id), self._partitions)

    def position(self, loop_id: UUID) -> Cursor:
        """Where the hub stands on ``loop_id``'s partition (a start cursor).

        A stream ``after`` it gets every record the hub reads from now on.
        """
        partition = self.partition_of(loop_id)
        return Cursor(partition, self._next["e"][partition], self._next["d"][partition])

    async def start(self) -> None:
        """Start both consumers at the topics' ends.

        Raises:
            ConfigError: a topic does not exist.
            TransportError: Kafka could not be reached in time.
        """
        topics = (self.topics.events, self.topics.deltas)
        counts = await partition_counts(
            self.clients, topics, {t: "Read" for t in topics}
        )
        self._partitions = counts[self.topics.events]
        seconds = self.clients.connection.connect_timeout
        for kind, topic, committed in (
            ("d", self.topics.deltas, False),
            ("e", self.topics.events, True),
        ):
            consumer = self.clients.consumer(
                "hub",
                read_committed=committed,
                auto_offset_reset="latest",
                # A commit marker moves the journal's last stable offset but
                # adds no bytes: without this the broker holds the fetch for
                # aiokafka's default 500 ms before committed events show.
                fetch_max_wait_ms=_FETCH_MS,
            )
            await self.clients.start(
                consumer, operation="start stream hub", seconds=seconds
            )
            self._consumers[kind] = consumer
            assigned = [TopicPartition(topic, p) for p in range(counts[topic])]
            consumer.assign(assigned)
            try:
                async with asyncio.timeout(self.clients.connection.request_timeout):
                    await consumer.seek_to_end(*assigned)
                    for tp in assigned:
                        self._next[kind][tp.partition] = int(
                            await consumer.position(tp)
                        )
            except (TimeoutError, KafkaError) as exc:
                await self.close()
                raise transport_error(f"position the hub on {topic}", exc) from exc
        self._tasks = [
            asyncio.create_task(self._pump("d"), name="hub-deltas"),
            asyncio.create_task(self._pump("e"), name="hub-events"),
        ]

    async def close(self) -> None:
        """Stop the consumers; every open stream ends."""
        await cancel_and_wait(self._tasks)
        self._tasks = []
        for streams in list(self._streams.values()):
            for stream in list(streams):
                await stream.close()
        seconds = self.clients.connection.request_timeout
        for consumer in self._consumers.values():
            await stop_client(consumer, seconds=seconds)
        self._consumers = {}

    async def open(
        self,
        loop_id: UUID,
        *,
        after: Cursor | None = None,
        turn_start: bool = False,
        queue: int | None = None,
    ) -> HubStream:
        """A stream of ``loop_id``: after ``after`` (or the running turn, or now).

        ``queue``: this stream's queue size (the hub's by default).

        Raises:
            InvalidCursorError: ``after`` is of another partition.
            TransportError: the catch-up could not start in time.
        """
        partition = self.partition_of(loop_id)
        min_turn: int | None = None
        if after is not None:
            check_cursor(after, partition)
            start = after
        elif turn_start:
            start, min_turn = await start_cursor(
                self.clients,
                self.codec,
                self.topics,
                loop_id,
                partition,
                turn_start=True,
            )
        else:
            start = None
        here = self.position(loop_id)
        if start is None:
            start = here
        catch_up = None
        if start.events < here.events or start.deltas < here.deltas:
            catch_up = Attachment(
                clients=self.clients,
                codec=self.codec,
                topics=self.topics,
                loop_id=loop_id,
                start=start,
                min_turn_index=min_turn,
                until=(max(start.events, here.events), max(start.deltas, here.deltas)),
            )
        stream = HubStream(self, loop_id, start, catch_up, queue or self.queue)
        # Registered before any await: every hub item after ``here`` reaches it.
        self._streams.setdefault(loop_id, set()).add(stream)
        if catch_up is not None:
            try:
                await catch_up.open()
            except BaseException:
                await stream.close()
                raise
        return stream

    def forget(self, stream: HubStream) -> None:
        """Unregister ``stream`` (closed or dropped)."""
        streams = self._streams.get(stream.loop_id)
        if streams is not None:
            streams.discard(stream)
            if not streams:
                del self._streams[stream.loop_id]

    # ------------------------------------------------------------ internals

    async def _pump(self, kind: Literal["e", "d"]) -> None:
        consumer = self._consumers[kind]
        decode: Callable[[bytes], AnyEvent] = (
            self.codec.unmarshal_event
            if kind == "e"
            else self.codec.unmarshal_ephemeral
        )
        positions = self._next[kind]
        while True:
            try:
                batch = await consumer.getmany(timeout_ms=_FETCH_MS)
            except KafkaError as exc:
                self._read_failed(exc)
                await asyncio.sleep(_RETRY_S)
                continue
            if kind == "e" and batch:
                await self._deltas_caught_up()
            for tp, records in batch.items():
                for record in records:
                    positions[tp.partition] = record.offset + 1
                    self._dispatch(kind, tp.partition, record, decode)
            if kind == "d":
                self._deltas_read.set()

    def _read_failed(self, exc: BaseException) -> None:
        denied = authorization_error(
            exc,
            security=self.clients.security,
            operation="read the streams",
            permission="Read",
        )
        if denied is not None:
            _log.error("stream hub denied", extra={"error": str(denied)})
        else:
            _log.warning(
                "stream hub read failed", extra={"exc_type": type(exc).__name__}
            )

    def _dispatch(
        self,
        kind: Literal["e", "d"],
        partition: int,
        record: Any,
        decode: Callable[[bytes], AnyEvent],
    ) -> None:
        loop_id = parse_loop_key(record.key)
        streams = None if loop_id is None else self._streams.get(loop_id)
        if not streams or record.value is None:
            return
        try:
            event = decode(record.value)
        except DecodeError:
            self.undecodable += 1
            return
        item = Streamed(
            event,
            Cursor(
                partition, self._next["e"][partition], self._next["d"][partition], kind
            ),
        )
        for stream in list(streams):
            stream.offer(item)

    async def _deltas_caught_up(self) -> None:
        """Wait (bounded) until the deltas are read up to their end as it is now.

        Only the order across topics depends on it: past the request timeout
        the journal batch is handed out anyway.
        """
        consumer = self._consumers["d"]
        tps = [TopicPartition(self.topics.deltas, p) for p in range(self._partitions)]
        try:
            async with asyncio.timeout(self.clients.connection.request_timeout):
                ends = await consumer.end_offsets(tps)
                while any(
                    self._next["d"][tp.partition] < int(end) for tp, end in ends.items()
                ):
                    self._deltas_read.clear()
                    await self._deltas_read.wait()
        except (TimeoutError, KafkaError) as exc:
            self._read_failed(exc)
