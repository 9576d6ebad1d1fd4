"""Attach to one loop's stream from a cursor: replay what was missed, then go live.

Owns :class:`Attachment` (an async iterator of
:data:`~turnstream.kafka.client.cursor.AttachItem`) and :func:`start_cursor`,
which finds where "now" or "the start of the running turn" is. A client of
:class:`~turnstream.kafka.client.session.KafkaSession` (which opens it, see
:meth:`~turnstream.kafka.client.session.KafkaSession.attach`); part of
``turnstream.kafka``, imports the wire codec and value types.

An attachment reads the loop's partition of both topics with its own two
consumers, each from the cursor's offset: the journal ``read_committed`` (an
aborted transaction of a killed actor never shows), the deltas
``read_uncommitted`` (deltas are sent outside transactions). Each item is
yielded with the cursor just after it, so resuming from the last cursor seen
(in this process or another) gives no gap and no duplicate. Nothing ends the
stream but :meth:`Attachment.close` (or ``until``, for a bounded catch-up).

Order: within each topic, the log order. Across them, a journal event is
yielded only once the deltas were read up to their end as it was *after* the
journal event was fetched; the actor acknowledges a step's deltas before it
commits the step (``DeltaPublisher.settle``), so a step's tokens come before
its ``StepDone`` on a single-replica deltas topic. A delta may still come
before the ``TurnStarted`` of its turn.

Deltas after the cursor that have expired (the deltas topic's retention) are
reported once with :class:`~turnstream.kafka.client.cursor.DeltasExpired` and
the stream goes on from the oldest delta kept; the journal is complete. This
is checked when the attachment opens (an attachment that itself falls a
retention period behind is not told). ``turn_start`` reads the loop's
partition of the journal from its start to find the running turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Literal, Self
from uuid import UUID

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from turnstream.errors import DecodeError, InvalidCursorError, TransportError
from turnstream.events import (
    AnyEvent,
    TurnDone,
    TurnFailed,
    TurnInterrupted,
    TurnStarted,
)
from turnstream.kafka.client.cursor import AttachItem, Cursor, DeltasExpired, Streamed
from turnstream.kafka.clients import KafkaClients, stop_client
from turnstream.kafka.diagnose import authorization_error
from turnstream.kafka.faults import transport_error
from turnstream.kafka.reader import read_journal
from turnstream.kafka.records import parse_loop_key
from turnstream.kafka.topology import TopicNames
from turnstream.runtime.supervision import cancel_and_wait
from turnstream.wire import Codec

__all__ = ["DEFAULT_ATTACH_CAPACITY", "Attachment", "check_cursor", "start_cursor"]

_log = logging.getLogger(__name__)

DEFAULT_ATTACH_CAPACITY = 1000
"""Items buffered before an attachment stops fetching (its back-pressure)."""
_FETCH_MS = 100
_RETRY_S = 0.5
_CLOCK_SLACK = timedelta(seconds=1)
"""How far before a turn's ``TurnStarted`` its deltas are looked for."""


async def _bounded(seconds: float, operation: str, call: Any) -> Any:
    try:
        async with asyncio.timeout(seconds):
            return await call
    except (TimeoutError, KafkaError) as exc:
        raise transport_error(operation, exc) from exc


async def start_cursor(
    clients: KafkaClients,
    codec: Codec,
    topics: TopicNames,
    loop_id: UUID,
    partition: int,
    *,
    turn_start: bool,
) -> tuple[Cursor, int | None]:
    """Where to attach when no cursor is given.

    With ``turn_start`` false: the ends of both topics (live from now). With
    it: the running turn's ``TurnStarted`` in the journal and, in the deltas,
    the first record stamped from a second before it (the actor's clock
    stamps both); deltas of earlier turns are then skipped by their
    ``turn_index``, returned second. Without a running turn: the ends.

    Raises:
        TransportError: the topics could not be read in time.
    """
    tp_e = TopicPartition(topics.events, partition)
    tp_d = TopicPartition(topics.deltas, partition)
    seconds = clients.connection.request_timeout
    consumer = clients.consumer("attach-start", read_committed=True)
    await clients.start(consumer, operation="start reader", seconds=seconds)
    try:
        ends = await _bounded(
            seconds, "read the stream ends", consumer.end_offsets([tp_e, tp_d])
        )
        end = Cursor(partition, int(ends[tp_e]), int(ends[tp_d]))
        if not turn_start:
            return end, None
        entries = await read_journal(clients, codec, tp_e, loops=(loop_id,))
        running = None
        for entry in entries:
            if isinstance(entry.event, TurnStarted):
                running = entry
            elif isinstance(entry.event, TurnDone | TurnFailed | TurnInterrupted):
                running = None
        if running is None or not isinstance(running.event, TurnStarted):
            return end, None
        stamped = running.event.header.created_at
        deltas = end.deltas
        if stamped is not None:
            millis = int((stamped - _CLOCK_SLACK).timestamp() * 1000)
            found = await _bounded(
                seconds,
                "find the turn's first deltas",
                consumer.offsets_for_times({tp_d: millis}),
            )
            hit = found.get(tp_d)
            if hit is not None:
                deltas = int(hit.offset)
        return Cursor(partition, running.offset, deltas), running.event.turn_index
    finally:
        await stop_client(consumer, seconds=seconds)


class Attachment:
    """One loop's stream from a cursor (see module docstring).

    Open it with :meth:`open` (``KafkaSession.attach`` does); iterate it;
    close it (``async with`` or :meth:`close`). ``cursor`` is the position
    after the last item yielded: keep it to resume.

    Args:
        clients: builds the two consumers.
        codec: decodes records.
        topics: the topic set.
        loop_id: the loop.
        start: resume after this position.
        min_turn_index: skip deltas of turns before this index.
        until: stop once both topics are read up to these offsets
            (``(events, deltas)``): a bounded catch-up, ended by
            ``StopAsyncIteration``.
        capacity: items buffered before fetching pauses.
    """

    def __init__(
        self,
        *,
        clients: KafkaClients,
        codec: Codec,
        topics: TopicNames,
        loop_id: UUID,
        start: Cursor,
        min_turn_index: int | None = None,
        until: tuple[int, int] | None = None,
        capacity: int = DEFAULT_ATTACH_CAPACITY,
    ) -> None:
        self._clients = clients
        self._codec = codec
        self.loop_id = loop_id
        self._tp_e = TopicPartition(topics.events, start.partition)
        self._tp_d = TopicPartition(topics.deltas, start.partition)
        self._start = start
        self._min_turn = min_turn_index
        self._until = until
        self._capacity = capacity
        self._items: deque[AttachItem] = deque()
        self._wake = asyncio.Event()
        self._space = asyncio.Event()
        self._deltas_read = asyncio.Event()
        self._e_next = start.events
        self._d_next = start.deltas
        self._d_position = start.deltas
        self._cursor = start
        self._consumers: list[Any] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._finished: set[str] = set()
        self._failure: BaseException | None = None
        self._closed = False
        self.undecodable = 0

    @property
    def cursor(self) -> Cursor:
        """The position after the last item yielded (the start before any)."""
        return self._cursor

    # ------------------------------------------------------------ lifecycle

    async def open(self) -> Self:
        """Start the consumers at the cursor and the two reader tasks.

        Raises:
            TransportError: the topics could not be reached in time.
            KafkaAuthorizationError: Read is denied on a topic.
        """
        seconds = self._clients.connection.connect_timeout
        try:
            for committed in (True, False):
                consumer = self._clients.consumer(
                    "attach",
                    read_committed=committed,
                    auto_offset_reset="earliest",
                    fetch_max_wait_ms=_FETCH_MS,  # see StreamHub.start
                )
                await self._clients.start(
                    consumer, operation="start stream reader", seconds=seconds
                )
                self._consumers.append(consumer)
            journal, deltas = self._consumers
            earliest = await _bounded(
                self._clients.connection.request_timeout,
                "read the oldest delta kept",
                deltas.beginning_offsets([self._tp_d]),
            )
            oldest = int(earliest[self._tp_d])
            if self._d_next < oldest:
                self._d_next = self._d_position = oldest
                self._push(
                    DeltasExpired(
                        requested=self._start.deltas,
                        earliest=oldest,
                        cursor=Cursor(self._tp_d.partition, self._e_next, oldest),
                    )
                )
            # assign and seek with no await between: no offset reset can run.
            journal.assign([self._tp_e])
            journal.seek(self._tp_e, self._e_next)
            deltas.assign([self._tp_d])
            deltas.seek(self._tp_d, self._d_next)
        except BaseException:
            await self.close()
            raise
        self._tasks = [
            asyncio.create_task(self._guard("deltas", self._read_deltas, deltas)),
            asyncio.create_task(self._guard("events", self._read_events, journal)),
        ]
        return self

    async def close(self) -> None:
        """Stop reading (idempotent); iteration ends."""
        if self._closed:
            return
        self._closed = True
        await cancel_and_wait(self._tasks)
        seconds = self._clients.connection.request_timeout
        for consumer in self._consumers:
            await stop_client(consumer, seconds=seconds)
        self._wake.set()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # -------------------------------------------------------------- reading

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> AttachItem:
        while True:
            if self._items:
                item = self._items.popleft()
                if len(self._items) < self._capacity:
                    self._space.set()
                self._cursor = item.cursor
                return item
            if self._failure is not None:
                raise self._failure
            if self._closed or len(self._finished) == 2:
                raise StopAsyncIteration
            self._wake.clear()
            await self._wake.wait()

    # ------------------------------------------------------------ internals

    def _push(self, item: AttachItem) -> None:
        self._items.append(item)
        self._wake.set()

    async def _room(self) -> None:
        while len(self._items) >= self._capacity and not self._closed:
            self._space.clear()
            await self._space.wait()

    async def _guard(
        self, name: str, body: Callable[[Any], Awaitable[None]], consumer: Any
    ) -> None:
        try:
            await body(consumer)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - handed to the iterating task
            self._failure = exc
        finally:
            self._finished.add(name)
            self._deltas_read.set()
            self._wake.set()

    async def _fetch(self, consumer: Any, tp: TopicPartition) -> list[Any]:
        try:
            batch = await consumer.getmany(tp, timeout_ms=_FETCH_MS)
        except KafkaError as exc:
            denied = authorization_error(
                exc,
                security=self._clients.security,
                operation=f"read {tp.topic}",
                permission="Read",
                resource=tp.topic,
            )
            if denied is not None:
                raise denied from exc
            _log.warning("stream read failed", extra={"exc_type": type(exc).__name__})
            await asyncio.sleep(_RETRY_S)
            return []
        return list(batch.get(tp, ()))

    def _mine(self, record: Any) -> bool:
        return record.value is not None and parse_loop_key(record.key) == self.loop_id

    async def _read_deltas(self, consumer: Any) -> None:
        limit = None if self._until is None else self._until[1]
        while limit is None or self._d_next < limit:
            await self._room()
            for record in await self._fetch(consumer, self._tp_d):
                if limit is not None and record.offset >= limit:
                    break
                self._d_next = record.offset + 1
                if self._mine(record):
                    event = self._decode(self._codec.unmarshal_ephemeral, record)
                    if event is not None and not self._earlier_turn(event):
                        self._push(Streamed(event, self._here("d")))
            self._d_position = max(self._d_next, await self._position(consumer))
            if limit is not None:
                self._d_position = min(self._d_position, limit)
                self._d_next = max(self._d_next, self._d_position)
            self._deltas_read.set()

    async def _read_events(self, consumer: Any) -> None:
        limit = None if self._until is None else self._until[0]
        while limit is None or self._e_next < limit:
            await self._room()
            records = await self._fetch(consumer, self._tp_e)
            if records:
                await self._deltas_caught_up()
            for record in records:
                if limit is not None and record.offset >= limit:
                    break
                self._e_next = record.offset + 1
                if self._mine(record):
                    event = self._decode(self._codec.unmarshal_event, record)
                    if event is not None:
                        self._push(Streamed(event, self._here("e")))
            position = await self._position(consumer)
            if limit is not None:
                position = min(position, limit)
            self._e_next = max(self._e_next, position)

    async def _deltas_caught_up(self) -> None:
        """Wait until the deltas are read up to their end as it is now.

        Only the order across topics depends on it: if the end cannot be read
        in time, the journal events go out without waiting.
        """
        if "deltas" in self._finished:
            return
        try:
            ends = await _bounded(
                self._clients.connection.request_timeout,
                "read the deltas end",
                self._consumers[1].end_offsets([self._tp_d]),
            )
        except TransportError:
            _log.warning("deltas end unknown; journal events not held back")
            return
        end = int(ends[self._tp_d])
        if self._until is not None:
            end = min(end, self._until[1])
        while self._d_position < end and "deltas" not in self._finished:
            self._deltas_read.clear()
            await self._deltas_read.wait()

    async def _position(self, consumer: Any) -> int:
        tp = self._tp_e if consumer is self._consumers[0] else self._tp_d
        return int(
            await _bounded(
                self._clients.connection.request_timeout,
                "read the stream position",
                consumer.position(tp),
            )
        )

    def _here(self, kind: Literal["e", "d"]) -> Cursor:
        return Cursor(self._tp_e.partition, self._e_next, self._d_next, kind)

    def _decode(self, decode: Any, record: Any) -> AnyEvent | None:
        try:
            event: AnyEvent = decode(record.value)
        except DecodeError:
            self.undecodable += 1
            return None
        return event

    def _earlier_turn(self, event: AnyEvent) -> bool:
        index = getattr(event, "turn_index", None)
        return (
            self._min_turn is not None
            and isinstance(index, int)
            and index < self._min_turn
        )


def check_cursor(cursor: Cursor, partition: int) -> None:
    """Refuse a cursor of another partition than the loop's.

    Raises:
        InvalidCursorError: it names another partition (reason ``other_loop``).
    """
    if cursor.partition != partition:
        raise InvalidCursorError("other_loop")
