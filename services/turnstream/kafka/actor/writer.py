"""The transactional writer of one commands partition.

Owns :class:`PartitionWriter`: the partition's transactional producer (stable
transactional id ``{prefix}-{group}-{commands topic}-{partition}``, so a newer
owner fences this one), its single writer task, and its
:class:`~turnstream.kafka.actor.offsets.CommandOffsets` ledger. Every durable commit
of every loop of the partition goes through it:

* one request = the events of one ``Journal.append`` (+ that loop's state);
  the writer group-commits the requests pending when a transaction starts into
  that one transaction, in arrival order;
* a transaction holds the events (to ``events``, explicit partition), the
  records the steps' tool calls staged (to their own topics, by key), each
  requested state record (to ``loops``, ``journal_offset`` = last event
  offset + 1), dead letters, and ``send_offsets_to_transaction`` with the
  committable command offset computed *as if* the transaction's answers were
  already committed, so answers and offsets move atomically;
* the state records go out with the events, on offsets *predicted* from the
  previous commit (the partition's single writer knows where its next record
  lands: after its last one and that transaction's commit marker), so both
  topics share one ``AddPartitionsToTxn`` and one produce round trip instead
  of two each. The offsets the events really got are checked before the
  commit; if anything else landed in the partition meanwhile (a foreign or
  misrouted record, an aborted transaction's marker), the transaction is
  aborted and written again the slow way -- state records after their events'
  offsets are known -- so a snapshot never names a wrong offset. Without a
  prediction (the first commit, after any failure) the slow way is taken;
* a request's future resolves only after ``commit_transaction`` returned.

Failure handling: transient errors abort the transaction and retry it with
backoff until ``commit_deadline``; a fencing error means another process owns
the partition, so the writer turns ``FENCED`` and never writes again; a
deadline passed, or a commit whose outcome cannot be established, turns it
``FAILED`` (the service then rebuilds the partition from Kafka); an ACL that
denies a write or the transactional id turns it ``FAILED`` with
:attr:`PartitionWriter.denial` set, not retried: the
service is marked not ready at the first denial, the failed transaction is
aborted and the producer re-initialised once (a denied re-initialisation
ends the attempt at once), and the service stops with the denial.

Every failed transaction is ended on the coordinator before anything else is
written: after aiokafka's abort the writer re-initialises the producer, whose
``InitProducerId`` aborts whatever the coordinator still holds open. aiokafka's
``abort_transaction`` alone is not enough: after an abortable error (e.g. a
denied ``AddPartitionsToTxn`` for the loops topic) it forgets the partitions
already added and ends the transaction client-side only, so the next commit of
the same producer would commit the earlier events with it. A re-initialised
producer bumps the epoch, so the writer asks ``still_owner`` first: a zombie
must never fence the real owner (it closes its producer instead, and the
coordinator aborts on the transaction timeout or the owner's takeover).

Part of ``turnstream.kafka`` (the only aiokafka importer). Imports the wire
codec to encode records; never the runtime's actor.

One module on purpose (~800 lines): queueing, group commit, the transaction body and
failure recovery all drive the same producer, phase and ledger; split apart, each
part would reach into the others' state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final
from uuid import UUID

from aiokafka import TopicPartition
from aiokafka.errors import TransactionalIdAuthorizationFailed

from turnstream.errors import TransportError
from turnstream.events import EnduringEvent
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.actor.offsets import CommandOffsets
from turnstream.kafka.clients import KafkaClients, start_client, stop_client
from turnstream.kafka.diagnose import authorization_error
from turnstream.kafka.errors import KafkaAuthorizationError
from turnstream.kafka.faults import (
    CommitFailedError,
    Fault,
    PartitionClosedError,
    PartitionFencedError,
    classify,
)
from turnstream.kafka.reader import head_headers, record_visible
from turnstream.kafka.records import loop_key
from turnstream.kafka.state_records import (
    StateRecords,
    erased_history_keys,
    history_key,
    split,
)
from turnstream.kafka.topology import TopicNames
from turnstream.runtime.effects import StagedRecord
from turnstream.runtime.errors import EffectError
from turnstream.runtime.tracing import TraceContexts, event_trace_headers
from turnstream.state import LoopState
from turnstream.wire import Codec, EncodeError

__all__ = ["PartitionWriter", "WriterSettings", "WriterState", "transactional_id"]

_log = logging.getLogger(__name__)
_STATE_OVERHEAD: Final = 1024


def transactional_id(prefix: str, group_id: str, topic: str, partition: int) -> str:
    """The stable transactional id of one input partition's producer."""
    return f"{prefix}-{group_id}-{topic}-{partition}"


@dataclass(frozen=True, slots=True, kw_only=True)
class WriterSettings:
    """How one partition's writer commits.

    Attributes:
        commit_deadline: seconds one commit may take, retries included. Keep
            it below the loops' ``commit_timeout`` so the writer always decides
            before the actor stops waiting.
        transaction_timeout_ms: the producer's transaction timeout.
        max_group: appends group-committed into one transaction at most.
        offset_flush_interval: seconds an advanced command offset may wait for
            a transaction to carry it before an offsets-only one is made.
        backoff_initial: first retry delay in seconds (doubles per retry).
        backoff_max: longest retry delay in seconds.
        state_max_bytes: a state record larger than this is replaced by a small
            "replay from the start" marker; keep it below the loops topic's
            ``max.message.bytes``.
        start_timeout: seconds to start (initialise) the producer.
        close_timeout: seconds to stop the producer.
    """

    commit_deadline: float = 30.0
    transaction_timeout_ms: int = 60_000
    max_group: int = 32
    offset_flush_interval: float = 1.0
    backoff_initial: float = 0.1
    backoff_max: float = 2.0
    state_max_bytes: int = 1_000_000 - 16_384
    start_timeout: float = 60.0
    close_timeout: float = 10.0


class WriterState(StrEnum):
    """The writer's life: it only moves forward."""

    NEW = "new"
    OPEN = "open"
    FENCED = "fenced"
    FAILED = "failed"
    CLOSED = "closed"


@dataclass(slots=True, kw_only=True, eq=False)
class _Append:
    loop_id: UUID
    payloads: tuple[tuple[bytes, list[tuple[str, bytes]]], ...]
    state: LoopState | None
    resolves: tuple[UUID, ...]
    reply: asyncio.Future[LoopState | None]
    started: float
    on_commit: Callable[[LoopState | None], None] | None = None
    added_ids: tuple[UUID, ...] = ()
    erase_history: int = 0
    effects: tuple[StagedRecord, ...] = ()


@dataclass(slots=True, kw_only=True, eq=False)
class _DeadLetter:
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]
    resolves: UUID
    reply: asyncio.Future[LoopState | None]
    started: float


_Request = _Append | _DeadLetter


class _Phase(StrEnum):
    IDLE = "idle"
    OPEN = "open"
    COMMITTING = "committing"


@dataclass(slots=True)
class _Outcome:
    states: dict[int, LoopState] = field(default_factory=dict)
    offset: int | None = None
    probe: TopicPartition | None = None
    probe_offset: int | None = None


@dataclass(slots=True)
class _SentStates:
    """What :meth:`PartitionWriter._send_states` handed to the producer."""

    history: list[asyncio.Future[Any]] = field(default_factory=list)
    planned_history: list[int] = field(default_factory=list)
    erased: list[asyncio.Future[Any]] = field(default_factory=list)
    futures: list[asyncio.Future[Any]] = field(default_factory=list)


class _MemberCancelled(Exception):
    """A request's caller gave up before the commit: retry without it."""


class _Mispredicted(Exception):
    """The events did not land on the predicted offsets: write them again."""


class PartitionWriter:
    """The single writer of one partition's transactions (see module docstring).

    Args:
        partition: the commands partition (= events and loops partition).
        clients: builds the transactional producer.
        topics: the topic set.
        group_id: the consumer group whose offsets the transactions commit.
        txn_id: the stable transactional id.
        codec: encodes events, states and (for the probe) nothing else.
        metrics: counters to update.
        settings: timeouts and limits.
        still_owner: whether this process still owns the partition (asked
            before any producer re-initialisation, which would fence others).
        on_broken: called once when the writer turns FENCED or FAILED.
    """

    def __init__(
        self,
        *,
        partition: int,
        clients: KafkaClients,
        topics: TopicNames,
        group_id: str,
        txn_id: str,
        codec: Codec,
        metrics: ServiceMetrics,
        settings: WriterSettings,
        still_owner: Callable[[], bool],
        on_broken: Callable[[PartitionWriter], None],
        traces: TraceContexts | None = None,
    ) -> None:
        self.partition = partition
        self._traces = traces
        self.transactional_id = txn_id
        self._clients = clients
        self._topics = topics
        self._group_id = group_id
        self._codec = codec
        self._metrics = metrics
        self._settings = settings
        self._still_owner = still_owner
        self._on_broken = on_broken
        self._ledger = CommandOffsets()
        self._queue: deque[_Request] = deque()
        self._wake = asyncio.Event()
        self._state = WriterState.NEW
        self._closing = False
        self._producer: Any = None
        self._phase = _Phase.IDLE
        self._last_commit = time.monotonic()
        self._commands_tp = TopicPartition(topics.commands, partition)
        self._events_tp = TopicPartition(topics.events, partition)
        self._denial: KafkaAuthorizationError | None = None
        # Where the next record of the events partition lands if nothing but
        # this writer's transactions reach it; None: not known (slow way).
        self._next_offset: int | None = None
        # The same for the history partition (heads name their records' offsets).
        self._next_history: int | None = None

    # ------------------------------------------------------------------ state

    @property
    def state(self) -> WriterState:
        """Where the writer is in its life."""
        return self._state

    @property
    def denial(self) -> KafkaAuthorizationError | None:
        """The missing permission that broke the writer, if an ACL did."""
        return self._denial

    @property
    def ledger(self) -> CommandOffsets:
        """The partition's command-offset ledger (read it; only notes change it)."""
        return self._ledger

    def _check_open(self) -> None:
        if self._state is WriterState.FENCED:
            raise PartitionFencedError(self.partition)
        if self._state is not WriterState.OPEN or self._closing:
            raise PartitionClosedError(self.partition)

    # -------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Initialise the transactional producer (fences any previous owner).

        Raises:
            KafkaAuthorizationError: an ACL denies the transactional id.
            TransportError: the producer could not be initialised in time.
        """
        try:
            self._producer = await self._new_producer(self._settings.start_timeout)
        except TransportError as exc:
            denied = authorization_error(
                exc.__cause__ or exc,
                security=self._clients.security,
                operation=f"start the transactional producer of partition "
                f"{self.partition}",
                permission="Write",
                resource=self.transactional_id,
            )
            if denied is not None:
                self._denial = denied
                raise denied from exc
            raise
        self._state = WriterState.OPEN

    async def _new_producer(self, seconds: float) -> Any:
        producer = self._clients.transactional_producer(
            self.transactional_id,
            transaction_timeout_ms=self._settings.transaction_timeout_ms,
        )
        await start_client(
            producer,
            seconds=seconds,
            operation="start producer",
            security=self._clients.security,
        )
        return producer

    async def run(self) -> None:
        """The writer task: commit request groups until closed or broken."""
        try:
            while self._state is WriterState.OPEN:
                batch = await self._next_batch()
                if batch is None:
                    break
                await self._commit_group(batch)
        finally:
            if self._phase is _Phase.OPEN and self._producer is not None:
                # Cancelled mid-transaction: abort it rather than leave it to
                # the transaction timeout or the next owner.
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(min(self._settings.close_timeout, 2.0)):
                        await self._producer.abort_transaction()
            self._fail_queued()
            await self._close_producer()

    async def close(self) -> None:
        """Stop taking requests; commit what is queued and the last offsets.

        Returns once :meth:`run` may finish; await the writer task after it.
        """
        self._closing = True
        self._wake.set()

    def fail(self) -> None:
        """Mark the writer failed (e.g. its partition could not be taken over)."""
        self._break(WriterState.FAILED)

    def _break(self, state: WriterState) -> None:
        if self._state in (WriterState.FENCED, WriterState.FAILED):
            return
        self._state = state
        if state is WriterState.FENCED:
            self._metrics.fenced += 1
        self._wake.set()
        self._on_broken(self)

    async def _close_producer(self) -> None:
        if self._state is WriterState.OPEN:
            self._state = WriterState.CLOSED
        producer, self._producer = self._producer, None
        if producer is not None:
            await stop_client(producer, seconds=self._settings.close_timeout)

    # --------------------------------------------------------- ledger notes

    def note_processed(self, offset: int) -> None:
        """The command at ``offset`` needs nothing more (synchronous)."""
        self._ledger.processed(offset)
        self._wake.set()

    def note_awaiting(self, offset: int, command_id: UUID) -> None:
        """The input at ``offset`` waits for a durable answer (synchronous)."""
        self._ledger.awaiting(offset, command_id)

    def note_abandoned(self, offset: int, record_id: UUID) -> None:
        """Give the record at ``offset`` up: it will never be answered.

        For a poison record even a bounded dead letter could not be written
        for: its offset must not hold the committed offset back.
        """
        self._ledger.processed(offset)
        self._ledger.resolve((record_id,))
        self._wake.set()

    # --------------------------------------------------------------- requests

    async def append(
        self,
        loop_id: UUID,
        events: Sequence[EnduringEvent],
        state: LoopState | None,
        *,
        on_commit: Callable[[LoopState | None], None] | None = None,
        added_ids: Sequence[UUID] = (),
        erase_history: int = 0,
        effects: Sequence[StagedRecord] = (),
    ) -> LoopState | None:
        """Commit ``events`` (and ``state``) in a transaction; wait for it.

        ``effects`` (records a step's tool calls staged) go to their own topics
        in the same transaction, so ``read_committed`` consumers see them iff
        they see the events.

        ``state`` is written as a head and a history record of what it adds
        (:mod:`~turnstream.kafka.state_records`): ``added_ids`` are the command
        ids resolved since the loop's previous state write, so a long
        conversation's state costs what changed, not its size.
        ``erase_history`` history records of the loop (``0 .. n - 1``) are
        tombstoned in the same transaction (a deleted loop's).

        A caller that stops waiting (cancelled, timed out) withdraws the request
        if its transaction has not reached the commit yet; past that point the
        commit happens anyway, and ``on_commit`` (called with the written state
        for every committed request, waited for or not) is how the caller's
        bookkeeping stays equal to what Kafka holds.

        Returns:
            The state as written (with its ``journal_offset``), or ``None``.

        Raises:
            PartitionFencedError: the partition was lost to another process.
            PartitionClosedError: the writer is closing or closed.
            CommitFailedError: the transaction failed (nothing was committed).
            ContractError: an event cannot be encoded (nothing was queued).
        """
        self._check_open()
        payloads = tuple(
            (self._codec.marshal_event(e), self._event_headers(e)) for e in events
        )
        resolves = tuple(r for r in (e.reply_to() for e in events) if r is not None)
        reply: asyncio.Future[LoopState | None] = (
            asyncio.get_running_loop().create_future()
        )
        self._queue.append(
            _Append(
                loop_id=loop_id,
                payloads=payloads,
                state=state,
                resolves=resolves,
                reply=reply,
                started=time.monotonic(),
                on_commit=on_commit,
                added_ids=tuple(added_ids),
                erase_history=erase_history,
                effects=tuple(effects),
            )
        )
        self._wake.set()
        return await reply

    async def dead_letter(
        self,
        *,
        key: bytes | None,
        value: bytes,
        headers: list[tuple[str, bytes]],
        offset: int,
        record_id: UUID,
    ) -> None:
        """Write an undecodable command to the dead-letter topic, transactionally.

        The command's offset counts as resolved by the same transaction.

        Raises:
            PartitionFencedError | PartitionClosedError | CommitFailedError: as
                for :meth:`append`.
        """
        self._check_open()
        self._ledger.awaiting(offset, record_id)
        reply: asyncio.Future[LoopState | None] = (
            asyncio.get_running_loop().create_future()
        )
        self._queue.append(
            _DeadLetter(
                key=key,
                value=value,
                headers=headers,
                resolves=record_id,
                reply=reply,
                started=time.monotonic(),
            )
        )
        self._wake.set()
        await reply

    def _fail_queued(self) -> None:
        while self._queue:
            request = self._queue.popleft()
            if not request.reply.done():
                request.reply.set_exception(self._closed_error())

    def _closed_error(self) -> TransportError:
        if self._state is WriterState.FENCED:
            return PartitionFencedError(self.partition)
        if self._state is WriterState.FAILED:
            if self._denial is not None:
                return self._denial
            return CommitFailedError(self.partition, "writer failed", 1, retriable=True)
        return PartitionClosedError(self.partition)

    # ------------------------------------------------------------ the loop

    async def _next_batch(self) -> list[_Request] | None:
        """The next group to commit; ``[]`` for offsets only; ``None`` to stop."""
        while True:
            while self._queue and self._queue[0].reply.done():
                self._queue.popleft()  # the caller gave up before we started
            if self._queue:
                batch: list[_Request] = []
                while self._queue and len(batch) < self._settings.max_group:
                    request = self._queue.popleft()
                    if not request.reply.done():
                        batch.append(request)
                if batch:
                    return batch
                continue
            due = self._last_commit + self._settings.offset_flush_interval
            if self._ledger.needs_commit() and (
                self._closing or time.monotonic() >= due
            ):
                return []
            if self._closing or self._state is not WriterState.OPEN:
                return None
            self._wake.clear()
            wait = (
                max(due - time.monotonic(), 0.01)
                if self._ledger.needs_commit()
                else None
            )
            try:
                async with asyncio.timeout(wait):
                    await self._wake.wait()
            except TimeoutError:
                continue

    async def _commit_group(self, batch: list[_Request]) -> None:
        deadline = time.monotonic() + self._settings.commit_deadline
        backoff = self._settings.backoff_initial
        attempts = 0
        while self._state is WriterState.OPEN:
            batch = [r for r in batch if not r.reply.done()]
            if not batch and not self._ledger.needs_commit():
                return
            attempts += 1
            outcome = _Outcome()
            try:
                async with asyncio.timeout(max(deadline - time.monotonic(), 0.001)):
                    await self._transaction(batch, outcome)
            except (_MemberCancelled, _Mispredicted):
                continue
            except Exception as exc:  # noqa: BLE001 - every failure is classified
                if await self._settle_failure(exc, batch, outcome, deadline, attempts):
                    return
                await asyncio.sleep(min(backoff, max(deadline - time.monotonic(), 0)))
                backoff = min(backoff * 2, self._settings.backoff_max)
                continue
            self._succeed(batch, outcome)
            return
        self._fail(batch, self._closed_error())

    async def _settle_failure(
        self,
        exc: Exception,
        batch: list[_Request],
        outcome: _Outcome,
        deadline: float,
        attempts: int,
    ) -> bool:
        """Handle a failed transaction; ``True`` if the group is settled."""
        refused = _transaction_refusal(self._producer)
        if isinstance(refused, Exception) and classify(refused) is Fault.DENIED:
            # The refusal aiokafka kept to itself is the cause of whatever the
            # next call raised (IllegalOperation: not in a transaction).
            exc = refused
        fault = classify(exc)
        if fault is Fault.DENIED:
            self._note_denial(exc)  # before _recover may break the writer
        verdict = await self._recover(exc, outcome, deadline)
        if verdict == "committed":
            self._succeed(batch, outcome)
            return True
        if self._denial is not None:
            self._metrics.commit_failures += 1
            self._fail(batch, self._denial)
            self._break(WriterState.FAILED)
            return True
        if verdict == "stop":
            self._fail(batch, self._closed_error())
            return True
        if fault is Fault.PERMANENT and len(batch) > 1:
            for request in batch:  # isolate the bad request
                await self._commit_group([request])
            return True
        if fault is Fault.PERMANENT or time.monotonic() >= deadline:
            retriable = fault is not Fault.PERMANENT
            self._metrics.commit_failures += 1
            self._fail(
                batch,
                CommitFailedError(
                    self.partition, type(exc).__name__, attempts, retriable=retriable
                ),
            )
            if retriable:
                self._break(WriterState.FAILED)
            return True
        self._metrics.commit_retries += 1
        _log.warning(
            "transaction failed; retrying",
            extra={"partition": self.partition, "exc_type": type(exc).__name__},
        )
        return False

    def deny(self, exc: KafkaAuthorizationError) -> None:
        """An ACL refused what this partition needs: report it, break the writer.

        E.g. Read on the journal while restoring a loop: the service stops
        with the missing grant instead of rebuilding the partition.
        """
        self._note_denial(exc)
        self._break(WriterState.FAILED)

    def _note_denial(self, exc: Exception) -> None:
        """An ACL refused part of the transaction: keep the first denial.

        The service stops being ready at once: nothing this partition commits
        can succeed until an operator grants the permission. The service logs
        the denial when the writer breaks (once per process, however many
        partitions are denied).
        """
        if self._denial is not None:
            return
        denied = authorization_error(
            exc,
            security=self._clients.security,
            operation=f"commit on partition {self.partition}",
            permission="Write",
            resource=(
                self.transactional_id
                if isinstance(exc, TransactionalIdAuthorizationFailed)
                else None
            ),
        )
        assert denied is not None  # noqa: S101 - classify() said DENIED
        self._denial = denied
        self._metrics.ready = False

    def check_effect_topic(self, topic: str) -> None:
        """Refuse a staged record for one of the topic set's own topics.

        A tool must never write the journal, the commands, the state or the
        deltas; nor a broker-internal topic (a ``__`` prefix).

        Raises:
            EffectError: ``reserved_topic``.
        """
        topics = self._topics
        own = {
            topics.commands,
            topics.events,
            topics.loops,
            topics.history,
            topics.deltas,
            topics.dead_letters,
        }
        if topic in own or topic.startswith("__"):
            raise EffectError("reserved_topic")

    async def _send(self, topic: str, value: bytes | None, **kwargs: Any) -> Any:
        """Hand one record to the producer; return its delivery future.

        Every delivery future gets a callback that retrieves its exception, so
        a transaction that fails half-way leaves no unobserved exception behind.
        """
        delivery = await self._producer.send(topic, value, **kwargs)
        delivery.add_done_callback(_observe)
        return delivery

    async def _transaction(self, batch: list[_Request], outcome: _Outcome) -> None:
        producer = self._producer
        # Taken, not peeked: any failure below leaves it unknown.
        predicted, self._next_offset = self._next_offset, None
        history_at, self._next_history = self._next_history, None
        self._phase = _Phase.OPEN
        await producer.begin_transaction()
        event_futures, other_futures = await self._send_events(batch)
        resolving = [u for r in batch for u in _resolves(r)]
        target = self._ledger.committable(resolving)
        if predicted is None:
            offsets = [await _all(sent) for sent in event_futures]
            states = await self._send_states(
                batch, _offset_ranges(offsets), target, outcome, history_at
            )
        else:
            planned = _planned_ranges(batch, predicted)
            states = await self._send_states(
                batch, planned, target, outcome, history_at
            )
            offsets = [await _all(sent) for sent in event_futures]
            if _offset_ranges(offsets) != planned:
                await self._mispredicted()
        other_futures += states.futures
        history_offsets = [m.offset for m in await _all(states.history)]
        if history_offsets != states.planned_history:
            await self._mispredicted()
        history_offsets += [m.offset for m in await _all(states.erased)]
        for metas in offsets:
            if metas and outcome.probe is None:
                outcome.probe, outcome.probe_offset = self._events_tp, metas[0].offset
        written = await _all(other_futures)
        if outcome.probe is None and written:
            outcome.probe = TopicPartition(written[0].topic, written[0].partition)
            outcome.probe_offset = written[0].offset
        committed = self._ledger.committed
        if target is not None and (committed is None or target > committed):
            await producer.send_offsets_to_transaction(
                {self._commands_tp: target}, self._group_id
            )
            outcome.offset = target
        if any(r.reply.cancelled() for r in batch):
            await producer.abort_transaction()
            self._phase = _Phase.IDLE
            raise _MemberCancelled
        self._phase = _Phase.COMMITTING
        await producer.commit_transaction()
        self._phase = _Phase.IDLE
        last = max((m.offset for metas in offsets for m in metas), default=None)
        # After this transaction's last record comes its commit marker.
        self._next_offset = predicted if last is None else last + 2
        self._next_history = max(history_offsets) + 2 if history_offsets else history_at

    async def _mispredicted(self) -> None:
        """Records did not land where predicted: abort, write again the slow way."""
        await self._producer.abort_transaction()
        self._phase = _Phase.IDLE
        self._metrics.offset_mispredictions += 1
        raise _Mispredicted

    async def _send_events(
        self, batch: list[_Request]
    ) -> tuple[list[list[asyncio.Future[Any]]], list[asyncio.Future[Any]]]:
        """Hand each request's events (or dead letter) to the producer.

        Returns each request's event delivery futures, and the dead letters'.
        """
        event_futures: list[list[asyncio.Future[Any]]] = []
        other_futures: list[asyncio.Future[Any]] = []
        for request in batch:
            sent, others = await self._send_request(request)
            event_futures.append(sent)
            other_futures += others
        return event_futures, other_futures

    async def _send_request(
        self, request: _Request
    ) -> tuple[list[asyncio.Future[Any]], list[asyncio.Future[Any]]]:
        """Hand one request's records to the producer; (events, others) futures."""
        if isinstance(request, _DeadLetter):
            return [], [
                await self._send(
                    self._topics.dead_letters,
                    request.value,
                    key=request.key,
                    headers=request.headers,
                )
            ]
        key = loop_key(request.loop_id)
        events = [
            await self._send(
                self._topics.events,
                value,
                key=key,
                partition=self.partition,
                headers=headers,
            )
            for value, headers in request.payloads
        ]
        # Staged effects: partitioned by their key, as any producer places them.
        effects = [
            await self._send(
                effect.topic, effect.value, key=effect.key, headers=list(effect.headers)
            )
            for effect in request.effects
        ]
        return events, effects

    async def _send_states(
        self,
        batch: list[_Request],
        ranges: list[range],
        target: int | None,
        outcome: _Outcome,
        history_at: int | None,
    ) -> _SentStates:
        """Hand each request's state records to the producer.

        ``ranges[i]``: the offsets of request ``i``'s events, known or planned.
        The history records go first; each head names where its history
        record lands: predicted from ``history_at`` when known (checked before
        the commit), else learnt by waiting for the history records' delivery
        (one more round trip). The states written are kept in ``outcome.states``.
        """
        sent = _SentStates()
        split_up: list[tuple[int, StateRecords]] = []
        erased: list[bytes] = []
        for index, (request, events) in enumerate(zip(batch, ranges, strict=True)):
            if not isinstance(request, _Append) or request.state is None:
                continue
            state = request.state.model_copy(
                update={
                    "journal_offset": events.stop
                    if events
                    else request.state.journal_offset,
                    "command_offset": target if target is not None else -1,
                }
            )
            if state.history_records > 0 and state.history_first_offset < 0:
                # A lineage whose records' offsets are unknown (written before
                # heads named them): start it over, so readers fetch by offset.
                state = state.model_copy(update={"history_length": -1})
            records, data = self._history_value(split(state, request.added_ids))
            erased.extend(erased_history_keys(request.loop_id, request.erase_history))
            if data is not None:
                assert records.history is not None  # noqa: S101 - data is its value
                number = records.history.history_records - 1
                sent.history.append(
                    await self._send(
                        self._topics.history,
                        data,
                        key=history_key(records.head.loop_id, number),
                        partition=self.partition,
                        headers=self._codec.kafka_headers(records.history),
                    )
                )
            split_up.append((index, records))
        if history_at is not None:
            sent.planned_history = list(
                range(history_at, history_at + len(sent.history))
            )
        else:
            metas = await _all(sent.history)
            sent.planned_history = [m.offset for m in metas]
        placed = iter(sent.planned_history)
        for index, records in split_up:
            written = (
                records if records.history is None else records.placed(next(placed))
            )
            outcome.states[index] = written.kept
            head = written.head
            sent.futures.append(
                await self._send(
                    self._topics.loops,
                    self._codec.marshal_state(head),
                    key=loop_key(head.loop_id),
                    partition=self.partition,
                    headers=head_headers(self._codec, head),
                )
            )
        # Tombstones of deleted loops' history records: after the records
        # heads name, so they never shift a predicted offset.
        for key in erased:
            sent.erased.append(
                await self._send(
                    self._topics.history, None, key=key, partition=self.partition
                )
            )
        return sent

    def _history_value(
        self, records: StateRecords
    ) -> tuple[StateRecords, bytes | None]:
        """The records to write, and the history record's value (if any)."""
        history = records.history
        if history is None:
            return records, None
        limit = self._settings.state_max_bytes - _STATE_OVERHEAD
        try:
            data = self._codec.marshal_state(history)
        except EncodeError:
            data = b""
        if data and len(data) <= limit:
            return records, data
        # Too large for the history topic: a head that sends restore to a full
        # replay of the journal (never a stale state), and the next write
        # starts the history over.
        unknown = {"history_first_offset": -1, "history_last_offset": -1}
        head = records.head.model_copy(
            update={"journal_offset": -1, "history_length": -1, **unknown}
        )
        kept = records.kept.model_copy(
            update={"history_length": -1, "history_records": 0, **unknown}
        )
        return StateRecords(head, None, kept), None

    def _event_headers(self, event: EnduringEvent) -> list[tuple[str, bytes]]:
        """The record headers of ``event``: type, schema, and its turn's trace."""
        headers = self._codec.kafka_headers(event)
        if self._traces is not None:
            headers += event_trace_headers(self._traces, event)
        return headers

    def _succeed(self, batch: list[_Request], outcome: _Outcome) -> None:
        now = time.monotonic()
        self._last_commit = now
        self._ledger.resolve(u for r in batch for u in _resolves(r))
        if outcome.offset is not None:
            self._ledger.mark_committed(outcome.offset)
        self._metrics.commits += 1
        if batch:
            self._metrics.group_sizes[len(batch)] += 1
        for index, request in enumerate(batch):
            self._metrics.commit_latency.observe(now - request.started)
            written = outcome.states.get(index)
            if isinstance(request, _DeadLetter):
                self._metrics.dead_letters += 1
            elif request.on_commit is not None:
                request.on_commit(written)
            if not request.reply.done():
                request.reply.set_result(written)

    def _fail(self, batch: list[_Request], error: BaseException) -> None:
        for request in batch:
            if not request.reply.done():
                request.reply.set_exception(error)

    # ------------------------------------------------------------ recovery

    async def _recover(self, exc: Exception, outcome: _Outcome, deadline: float) -> str:
        """After a failed transaction: ``"retry"``, ``"committed"`` or ``"stop"``."""
        phase, self._phase = self._phase, _Phase.IDLE
        fault = classify(exc)
        if fault is Fault.FENCED:
            self._break(WriterState.FENCED)
            return "stop"
        if phase is _Phase.OPEN:
            # Abort, then re-initialise whatever the abort did: aiokafka's abort
            # after an abortable error ends the transaction client-side only
            # (module docstring), and a refused record leaves the idempotent
            # sequence numbers behind the broker's. InitProducerId aborts what
            # the coordinator still holds; nothing of it becomes visible.
            await self._abort(deadline)
            if self._state is not WriterState.OPEN:
                return "stop"
            return "retry" if await self._rebuild(deadline) else "stop"
        # The transaction's state is unknown (committing, fatal, abort failed):
        # a fresh producer resolves it on the coordinator.
        if not await self._rebuild(deadline):
            return "stop"
        if phase is not _Phase.COMMITTING or outcome.probe is None:
            return "retry"
        return await self._committed_or_not(outcome, deadline)

    async def _committed_or_not(self, outcome: _Outcome, deadline: float) -> str:
        """Whether a commit whose answer was lost happened: look for its record."""
        assert outcome.probe is not None  # noqa: S101 - checked by the caller
        assert outcome.probe_offset is not None  # noqa: S101 - set with probe
        try:
            async with asyncio.timeout(max(deadline - time.monotonic(), 0.001)):
                visible = await record_visible(
                    self._clients, outcome.probe, outcome.probe_offset
                )
        except (TimeoutError, TransportError):
            _log.error("commit outcome unknown", extra={"partition": self.partition})
            self._break(WriterState.FAILED)
            return "stop"
        return "committed" if visible else "retry"

    async def _abort(self, deadline: float) -> bool:
        try:
            async with asyncio.timeout(max(deadline - time.monotonic(), 0.001)):
                await self._producer.abort_transaction()
        except Exception as exc:  # noqa: BLE001 - any failure: rebuild instead
            if classify(exc) is Fault.FENCED:
                self._break(WriterState.FENCED)
            return False
        return True

    async def _rebuild(self, deadline: float) -> bool:
        if self._state is not WriterState.OPEN:
            return False
        if not self._still_owner():
            # Re-initialising would bump the epoch and fence the real owner.
            self._break(WriterState.FENCED)
            return False
        old, self._producer = self._producer, None
        await stop_client(old, seconds=min(self._settings.close_timeout, 2.0))
        backoff = self._settings.backoff_initial
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._break(WriterState.FAILED)
                return False
            try:
                self._producer = await self._new_producer(remaining)
            except KafkaAuthorizationError as exc:
                # Re-initialising cannot succeed until an operator grants it:
                # stop now (the coordinator aborts the open transaction on
                # its timeout) rather than retry until the deadline.
                self._note_denial(exc)
                self._break(WriterState.FAILED)
                return False
            except TransportError:
                await asyncio.sleep(min(backoff, max(remaining, 0)))
                backoff = min(backoff * 2, self._settings.backoff_max)
                continue
            return True


def _transaction_refusal(producer: Any) -> BaseException | None:
    """Why aiokafka put the open transaction into error, if it did.

    A refused AddPartitionsToTxn (an ACL denies a partition's topic) or
    TxnOffsetCommit is recorded only on the transaction manager's waiter; the
    next call (``send_offsets_to_transaction``) then fails with
    ``IllegalOperation``, which says nothing of the ACL, and an abort replaces
    the waiter, leaving its exception unobserved (asyncio logs it at ERROR).
    Reading it here both names the cause and observes it.
    """
    manager = getattr(producer, "_txn_manager", None)
    waiter = getattr(manager, "_transaction_waiter", None)
    if not isinstance(waiter, asyncio.Future) or not waiter.done():
        return None
    if waiter.cancelled():
        return None
    return waiter.exception()


def _observe(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


async def _all(futures: Sequence[asyncio.Future[Any]]) -> list[Any]:
    """Every result, or the first failure once all have settled."""
    results = await asyncio.gather(*futures, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def _resolves(request: _Request) -> tuple[UUID, ...]:
    if isinstance(request, _Append):
        return request.resolves
    return (request.resolves,)


def _offset_ranges(offsets: Sequence[Sequence[Any]]) -> list[range]:
    """Per request, the offsets its events got, as first to last + 1.

    Not consecutive (something landed between them): the range is longer
    than the request's events, so it never equals a planned range.
    """
    return [
        range(min(m.offset for m in metas), max(m.offset for m in metas) + 1)
        if metas
        else range(0)
        for metas in offsets
    ]


def _planned_ranges(batch: Sequence[_Request], first: int) -> list[range]:
    """Per request, where its events land if nothing else reaches the partition."""
    ranges: list[range] = []
    at = first
    for request in batch:
        count = len(request.payloads) if isinstance(request, _Append) else 0
        ranges.append(range(at, at + count))
        at += count
    return ranges
