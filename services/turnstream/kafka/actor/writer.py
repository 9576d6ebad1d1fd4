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

The writer's parts, each in a module of its own: the body of one transaction
and the requests it carries (:mod:`~turnstream.kafka.actor.transaction`), the
offset prediction (:mod:`~turnstream.kafka.actor.offset_prediction`), the
producer's start and its recovery after a failed transaction -- abort,
re-initialise, look for a lost commit's record
(:mod:`~turnstream.kafka.actor.producer_recovery`) -- and the settings and
life states (:mod:`~turnstream.kafka.actor.writer_settings`, re-exported
here). :class:`PartitionWriter` keeps the queue, the group commit and what a
failure means for its requests; it is larger than ~400 lines on purpose: those
three share the request futures, the writer's life state and the ledger, and
split apart each would reach into the others'.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import InitVar, dataclass, field
from uuid import UUID

from aiokafka.errors import TransactionalIdAuthorizationFailed

from turnstream.errors import TransportError
from turnstream.events import EnduringEvent
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.actor.offsets import CommandOffsets
from turnstream.kafka.actor.producer_recovery import (
    ProducerRecovery,
    transaction_refusal,
)
from turnstream.kafka.actor.transaction import (
    Append,
    DeadLetter,
    MemberCancelled,
    Mispredicted,
    Outcome,
    Phase,
    Request,
    TransactionBuilder,
    resolves,
)
from turnstream.kafka.actor.writer_settings import (
    WriterSettings,
    WriterState,
    transactional_id,
)
from turnstream.kafka.clients import KafkaClients, stop_client
from turnstream.kafka.diagnose import authorization_error
from turnstream.kafka.errors import KafkaAuthorizationError
from turnstream.kafka.faults import (
    CommitFailedError,
    Fault,
    PartitionClosedError,
    PartitionFencedError,
    classify,
)
from turnstream.kafka.topology import TopicNames
from turnstream.runtime.effects import StagedRecord
from turnstream.runtime.errors import EffectError
from turnstream.runtime.tracing import TraceContexts, event_trace_headers
from turnstream.state import LoopState
from turnstream.wire import Codec

__all__ = ["PartitionWriter", "WriterSettings", "WriterState", "transactional_id"]

_log = logging.getLogger(__name__)


@dataclass(eq=False, repr=False, kw_only=True)
class PartitionWriter:
    """The single writer of one partition's transactions (see module docstring).

    Larger than ~400 lines on purpose: its queue, group commit and failure
    verdicts share the request futures, the life state and the ledger.

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

    partition: int
    clients: KafkaClients
    topics: TopicNames
    group_id: str
    txn_id: InitVar[str]
    codec: Codec
    metrics: ServiceMetrics
    settings: WriterSettings
    still_owner: Callable[[], bool]
    on_broken: Callable[[PartitionWriter], None]
    traces: TraceContexts | None = None
    transactional_id: str = field(init=False)
    _ledger: CommandOffsets = field(init=False, default_factory=CommandOffsets)
    _queue: deque[Request] = field(init=False, default_factory=deque)
    _wake: asyncio.Event = field(init=False, default_factory=asyncio.Event)
    _state: WriterState = field(init=False, default=WriterState.NEW)
    _closing: bool = field(init=False, default=False)
    _last_commit: float = field(init=False, default_factory=time.monotonic)
    _denial: KafkaAuthorizationError | None = field(init=False, default=None)
    _txn: TransactionBuilder = field(init=False)
    _recovery: ProducerRecovery = field(init=False)

    def __post_init__(self, txn_id: str) -> None:
        self.transactional_id = txn_id
        self._txn = TransactionBuilder(
            partition=self.partition,
            topics=self.topics,
            group_id=self.group_id,
            codec=self.codec,
            metrics=self.metrics,
            ledger=self._ledger,
            state_max_bytes=self.settings.state_max_bytes,
            traces=self.traces,
        )
        self._recovery = ProducerRecovery(
            txn=self._txn,
            clients=self.clients,
            settings=self.settings,
            transactional_id=txn_id,
            still_owner=self.still_owner,
            is_open=lambda: self._state is WriterState.OPEN,
            broke=self._break,
            note_denial=self._note_denial,
        )

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
            self._txn.producer = await self._recovery.new_producer(
                self.settings.start_timeout
            )
        except TransportError as exc:
            denied = authorization_error(
                exc.__cause__ or exc,
                security=self.clients.security,
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

    async def run(self) -> None:
        """The writer task: commit request groups until closed or broken."""
        try:
            while self._state is WriterState.OPEN:
                batch = await self._next_batch()
                if batch is None:
                    break
                await self._commit_group(batch)
        finally:
            if self._txn.phase is Phase.OPEN and self._txn.producer is not None:
                # Cancelled mid-transaction: abort it rather than leave it to
                # the transaction timeout or the next owner.
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(min(self.settings.close_timeout, 2.0)):
                        await self._txn.producer.abort_transaction()
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
            self.metrics.fenced += 1
        self._wake.set()
        self.on_broken(self)

    async def _close_producer(self) -> None:
        if self._state is WriterState.OPEN:
            self._state = WriterState.CLOSED
        producer, self._txn.producer = self._txn.producer, None
        if producer is not None:
            await stop_client(producer, seconds=self.settings.close_timeout)

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
            (self.codec.marshal_event(e), self._event_headers(e)) for e in events
        )
        resolves = tuple(r for r in (e.reply_to() for e in events) if r is not None)
        return await self._submit(
            Append(
                loop_id=loop_id,
                payloads=payloads,
                state=state,
                resolves=resolves,
                on_commit=on_commit,
                added_ids=tuple(added_ids),
                erase_history=erase_history,
                effects=tuple(effects),
            )
        )

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
        await self._submit(
            DeadLetter(
                key=key,
                value=value,
                headers=headers,
                resolves=record_id,
            )
        )

    async def _submit(self, request: Request) -> LoopState | None:
        """Queue ``request`` for the writer task; wait for its transaction."""
        self._queue.append(request)
        self._wake.set()
        return await request.reply

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

    async def _next_batch(self) -> list[Request] | None:
        """The next group to commit; ``[]`` for offsets only; ``None`` to stop."""
        while True:
            while self._queue and self._queue[0].reply.done():
                self._queue.popleft()  # the caller gave up before we started
            if self._queue:
                batch: list[Request] = []
                while self._queue and len(batch) < self.settings.max_group:
                    request = self._queue.popleft()
                    if not request.reply.done():
                        batch.append(request)
                if batch:
                    return batch
                continue
            due = self._last_commit + self.settings.offset_flush_interval
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

    async def _commit_group(self, batch: list[Request]) -> None:
        deadline = time.monotonic() + self.settings.commit_deadline
        backoff = self.settings.backoff_initial
        attempts = 0
        while self._state is WriterState.OPEN:
            batch = [r for r in batch if not r.reply.done()]
            if not batch and not self._ledger.needs_commit():
                return
            attempts += 1
            outcome = Outcome()
            try:
                async with asyncio.timeout(max(deadline - time.monotonic(), 0.001)):
                    await self._txn.commit(batch, outcome)
            except (MemberCancelled, Mispredicted):
                continue
            except Exception as exc:  # noqa: BLE001 - every failure is classified
                if await self._settle_failure(exc, batch, outcome, deadline, attempts):
                    return
                await asyncio.sleep(min(backoff, max(deadline - time.monotonic(), 0)))
                backoff = min(backoff * 2, self.settings.backoff_max)
                continue
            self._succeed(batch, outcome)
            return
        self._fail(batch, self._closed_error())

    async def _settle_failure(
        self,
        exc: Exception,
        batch: list[Request],
        outcome: Outcome,
        deadline: float,
        attempts: int,
    ) -> bool:
        """Handle a failed transaction; ``True`` if the group is settled."""
        refused = transaction_refusal(self._txn.producer)
        if isinstance(refused, Exception) and classify(refused) is Fault.DENIED:
            # The refusal aiokafka kept to itself is the cause of whatever the
            # next call raised (IllegalOperation: not in a transaction).
            exc = refused
        fault = classify(exc)
        if fault is Fault.DENIED:
            self._note_denial(exc)  # before recovery may break the writer
        verdict = await self._recovery.recover(exc, outcome, deadline)
        if verdict == "committed":
            self._succeed(batch, outcome)
            return True
        if self._denial is not None:
            self.metrics.commit_failures += 1
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
            self.metrics.commit_failures += 1
            self._fail(
                batch,
                CommitFailedError(
                    self.partition, type(exc).__name__, attempts, retriable=retriable
                ),
            )
            if retriable:
                self._break(WriterState.FAILED)
            return True
        self.metrics.commit_retries += 1
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
            security=self.clients.security,
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
        self.metrics.ready = False

    def check_effect_topic(self, topic: str) -> None:
        """Refuse a staged record for one of the topic set's own topics.

        A tool must never write the journal, the commands, the state or the
        deltas; nor a broker-internal topic (a ``__`` prefix).

        Raises:
            EffectError: ``reserved_topic``.
        """
        topics = self.topics
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

    def _event_headers(self, event: EnduringEvent) -> list[tuple[str, bytes]]:
        """The record headers of ``event``: type, schema, and its turn's trace."""
        headers = self.codec.kafka_headers(event)
        if self.traces is not None:
            headers += event_trace_headers(self.traces, event)
        return headers

    def _succeed(self, batch: list[Request], outcome: Outcome) -> None:
        now = time.monotonic()
        self._last_commit = now
        self._ledger.resolve(u for r in batch for u in resolves(r))
        if outcome.offset is not None:
            self._ledger.mark_committed(outcome.offset)
        self.metrics.commits += 1
        if batch:
            self.metrics.group_sizes[len(batch)] += 1
        for index, request in enumerate(batch):
            self.metrics.commit_latency.observe(now - request.started)
            written = outcome.states.get(index)
            if isinstance(request, DeadLetter):
                self.metrics.dead_letters += 1
            elif request.on_commit is not None:
                request.on_commit(written)
            if not request.reply.done():
                request.reply.set_result(written)

    def _fail(self, batch: list[Request], error: BaseException) -> None:
        for request in batch:
            if not request.reply.done():
                request.reply.set_exception(error)
