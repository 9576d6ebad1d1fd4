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

The session composes two parts, each a module: the command sender
(:mod:`turnstream.kafka.client.sender`: the producer, one record per command)
and the live feed (:mod:`turnstream.kafka.client.live_feed`: the readers and
their pump tasks). The submit variants take one set of options
(:class:`~turnstream.kafka.client.submit_options.SubmitOptions`) and send
through one code path (:meth:`KafkaSession.submit_to_loop`). The reader tasks
belong to the session object: :meth:`KafkaSession.close` cancels and awaits
them, then stops the clients. Every network call is bounded by the
connection's timeouts. Part of ``turnstream.kafka``; imports the runtime
(protocol types) and the wire codec.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import Self, Unpack
from uuid import UUID

from aiokafka import TopicPartition

from turnstream.commands import (
    AnyCommand,
    DeleteLoop,
    Interrupt,
    RespondGate,
    Retract,
    Shutdown,
)
from turnstream.commands import SubmitInput as SubmitCommand
from turnstream.errors import SessionError, UnknownCommandError
from turnstream.events import (
    Agency,
    EnduringEvent,
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
from turnstream.kafka.client.cursor import Cursor
from turnstream.kafka.client.live import CursorSubscription
from turnstream.kafka.client.live_feed import LiveFeed, RecentLoops
from turnstream.kafka.client.sender import CommandSender
from turnstream.kafka.client.submit_options import SubmitOptions, submit_fields
from turnstream.kafka.client.turns import DEFAULT_RESYNC, Turn, TurnOutcome
from turnstream.kafka.clients import KafkaClients
from turnstream.kafka.connection import KafkaConnection
from turnstream.kafka.reader import JournalEntry, read_journal
from turnstream.kafka.records import loop_key, partition_for
from turnstream.kafka.security import KafkaSecurity
from turnstream.kafka.topology import MAX_COMMAND_BYTES, TopicNames, partition_counts
from turnstream.runtime.ports import Clock, IdSource, RandomIds, SystemClock
from turnstream.runtime.session import Content, Session, as_message
from turnstream.runtime.subscription import (
    DEFAULT_SUBSCRIBER_CAPACITY,
    EventFilter,
    LoopScope,
    Subscription,
)
from turnstream.wire import Codec, default_codec

__all__ = ["Content", "KafkaSession", "SubmitOptions"]


class KafkaSession:
    """A session whose loops run in the loop-actor service (see module docstring).

    Create it with :meth:`connect`; close it with :meth:`close` (or ``async
    with``). Over 400 lines on purpose: it is the Session API's whole surface
    (connect, live events, history, attach, the commands), most of it
    docstrings; the work is in its parts (``sender``, ``live_feed``) and in
    ``attach`` and ``turns``.
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
        self._topics = topics
        self._codec = codec
        self._session_id = session_id
        self._active = active_loop
        self._partitions = partitions
        self._clock = clock
        self._ids = ids
        self._sender = CommandSender(
            clients=clients,
            topic=topics.commands,
            codec=codec,
            partitions=partitions,
            max_command_bytes=max_command_bytes,
        )
        self._feed = LiveFeed(
            clients=clients, topics=topics, codec=codec, capacity=capacity
        )
        self._submitted: RecentLoops[CommandId] = RecentLoops()
        self._closed = False

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

    async def _start(self, counts: dict[str, int], *, live: bool = True) -> None:
        await self._sender.start()
        if live:
            await self._feed.start(counts)

    async def close(self) -> None:
        """End subscriptions, stop the reader tasks and the clients. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._feed.close()
        await self._sender.stop()

    async def shutdown(self) -> None:
        """The Session protocol's shutdown: close this client (loops keep running)."""
        await self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # ----------------------------------------------------------- live events

    @property
    def undecodable(self) -> int:
        """Live records that were not valid events (skipped)."""
        return self._feed.undecodable

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
        return self._feed.subscribe(event_filter, capacity)

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
        if self._closed or not self._sender.started:
            raise SessionError("session_closing")
        return await self._sender.send(command, traceparent=traceparent)

    async def submit(
        self,
        content: Content,
        *,
        loop_id: LoopId | None = None,
        **options: Unpack[SubmitOptions],
    ) -> CommandId:
        """Send input to ``loop_id`` (the active loop by default).

        See :meth:`submit_to_loop` for the options and the errors.
        """
        return await self.submit_to_loop(loop_id or self._active, content, **options)

    async def submit_to_loop(
        self,
        loop_id: LoopId,
        content: Content,
        *,
        traceparent: str | None = None,
        **options: Unpack[SubmitOptions],
    ) -> CommandId:
        """Send input to ``loop_id``; return its command id once acknowledged.

        Every submit variant sends through here.

        Args:
            loop_id: the loop.
            content: the input.
            traceparent: the W3C trace context the turn joins (default: the
                caller's current OpenTelemetry span, when the session was
                given a trace source and there is one).
            options: ``no_fold``, ``agency``, ``command_id`` (a retry's),
                ``agent``, ``model``, ``max_tokens``: see
                :class:`~turnstream.kafka.client.submit_options.SubmitOptions`.

        Raises:
            CommandNotConfirmedError: not acknowledged in time; its
                ``command_id`` is the handle to retry with (the first attempt
                may still arrive).
        """
        agency = options.get("agency", Agency.USER)
        command = SubmitCommand.model_validate(
            {
                **self._fields(loop_id, agency, options.get("command_id")),
                "message": as_message(content),
                **submit_fields(options),
            }
        )
        if traceparent is None and self._trace_source is not None:
            traceparent = self._trace_source()
        command_id = await self.send(command, traceparent=traceparent)
        self._submitted.remember(command_id, loop_id)
        return command_id

    async def submit_turn(
        self,
        content: Content,
        *,
        loop_id: LoopId | None = None,
        tokens: bool = False,
        resync: float = DEFAULT_RESYNC,
        **options: Unpack[SubmitOptions],
    ) -> Turn:
        """Send input and return a :class:`Turn` handle following it.

        The handle subscribes before the input is sent. Iterate it for the
        answer and the turn's events (its ``TokenDelta`` chunks too, and the
        live-only tool-call and ``InputQueued`` events, with ``tokens=True``),
        then ``await turn.outcome()``. Options as :meth:`submit_to_loop`;
        ``resync``: seconds without a live event before the journal is read.

        Raises:
            CommandNotConfirmedError: not acknowledged in time (nothing is
                followed; retry with its ``command_id``).
        """
        target = loop_id or self._active
        turn = Turn(self, target, tokens=tokens, resync=resync)
        try:
            sent = await self.submit_to_loop(target, content, **options)
        except BaseException:
            turn.close()
            raise
        # A caller's own command id may be a retry whose answer is already in
        # the journal: read it first then.
        turn.bind(sent, from_journal=options.get("command_id") is not None)
        return turn

    async def submit_and_wait(
        self,
        content: Content,
        *,
        loop_id: LoopId | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - one bound for send and wait
        **options: Unpack[SubmitOptions],
    ) -> TurnOutcome:
        """Send input and wait for the end of the turn that answers it.

        Correct when the input starts a turn, waits behind one (queued), joins
        a running one (folded: the outcome is that turn's terminal), is
        rejected or cancelled (no terminal), and across an actor takeover (the
        restored loop ends an open turn with ``TurnInterrupted``).

        Args:
            content: the input.
            loop_id: the loop (the active loop by default).
            timeout: seconds to wait in all (default: without bound).
            options: as :meth:`submit_to_loop`.

        Raises:
            TimeoutError: no outcome within ``timeout``.
            CommandNotConfirmedError: the input was not acknowledged in time.
        """
        async with asyncio.timeout(timeout):
            turn = await self.submit_turn(content, loop_id=loop_id, **options)
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
        target = loop_id or self._feed.gates.get(gate_id) or self._active
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
        async with self._journal_rounds(loop_id) as rounds:
            command_id = await self.send(
                DeleteLoop.model_validate(self._fields(loop_id, Agency.USER))
            )
            while True:
                for entry in await anext(rounds):
                    event = entry.event
                    if isinstance(event, LoopDeleted | TurnRejected) and (
                        event.reply_to() == command_id
                    ):
                        return event

    async def wait_idle(self, loop_id: LoopId | None = None) -> None:
        """Return once the loop is parked and every input sent from here answered.

        Waits without bound (wrap it in ``asyncio.timeout``).
        """
        target = loop_id or self._active
        journal: list[EnduringEvent] = []
        async with self._journal_rounds(target) as rounds:
            while True:
                journal.extend(e.event for e in await anext(rounds))
                if _parked(journal, self._submitted.keys_of(target)):
                    return

    @contextlib.asynccontextmanager
    async def _journal_rounds(
        self, loop_id: LoopId
    ) -> AsyncIterator[AsyncGenerator[list[JournalEntry]]]:
        """The loop's journal read in rounds, each round's new entries at a time.

        Subscribed on entry, before anything the caller sends: a new round
        starts on the loop's next live event, or after a second without one.
        The rounds never end; the caller leaves when it found its answer.
        """
        subscription = self.subscribe_events(
            EventFilter(enduring=LoopScope.only(loop_id))
        )
        rounds = self._rounds(loop_id, subscription)
        try:
            yield rounds
        finally:
            await rounds.aclose()
            subscription.close()

    async def _rounds(
        self, loop_id: LoopId, subscription: Subscription
    ) -> AsyncGenerator[list[JournalEntry]]:
        position = 0
        while True:
            entries = await self.replay_entries(loop_id, from_=position)
            if entries:
                position = entries[-1].offset + 1
            yield entries
            with contextlib.suppress(TimeoutError):
                await subscription.next(timeout=1.0)


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
