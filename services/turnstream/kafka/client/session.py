"""The Session API over Kafka: a client of the loop-actor service.

Owns :class:`KafkaSession`. It implements the runtime's
:class:`~turnstream.runtime.session.Session` protocol without running any loop:

* commands go to ``turnstream.commands.v1`` through an idempotent ``acks=all``
  producer, keyed by loop id; ``submit`` returns the command id once the
  broker acknowledged the record (the outcome arrives later as an event whose
  ``reply_to()`` is that id);
* live events come from a background reader started by :meth:`KafkaSession.connect`:
  every events partition assigned at its end (``read_committed``) merged with
  every deltas partition at its end (``read_uncommitted``), decoded with the
  codec and offered to each subscription (bounded; the runtime's overflow
  rules: a full buffer drops ephemeral events and fails the subscription on
  an enduring one). A subscription gets every event the reader fetches after
  it was made: everything committed later, and possibly a few events committed
  just before that the reader had not fetched yet. Across the two topics there
  is no order between deltas and journal events. Each event comes with the
  cursor just after it (:class:`~turnstream.kafka.client.live.CursorSubscription`:
  ``subscription.cursor``, ``subscription.cursor_for(loop_id)``), so a client
  that read part of a stream resumes with :meth:`KafkaSession.attach`;
* history is a separate read: :meth:`KafkaSession.replay` scans the loop's
  events partition up to the last stable offset, filtered by key;
* submit and wait: :meth:`KafkaSession.submit_and_wait` and
  :meth:`KafkaSession.submit_turn` follow one input to its outcome (see
  :mod:`turnstream.kafka.client.turns`); :meth:`KafkaSession.follow` follows
  one sent earlier (by this session, or with its loop id);
* resumable streams: :meth:`KafkaSession.attach` reads one loop's journal
  and deltas from a cursor (see :mod:`turnstream.kafka.client.attach`), every
  item with the cursor after it.

The reader tasks belong to the session object: :meth:`KafkaSession.close`
cancels and awaits them, then stops the clients. Every network call is bounded
by the connection's timeouts. Part of ``turnstream.kafka``; imports the runtime
(protocol types) and the wire codec.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Self
from uuid import UUID

from aiokafka import TopicPartition
from aiokafka.errors import (
    InvalidProducerEpoch,
    KafkaError,
    MessageSizeTooLargeError,
    OutOfOrderSequenceNumber,
    RecordTooLargeError,
    UnknownProducerId,
)

from turnstream.commands import (
    AnyCommand,
    DeleteLoop,
    Interrupt,
    RespondGate,
    Retract,
    Shutdown,
)
from turnstream.commands import SubmitInput as SubmitCommand
from turnstream.content import Block, TextBlock, UserMessage
from turnstream.errors import (
    CommandNotConfirmedError,
    CommandTooLargeError,
    DecodeError,
    SessionError,
    TransportError,
    UnknownCommandError,
)
from turnstream.events import (
    Agency,
    AnyEvent,
    EnduringEvent,
    GateOpened,
    LoopDeleted,
    LoopIdle,
    TurnDone,
    TurnFailed,
    TurnInterrupted,
    TurnRejected,
    TurnStarted,
)
from turnstream.ids import CommandId, GateId, LoopId, SessionId, TurnId
from turnstream.kafka.client.attach import (
    DEFAULT_ATTACH_CAPACITY,
    Attachment,
    check_cursor,
    start_cursor,
)
from turnstream.kafka.client.cursor import Cursor, Kind
from turnstream.kafka.client.live import CursorSubscription, LivePositions, Position
from turnstream.kafka.client.turns import DEFAULT_RESYNC, Turn, TurnOutcome
from turnstream.kafka.clients import KafkaClients, start_client, stop_client
from turnstream.kafka.connection import KafkaConnection
from turnstream.kafka.diagnose import authorization_error
from turnstream.kafka.errors import KafkaAuthorizationError
from turnstream.kafka.faults import transport_error
from turnstream.kafka.reader import JournalEntry, read_journal
from turnstream.kafka.records import loop_key, partition_for
from turnstream.kafka.security import KafkaSecurity
from turnstream.kafka.topology import (
    COMMAND_RECORD_OVERHEAD,
    MAX_COMMAND_BYTES,
    TopicNames,
    partition_counts,
)
from turnstream.runtime.input_queue import SEEN_WINDOW
from turnstream.runtime.ports import Clock, IdSource, RandomIds, SystemClock
from turnstream.runtime.session import Session
from turnstream.runtime.subscription import (
    DEFAULT_SUBSCRIBER_CAPACITY,
    EventFilter,
    LoopScope,
    Subscription,
)
from turnstream.runtime.tracing import TRACEPARENT
from turnstream.wire import Codec, default_codec

_BROKEN_PRODUCER = (OutOfOrderSequenceNumber, UnknownProducerId, InvalidProducerEpoch)
"""Producer errors no retry recovers from: the producer itself must be replaced."""

__all__ = ["Content", "KafkaSession"]

_log = logging.getLogger(__name__)
_FETCH_MS = 100

Content = str | Sequence[Block] | UserMessage
"""What a submit accepts: text, blocks, or a ready user message."""


def _as_message(content: Content) -> UserMessage:
    if isinstance(content, UserMessage):
        return content
    if isinstance(content, str):
        return UserMessage(blocks=(TextBlock(text=content),))
    return UserMessage(blocks=tuple(content))


def _record_size(value: bytes, key: bytes, headers: Sequence[tuple[str, bytes]]) -> int:
    """A one-record batch's size as the broker counts it (an upper bound)."""
    header_bytes = sum(len(name.encode()) + len(data) for name, data in headers)
    return len(value) + len(key) + header_bytes + COMMAND_RECORD_OVERHEAD


class KafkaSession:
    """A session whose loops run in the loop-actor service (see module docstring).

    Create it with :meth:`connect`; close it with :meth:`close` (or ``async
    with``).
    """

    def __init__(
        self,
        *,
        clients: KafkaClients,
        topics: TopicNames,
        codec: Codec,
        session_id: SessionId,
        active_loop: LoopId,
        partitions: int,
        clock: Clock,
        ids: IdSource,
        capacity: int,
        max_command_bytes: int = MAX_COMMAND_BYTES,
        trace_source: Callable[[], str | None] | None = None,
    ) -> None:
        self._clients = clients
        self._trace_source = trace_source
        self._max_command_bytes = max_command_bytes
        self._topics = topics
        self._codec = codec
        self._session_id = session_id
        self._active = active_loop
        self._partitions = partitions
        self._clock = clock
        self._ids = ids
        self._capacity = capacity
        self._producer: Any = None
        self._producer_broken = False
        self._readers: list[Any] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._subscriptions: list[Subscription] = []
        self._positions: LivePositions | None = None
        self._submitted: OrderedDict[CommandId, LoopId] = OrderedDict()
        self._gates: OrderedDict[UUID, LoopId] = OrderedDict()
        self._closed = False
        self.undecodable = 0

    # ------------------------------------------------------------ lifecycle

    @classmethod
    async def connect(
        cls,
        bootstrap: str | None = None,
        *,
        clients: KafkaClients | None = None,
        security: KafkaSecurity | None = None,
        topics: TopicNames | None = None,
        session_id: SessionId | None = None,
        loop_id: LoopId | None = None,
        codec: Codec | None = None,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        request_timeout: float = 15.0,
        capacity: int = DEFAULT_SUBSCRIBER_CAPACITY,
        max_command_bytes: int = MAX_COMMAND_BYTES,
        live: bool = True,
        trace_source: Callable[[], str | None] | None = None,
    ) -> KafkaSession:
        """Connect: start the command producer and the live reader.

        Args:
            bootstrap: ``host:port`` list (or pass ``clients``).
            clients: a prepared client factory (overrides ``bootstrap`` and
                ``security``).
            security: TLS/SASL settings for every client.
            topics: the topic set.
            session_id: the session (a new one by default).
            loop_id: the active loop (a new one by default: the service creates
                a loop on its first input).
            codec: the codec (the process default by default).
            clock: stamps commands.
            ids: mints command ids.
            request_timeout: seconds per Kafka call.
            capacity: default subscription buffer size.
            max_command_bytes: the largest command record to send: the
                commands topic's ``max.message.bytes`` (1 MiB as ``topics
                apply`` makes it); a larger one raises
                :class:`~turnstream.errors.CommandTooLargeError` unsent.
            live: start the live reader (``False``: a sender only, e.g. the
                gateway, whose streams come from a
                :class:`~turnstream.kafka.client.hub.StreamHub`; subscriptions
                then see nothing).
            trace_source: gives the caller's current ``traceparent`` (or
                ``None``) for each submit; :func:`turnstream.client.connect`
                passes OpenTelemetry's current span when the SDK is installed.

        Raises:
            ConfigError: bad settings, or the topics do not exist.
            TransportError: Kafka could not be reached in time.
        """
        if clients is None:
            if bootstrap is None:
                raise SessionError("not_connected", "no bootstrap servers given")
            clients = KafkaClients(
                connection=KafkaConnection(
                    bootstrap=bootstrap, request_timeout=request_timeout
                ),
                security=security or KafkaSecurity(),
                client_id="turnstream-session",
            )
        topics = topics or TopicNames()
        ids = ids or RandomIds()
        counts = await partition_counts(
            clients,
            (topics.commands, topics.events, topics.deltas),
            {topics.commands: "Write", topics.events: "Read", topics.deltas: "Read"},
        )
        session = cls(
            clients=clients,
            topics=topics,
            codec=codec or default_codec(),
            session_id=session_id or SessionId(ids.new_id()),
            active_loop=loop_id or LoopId(ids.new_id()),
            partitions=counts[topics.commands],
            clock=clock or SystemClock(),
            ids=ids,
            capacity=capacity,
            max_command_bytes=max_command_bytes,
            trace_source=trace_source,
        )
        try:
            await session._start(counts, live=live)
        except BaseException:
            await session.close()
            raise
        return session

    async def _renew_producer(self) -> None:
        """Replace a producer whose sequence state broke (see :meth:`send`).

        A start that fails (the broker is not back yet) leaves the old one in
        place; the next send tries again.
        """
        seconds = self._clients.connection.connect_timeout
        producer = self._clients.idempotent_producer("session")
        try:
            await start_client(
                producer,
                seconds=seconds,
                operation="start producer",
                security=self._clients.security,
            )
        except TransportError:
            return  # the broker is not back yet: the next send tries again
        old, self._producer = self._producer, producer
        self._producer_broken = False
        if old is not None:
            await stop_client(old, seconds=seconds)
        _log.info("commands producer renewed after a sequence error")

    async def _start(self, counts: dict[str, int], *, live: bool = True) -> None:
        seconds = self._clients.connection.connect_timeout
        producer = self._clients.idempotent_producer("session")
        try:
            await start_client(
                producer,
                seconds=seconds,
                operation="start producer",
                security=self._clients.security,
            )
        except TransportError as exc:
            # Since Kafka 3.0 an idempotent producer's InitProducerId needs
            # Write on some topic: name the one it writes, not the cluster.
            denied = authorization_error(
                exc.__cause__ or exc,
                security=self._clients.security,
                operation="start the commands producer",
                permission="Write",
                resource=self._topics.commands,
            )
            if denied is not None and denied.resource_type == "Cluster":
                denied = KafkaAuthorizationError(
                    principal=denied.principal,
                    permission="Write",
                    resource_type="Topic",
                    resource=self._topics.commands,
                    operation="start the commands producer",
                )
            if denied is not None:
                raise denied from exc
            raise
        self._producer = producer
        if not live:
            return
        positions = LivePositions(counts[self._topics.events])
        kinds: tuple[tuple[str, bool, Callable[[bytes], AnyEvent], Kind], ...] = (
            (self._topics.events, True, self._codec.unmarshal_event, "e"),
            (self._topics.deltas, False, self._codec.unmarshal_ephemeral, "d"),
        )
        pumps: list[tuple[Any, Callable[[bytes], AnyEvent], Kind, str]] = []
        for topic, committed, decode, kind in kinds:
            reader = self._clients.consumer(
                "live", read_committed=committed, auto_offset_reset="latest"
            )
            await start_client(
                reader,
                seconds=seconds,
                operation="start live reader",
                security=self._clients.security,
            )
            self._readers.append(reader)
            assigned = [TopicPartition(topic, p) for p in range(counts[topic])]
            reader.assign(assigned)
            try:
                async with asyncio.timeout(self._clients.connection.request_timeout):
                    await reader.seek_to_end(*assigned)
                    for tp in assigned:  # resolve the positions now: live from here
                        positions.start(
                            kind, tp.partition, int(await reader.position(tp))
                        )
            except (TimeoutError, KafkaError) as exc:
                denied = authorization_error(
                    exc,
                    security=self._clients.security,
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
        """End subscriptions, stop the reader tasks and the clients. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for subscription in self._subscriptions:
            subscription.end()
        seconds = self._clients.connection.request_timeout
        for reader in self._readers:
            await stop_client(reader, seconds=seconds)
        if self._producer is not None:
            await stop_client(self._producer, seconds=seconds)

    async def shutdown(self) -> None:
        """The Session protocol's shutdown: close this client (loops keep running)."""
        await self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ----------------------------------------------------------- live events

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
            self._remember(self._gates, event.gate_id, LoopId(event.header.loop_id))
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

    def subscribe_events(
        self, event_filter: EventFilter, *, capacity: int | None = None
    ) -> CursorSubscription:
        """Watch events committed (or streamed) from now on; no replay.

        Each event comes with the cursor just after it: after reading some,
        ``attach(loop_id, after=subscription.cursor_for(loop_id))`` (from this
        process or another) yields exactly the loop's events and tokens the
        subscription has not yielded yet (see
        :mod:`turnstream.kafka.client.live`).
        """
        if self._closed:
            raise SessionError("session_closing")
        subscription = CursorSubscription(
            event_filter, capacity or self._capacity, self._positions
        )
        self._subscriptions.append(subscription)
        return subscription

    # -------------------------------------------------------------- history

    @property
    def partitions(self) -> int:
        """The partition count of the co-partitioned topics."""
        return self._partitions

    def partition_of(self, loop_id: UUID) -> int:
        """The partition of ``loop_id`` on every co-partitioned topic."""
        return partition_for(loop_key(loop_id), self._partitions)

    async def replay_entries(
        self, loop_id: UUID, *, from_: int = 0
    ) -> list[JournalEntry]:
        """The loop's committed events with their offsets, from offset ``from_``.

        Raises:
            DecodeError: a record of the loop is not a valid event.
            TransportError: the journal could not be read in time.
        """
        tp = TopicPartition(self._topics.events, self.partition_of(loop_id))
        return await read_journal(
            self._clients, self._codec, tp, start=from_, loops=(loop_id,)
        )

    async def replay(self, loop_id: UUID, *, from_: int = 0) -> list[EnduringEvent]:
        """The loop's committed events (its journal), from offset ``from_``."""
        return [
            entry.event for entry in await self.replay_entries(loop_id, from_=from_)
        ]

    async def attach(
        self,
        loop_id: UUID,
        *,
        after: Cursor | str | None = None,
        turn_start: bool = False,
        capacity: int = DEFAULT_ATTACH_CAPACITY,
    ) -> Attachment:
        """Attach to a loop's stream: journal events and deltas, each with a cursor.

        Iterate the returned :class:`~turnstream.kafka.client.attach.Attachment`
        for :class:`~turnstream.kafka.client.cursor.Streamed` items (an event
        and the cursor after it) and, when tokens after the cursor have
        expired, one :class:`~turnstream.kafka.client.cursor.DeltasExpired`
        notice; close it when done. It never ends by itself.

        Args:
            loop_id: the loop.
            after: resume after this cursor (an item's ``cursor``, or its text
                form): every later item once, none before it, across actor
                takeovers and from any client process.
            turn_start: without ``after``: start at the running turn's
                ``TurnStarted`` (its tokens included), or live from now when no
                turn runs. Without either: live from now.
            capacity: items buffered before the attachment stops fetching.

        Raises:
            InvalidCursorError: ``after`` is malformed or of another loop's
                partition.
            TransportError: the topics could not be read in time.
            SessionError: the session is closed.
        """
        if self._closed:
            raise SessionError("session_closing")
        partition = self.partition_of(loop_id)
        min_turn: int | None = None
        if after is not None:
            start = Cursor.decode(after) if isinstance(after, str) else after
            check_cursor(start, partition)
        else:
            start, min_turn = await start_cursor(
                self._clients,
                self._codec,
                self._topics,
                loop_id,
                partition,
                turn_start=turn_start,
            )
        attachment = Attachment(
            clients=self._clients,
            codec=self._codec,
            topics=self._topics,
            loop_id=loop_id,
            start=start,
            min_turn_index=min_turn,
            capacity=capacity,
        )
        return await attachment.open()

    # ------------------------------------------------------------- commands

    @property
    def session_id(self) -> SessionId:
        """This session's id (stamped on every command)."""
        return self._session_id

    @property
    def active_loop(self) -> LoopId:
        """The loop :meth:`submit` targets by default."""
        return self._active

    def activate(self, loop_id: LoopId) -> None:
        """Make ``loop_id`` the default target of :meth:`submit`."""
        self._active = loop_id

    def _fields(
        self, loop_id: LoopId, agency: Agency, command_id: CommandId | None = None
    ) -> dict[str, object]:
        return {
            "command_id": command_id or CommandId(self._ids.new_id()),
            "session_id": self._session_id,
            "loop_id": loop_id,
            "created_at": self._clock.now(),
            "agency": agency,
        }

    async def send(
        self, command: AnyCommand, *, traceparent: str | None = None
    ) -> CommandId:
        """Send a prepared command; return its id once the broker has it.

        The record is keyed by the canonical text of its loop id and sent to
        the partition this session computes for that key (Kafka's default
        partitioner, as every client and the actors compute it), never one the
        producer's configuration picks: a command the session sends is never
        misrouted. It goes through an idempotent producer, so the producer's
        own retries never duplicate it.

        Raises:
            SessionError: the session is closed.
            CommandTooLargeError: the record is over ``max_command_bytes`` (or
                the broker refused its size): not sent, and a retry cannot help.
            CommandNotConfirmedError: the broker did not acknowledge it in time
                (it may still arrive; it carries the command id to retry with).
            KafkaAuthorizationError: an ACL denies Write on the commands topic.
        """
        if self._closed or self._producer is None:
            raise SessionError("session_closing")
        if self._producer_broken:
            await self._renew_producer()
        value = self._codec.marshal_command(command)
        key = loop_key(command.loop_id)
        headers = self._codec.kafka_headers(command)
        if traceparent is not None:
            headers.append((TRACEPARENT, traceparent.encode("ascii")))
        size = _record_size(value, key, headers)
        if size > self._max_command_bytes:
            raise CommandTooLargeError(
                command.command_id,
                command.loop_id,
                size=size,
                limit=self._max_command_bytes,
            )
        try:
            async with asyncio.timeout(self._clients.connection.request_timeout):
                await self._producer.send_and_wait(
                    self._topics.commands,
                    value,
                    key=key,
                    partition=partition_for(key, self._partitions),
                    headers=headers,
                )
        except (MessageSizeTooLargeError, RecordTooLargeError) as exc:
            # The topic takes less than this client was told: refused, never
            # stored, so "it may still arrive" would be wrong advice.
            raise CommandTooLargeError(
                command.command_id, command.loop_id, size=size, limit=None
            ) from exc
        except (TimeoutError, KafkaError) as exc:
            denied = authorization_error(
                exc,
                security=self._clients.security,
                operation="send a command",
                permission="Write",
                resource=self._topics.commands,
            )
            if denied is not None:  # refused, not lost: it never arrives
                raise denied from exc
            if isinstance(exc, _BROKEN_PRODUCER):
                # The idempotent producer's sequence state no longer matches
                # the broker's (seen after a broker restart): it would refuse
                # every later send. A fresh producer (new producer id) sends
                # the next attempt; a retry by command id is applied once.
                self._producer_broken = True
            reason = transport_error("send command", exc).reason
            raise CommandNotConfirmedError(
                command.command_id, command.loop_id, reason
            ) from exc
        return CommandId(command.command_id)

    async def submit(
        self,
        content: Content,
        *,
        loop_id: LoopId | None = None,
        no_fold: bool = False,
        agency: Agency = Agency.USER,
        command_id: CommandId | None = None,
        agent: str = "",
        model: str = "",
        max_tokens: int | None = None,
    ) -> CommandId:
        """Send input to ``loop_id`` (the active loop by default).

        See :meth:`submit_to_loop` for ``command_id`` and the errors.
        """
        return await self.submit_to_loop(
            loop_id or self._active,
            content,
            no_fold=no_fold,
            agency=agency,
            command_id=command_id,
            agent=agent,
            model=model,
            max_tokens=max_tokens,
        )

    async def submit_to_loop(
        self,
        loop_id: LoopId,
        content: Content,
        *,
        no_fold: bool = False,
        agency: Agency = Agency.USER,
        command_id: CommandId | None = None,
        agent: str = "",
        model: str = "",
        max_tokens: int | None = None,
        traceparent: str | None = None,
    ) -> CommandId:
        """Send input to ``loop_id``; return its command id once acknowledged.

        Args:
            loop_id: the loop.
            content: the input.
            no_fold: never fold it into a running turn.
            agency: who asks.
            command_id: the id to send it with (default: a new one). Pass the id
                of an earlier attempt to retry it: the loop applies one command
                id once, so a retry never makes a second turn.
            agent: the agent the input is for (a new loop is bound to it;
                empty: the service's single agent).
            model: a model from the agent's allow-list for this input's turn
                (empty: the agent's default); outside it, ``TurnRejected``.
            max_tokens: an output cap for that turn.
            traceparent: the W3C trace context the turn joins (default: the
                caller's current OpenTelemetry span, when the session was
                given a trace source and there is one).

        Raises:
            CommandNotConfirmedError: not acknowledged in time; its
                ``command_id`` is the handle to retry with (the first attempt
                may still arrive).
        """
        command = SubmitCommand.model_validate(
            {
                **self._fields(loop_id, agency, command_id),
                "message": _as_message(content),
                "no_fold": no_fold,
                "agent": agent,
                "model": model,
                "max_tokens": max_tokens,
            }
        )
        if traceparent is None and self._trace_source is not None:
            traceparent = self._trace_source()
        command_id = await self.send(command, traceparent=traceparent)
        self._remember(self._submitted, command_id, loop_id)
        return command_id

    async def submit_turn(
        self,
        content: Content,
        *,
        loop_id: LoopId | None = None,
        no_fold: bool = False,
        agency: Agency = Agency.USER,
        command_id: CommandId | None = None,
        agent: str = "",
        model: str = "",
        max_tokens: int | None = None,
        tokens: bool = False,
        resync: float = DEFAULT_RESYNC,
    ) -> Turn:
        """Send input and return a :class:`Turn` handle following it.

        The handle subscribes before the input is sent. Iterate it for the
        answer and the turn's events (its ``TokenDelta`` chunks too, and the
        live-only tool-call and ``InputQueued`` events, with ``tokens=True``),
        then ``await turn.outcome()``. Arguments as :meth:`submit_to_loop`;
        ``resync``: seconds without a live event before the journal is read.

        Raises:
            CommandNotConfirmedError: not acknowledged in time (nothing is
                followed; retry with its ``command_id``).
        """
        target = loop_id or self._active
        turn = Turn(self, target, tokens=tokens, resync=resync)
        try:
            sent = await self.submit_to_loop(
                target,
                content,
                no_fold=no_fold,
                agency=agency,
                command_id=command_id,
                agent=agent,
                model=model,
                max_tokens=max_tokens,
            )
        except BaseException:
            turn.close()
            raise
        # A caller's own command id may be a retry whose answer is already in
        # the journal: read it first then.
        turn.bind(sent, from_journal=command_id is not None)
        return turn

    async def submit_and_wait(
        self,
        content: Content,
        *,
        loop_id: LoopId | None = None,
        no_fold: bool = False,
        agency: Agency = Agency.USER,
        command_id: CommandId | None = None,
        agent: str = "",
        model: str = "",
        max_tokens: int | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - one bound for send and wait
    ) -> TurnOutcome:
        """Send input and wait for the end of the turn that answers it.

        Correct when the input starts a turn, waits behind one (queued), joins
        a running one (folded: the outcome is that turn's terminal), is
        rejected or cancelled (no terminal), and across an actor takeover (the
        restored loop ends an open turn with ``TurnInterrupted``).

        Args:
            content: the input.
            loop_id: the loop (the active loop by default).
            no_fold: never fold it into a running turn.
            agency: who asks.
            command_id: as :meth:`submit_to_loop` (a retry's id).
            agent: as :meth:`submit_to_loop`.
            model: as :meth:`submit_to_loop`.
            max_tokens: as :meth:`submit_to_loop`.
            timeout: seconds to wait in all (default: without bound).

        Raises:
            TimeoutError: no outcome within ``timeout``.
            CommandNotConfirmedError: the input was not acknowledged in time.
        """
        async with asyncio.timeout(timeout):
            turn = await self.submit_turn(
                content,
                loop_id=loop_id,
                no_fold=no_fold,
                agency=agency,
                command_id=command_id,
                agent=agent,
                model=model,
                max_tokens=max_tokens,
            )
            async with turn:
                return await turn.outcome()

    def follow(
        self,
        command_id: CommandId,
        *,
        loop_id: LoopId | None = None,
        tokens: bool = False,
        resync: float = DEFAULT_RESYNC,
    ) -> Turn:
        """A :class:`Turn` handle on an input sent earlier (the journal is read).

        Without ``loop_id`` the loop is the one this session sent the command
        to; a command id does not name its loop, so for one sent elsewhere
        (another process, an earlier session) pass ``loop_id``.

        Raises:
            UnknownCommandError: no ``loop_id`` and this session did not send
                ``command_id`` (at once: nothing would ever answer).
        """
        target = loop_id or self._submitted.get(command_id)
        if target is None:
            raise UnknownCommandError(command_id)
        turn = Turn(self, target, tokens=tokens, resync=resync)
        turn.bind(command_id, from_journal=True)
        return turn

    async def interrupt(
        self, loop_id: LoopId | None = None, *, turn_id: TurnId | None = None
    ) -> bool:
        """Ask the loop to cancel its running turn; ``True`` once the broker has it.

        With ``turn_id`` only that turn is cancelled, however late the
        interrupt is read (after a restart, or once a later turn runs); if
        that turn no longer runs the loop answers the interrupt
        ``TurnRejected{turn_ended}``. Over Kafka the answer cannot say whether
        a turn was running: watch for ``TurnInterrupted``.
        """
        target = loop_id or self._active
        await self.send(
            Interrupt.model_validate(
                {**self._fields(target, Agency.USER), "turn_id": turn_id}
            )
        )
        return True

    async def respond_gate(
        self, gate_id: GateId, action: str, *, loop_id: LoopId | None = None
    ) -> None:
        """Answer a gate; its loop is learned from ``GateOpened`` (else the active)."""
        target = loop_id or self._gates.get(gate_id) or self._active
        await self.send(
            RespondGate.model_validate(
                {
                    **self._fields(target, Agency.USER),
                    "gate_id": gate_id,
                    "action": action,
                }
            )
        )

    async def retract(
        self, command_id: CommandId, *, loop_id: LoopId | None = None
    ) -> None:
        """Withdraw a queued input (a no-op if it already started or folded)."""
        target = loop_id or self._submitted.get(command_id) or self._active
        await self.send(
            Retract.model_validate(
                {**self._fields(target, Agency.USER), "target_command_id": command_id}
            )
        )

    async def stop_loop(self, loop_id: LoopId | None = None) -> None:
        """Send ``Shutdown`` to a loop (its turn ends, queued input is returned)."""
        target = loop_id or self._active
        await self.send(Shutdown.model_validate(self._fields(target, Agency.USER)))

    async def delete_loop(self, loop_id: LoopId) -> LoopDeleted | TurnRejected:
        """Send ``DeleteLoop`` to a loop and return the loop's answer.

        ``LoopDeleted``: the loop was stopped (its turn interrupted, queued
        input returned ``loop_deleted``), its state removed, and every later
        input is refused ``TurnRejected{loop_deleted}``.
        ``TurnRejected{loop_deleted}``: it was deleted already.
        ``TurnRejected{unknown_loop}``: nothing of it is stored (nothing was
        deleted). The journal keeps the loop's events until its retention.

        Waits without bound for the answer (wrap it in ``asyncio.timeout``):
        the answer needs a running loop-actor service.
        """
        subscription = self.subscribe_events(
            EventFilter(enduring=LoopScope.only(loop_id))
        )
        try:
            command_id = await self.send(
                DeleteLoop.model_validate(self._fields(loop_id, Agency.USER))
            )
            position = 0
            while True:
                entries = await self.replay_entries(loop_id, from_=position)
                for entry in entries:
                    event = entry.event
                    if isinstance(event, LoopDeleted | TurnRejected) and (
                        event.reply_to() == command_id
                    ):
                        return event
                if entries:
                    position = entries[-1].offset + 1
                with contextlib.suppress(TimeoutError):
                    await subscription.next(timeout=1.0)
        finally:
            subscription.close()

    async def wait_idle(self, loop_id: LoopId | None = None) -> None:
        """Return once the loop is parked and every input sent from here answered.

        Waits without bound (wrap it in ``asyncio.timeout``).
        """
        target = loop_id or self._active
        subscription = self.subscribe_events(
            EventFilter(enduring=LoopScope.only(target))
        )
        try:
            position = 0
            journal: list[EnduringEvent] = []
            while True:
                entries = await self.replay_entries(target, from_=position)
                if entries:
                    position = entries[-1].offset + 1
                    journal.extend(e.event for e in entries)
                pending = {c for c, loop in self._submitted.items() if loop == target}
                if _parked(journal, pending):
                    return
                with contextlib.suppress(TimeoutError):
                    await subscription.next(timeout=1.0)
        finally:
            subscription.close()

    @staticmethod
    def _remember(table: OrderedDict[Any, LoopId], key: Any, loop_id: LoopId) -> None:
        table[key] = loop_id
        while len(table) > SEEN_WINDOW:
            table.popitem(last=False)


def _parked(journal: Sequence[EnduringEvent], pending: set[CommandId]) -> bool:
    answered = {e.reply_to() for e in journal}
    if pending - answered:
        return False
    last: EnduringEvent | None = None
    for event in journal:
        if isinstance(
            event, TurnStarted | TurnDone | TurnFailed | TurnInterrupted | LoopIdle
        ):
            last = event
    return last is None or isinstance(last, LoopIdle | TurnInterrupted)


def _implements_session(session: KafkaSession) -> Session:
    """Type-checked proof that :class:`KafkaSession` satisfies ``Session``."""
    return session
