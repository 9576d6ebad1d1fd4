"""A journal consumer for downstream services: every loop's events, at least once.

Owns :class:`JournalConsumer`, :class:`JournalRecord` and :data:`Start`. What a
billing, audit or search-indexing service needs, written once:

* a consumer in a consumer group (``group_id``) subscribed to the whole events
  topic -- every loop, every partition, shared between the group's members;
* ``read_committed``: only events of committed actor transactions (an aborted
  or crashed actor's writes are never seen);
* each record decoded with the wire codec and handed to an async handler as a
  :class:`JournalRecord` (the typed event, its partition, offset, loop id and
  broker timestamp), one at a time, in journal order per partition;
* **at-least-once**: offsets are committed only after the handler returned for
  every record of a fetched batch (``enable_auto_commit=False``); a crash
  re-delivers what was handled after the last commit, never skips a record;
* rebalance-safe: before partitions are revoked, what was handled on them is
  committed and nothing more of them is handed over, so the next owner starts
  exactly after the last handled record;
* the start position of a partition the group has no committed offset for:
  ``"earliest"`` (the beginning of the journal), ``"latest"`` (only new events)
  or a :class:`~datetime.datetime` (the first event at or after it, by broker
  timestamp). Once the group committed, it resumes from there.

Being idempotent (the handler may see an event twice after a crash or a
rebalance): every journal event has a unique ``header.event_id`` (the actor
writes each exactly once, in a transaction), and a record's ``(partition,
offset)`` is stable too. Either make the effect keyed by the event id (an
upsert, a unique constraint) or store the handled offset with the effect.

Never imports the actor or admin side; the only aiokafka user here is through
:mod:`turnstream.kafka.clients`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Self
from uuid import UUID

from aiokafka import ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError

from turnstream.errors import DecodeError
from turnstream.events import EnduringEvent
from turnstream.kafka.clients import KafkaClients, stop_client
from turnstream.kafka.connection import KafkaConnection
from turnstream.kafka.faults import transport_error
from turnstream.kafka.records import parse_loop_key
from turnstream.kafka.security import KafkaSecurity
from turnstream.kafka.topology import TopicNames
from turnstream.wire import Codec, default_codec

__all__ = ["Handler", "JournalConsumer", "JournalRecord", "Start"]

_log = logging.getLogger(__name__)

Start = Literal["earliest", "latest"] | datetime
"""Where a partition without a committed offset starts."""


@dataclass(frozen=True, slots=True)
class JournalRecord:
    """One journal event with where it is.

    Attributes:
        event: the decoded, validated event.
        partition: its events partition.
        offset: its offset there (stable: the journal is append-only).
        loop_id: the loop (the record key).
        timestamp: the broker timestamp, in milliseconds since the epoch.
    """

    event: EnduringEvent
    partition: int
    offset: int
    loop_id: UUID | None
    timestamp: int


Handler = Callable[[JournalRecord], Awaitable[None]]
"""What the consumer calls for each record; its return acknowledges it."""


class JournalConsumer:
    """Hands every journal event to ``handler``, at least once (module docstring).

    Run it with :meth:`run` (returns after :meth:`stop`) or ``async with``
    (runs in the background until the block ends). A handler exception stops
    the consumer and is raised from :meth:`run`; the record it failed on is not
    committed, so it is delivered again next time.
    """

    def __init__(
        self,
        handler: Handler,
        *,
        clients: KafkaClients,
        group_id: str,
        topics: TopicNames | None = None,
        codec: Codec | None = None,
        start: Start = "earliest",
        skip_undecodable: bool = False,
        max_records: int = 500,
        poll_ms: int = 200,
    ) -> None:
        self._handler = handler
        self._clients = clients
        self._group_id = group_id
        self._topic = (topics or TopicNames()).events
        self._codec = codec or default_codec()
        self._start = start
        self._skip_undecodable = skip_undecodable
        self._max_records = max_records
        self._poll_ms = poll_ms
        self._consumer: Any = None
        self._handled: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._revoked: set[TopicPartition] = set()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.handled = 0
        self.skipped = 0

    @classmethod
    def connect(
        cls,
        bootstrap: str,
        handler: Handler,
        *,
        group_id: str,
        topic_prefix: str = "",
        security: KafkaSecurity | None = None,
        request_timeout: float = 15.0,
        **options: Any,
    ) -> JournalConsumer:
        """A consumer for ``bootstrap`` (``options`` as the constructor's).

        ``topic_prefix`` names a prefixed topic set (ignored with ``topics=``).
        """
        if topic_prefix and "topics" not in options:
            options["topics"] = TopicNames.with_affixes(prefix=topic_prefix)
        clients = KafkaClients(
            connection=KafkaConnection(
                bootstrap=bootstrap, request_timeout=request_timeout
            ),
            security=security or KafkaSecurity(),
            client_id="turnstream-journal",
        )
        return cls(handler, clients=clients, group_id=group_id, **options)

    # ------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        """Consume until :meth:`stop`; commit what was handled; close.

        Raises:
            DecodeError: an undecodable record (unless ``skip_undecodable``).
            TransportError: Kafka could not be reached, or a commit failed.
            Exception: whatever the handler raised.
        """
        reset = self._start if isinstance(self._start, str) else "earliest"
        consumer = self._clients.consumer(
            "journal",
            group_id=self._group_id,
            read_committed=True,
            auto_offset_reset=reset,
            max_poll_records=self._max_records,
        )
        self._consumer = consumer
        await self._clients.start(consumer, operation="start journal consumer")
        try:
            consumer.subscribe([self._topic], listener=_Listener(self))
            while not self._stopping.is_set():
                await self._round(consumer)
            await self._commit()
        finally:
            await stop_client(
                consumer, seconds=self._clients.connection.request_timeout
            )
            self._consumer = None

    def stop(self) -> None:
        """Ask :meth:`run` to return after the record being handled."""
        self._stopping.set()

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self.run(), name="journal-consumer")
        return self

    async def __aexit__(self, *_: object) -> None:
        self.stop()
        if self._task is not None:
            await self._task

    @property
    def positions(self) -> dict[int, int]:
        """Per partition: the offset after the last handled record."""
        return {tp.partition: offset for tp, offset in self._handled.items()}

    # -------------------------------------------------------------- reading

    async def _round(self, consumer: Any) -> None:
        fetch = asyncio.ensure_future(
            consumer.getmany(timeout_ms=self._poll_ms, max_records=self._max_records)
        )
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({fetch, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if not fetch.done():
            fetch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await fetch
            return
        try:
            batch = fetch.result()
        except KafkaError as exc:
            raise transport_error(
                "read the journal",
                exc,
                security=self._clients.security,
                permission="Read",
            ) from exc
        for tp, records in batch.items():
            for record in records:
                if tp in self._revoked or self._stopping.is_set():
                    break
                await self._handle(tp, record)
        await self._commit()

    async def _handle(self, tp: TopicPartition, record: Any) -> None:
        if record.value is not None:
            try:
                event = self._codec.unmarshal_event(record.value)
            except DecodeError:
                if not self._skip_undecodable:
                    raise
                self.skipped += 1
                _log.warning(
                    "undecodable journal record skipped",
                    extra={"partition": tp.partition, "offset": record.offset},
                )
            else:
                await self._handler(
                    JournalRecord(
                        event=event,
                        partition=tp.partition,
                        offset=record.offset,
                        loop_id=parse_loop_key(record.key),
                        timestamp=record.timestamp,
                    )
                )
                self.handled += 1
        if tp not in self._revoked:
            self._handled[tp] = record.offset + 1

    async def _commit(self, only: set[TopicPartition] | None = None) -> None:
        consumer = self._consumer
        if consumer is None:
            return
        owned = consumer.assignment()
        due = {
            tp: offset
            for tp, offset in self._handled.items()
            if self._committed.get(tp) != offset
            and tp in owned
            and (only is None or tp in only)
        }
        if not due:
            return
        try:
            async with asyncio.timeout(self._clients.connection.request_timeout):
                await consumer.commit(due)
        except CommitFailedError:
            # The group moved on (this member was fenced): the new owner re-reads
            # from the last commit that succeeded. At least once still holds.
            _log.warning("journal commit refused by the group; records may repeat")
            return
        except (TimeoutError, KafkaError) as exc:
            raise transport_error(
                "commit journal offsets",
                exc,
                security=self._clients.security,
                permission="Read",
            ) from exc
        self._committed.update(due)

    # ----------------------------------------------------------- rebalances

    async def _revoked_partitions(self, revoked: set[TopicPartition]) -> None:
        self._revoked |= revoked
        with contextlib.suppress(KafkaError):
            await self._commit(only=revoked)
        for tp in revoked:
            self._handled.pop(tp, None)
            self._committed.pop(tp, None)

    async def _assigned_partitions(self, assigned: set[TopicPartition]) -> None:
        self._revoked -= assigned
        if not isinstance(self._start, datetime) or self._consumer is None:
            return
        consumer = self._consumer
        fresh = [tp for tp in assigned if await consumer.committed(tp) is None]
        if not fresh:
            return
        millis = int(self._start.timestamp() * 1000)
        found = await consumer.offsets_for_times(dict.fromkeys(fresh, millis))
        ends = await consumer.end_offsets(fresh)
        for tp in fresh:
            at = found.get(tp)
            consumer.seek(tp, at.offset if at is not None else ends[tp])


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]  # untyped aiokafka base
    def __init__(self, owner: JournalConsumer) -> None:
        self._owner = owner

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._owner._revoked_partitions(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self._owner._assigned_partitions(set(assigned))
