"""One owned commands partition: its writer, its journal and its loop actors.

Owns :class:`PartitionRunner`. It is created when the consumer group assigns a
commands partition and lives until that partition is revoked (or lost):

* :meth:`PartitionRunner.open` starts the transactional writer (which fences a
  previous owner), indexes the latest state record of every loop of the
  compacted loops partition (undecoded), and closes every turn a crash left
  open with a durable ``TurnInterrupted`` (the runtime's restore path); other
  loops are decoded and restored lazily, on their next input;
* :meth:`PartitionRunner.dispatch` takes the partition's command records in
  offset order: poison records -- undecodable, mis-keyed, misrouted -- go to
  the dead-letter topic (:mod:`~turnstream.kafka.actor.poison`, in the
  partition's transaction, without stalling it); a command the loop has
  already applied is skipped (its durable command mark, or its answer);
  everything else goes to the loop's actor (one actor per loop, the loop's
  single writer) with its offset, created or restored on demand -- only an
  input creates a loop; a ``DeleteLoop`` of a loop the partition holds
  nothing of is answered ``TurnRejected{unknown_loop}`` here, without an
  actor or a state record;
* while the group rebalances the runner simply keeps going (its turns run
  and commit; no new records arrive); if the partition comes back to this
  process it carries on from :attr:`PartitionRunner.next_offset`;
* beyond its share of the service's resident budget, the runner passivates
  the least recently used *parked* loops (idle, nothing queued, latest state
  written) once a second: their actors stop quietly and only their encoded
  state stays, in the partition's state index, until their next command
  restores them;
* :meth:`PartitionRunner.begin_drain` (a planned stop) lets running turns
  finish but starts no new ones (:attr:`PartitionRunner.running_turns` says
  when they are done); a continuing agent's turn (``on_restore="continue"``)
  only finishes its current step: it stops, open, once that step's
  ``StepDone`` commits;
* :meth:`PartitionRunner.handover` (moved away, shutdown) interrupts running
  turns and commits their terminals -- except a continuing agent's, left open
  (nothing ending it written; a step still running dropped) for the next
  owner to resume -- leaves merely queued inputs unanswered for the next
  owner, commits the last offsets and closes the producer;
  :meth:`PartitionRunner.abandon` (fenced or failed writer) stops the actors
  without writing anything more.

The loops' actors -- created, restored, passivated, stopped -- are kept by
:class:`~turnstream.kafka.actor.live_loops.LiveLoops`; what the runners share
is :class:`~turnstream.kafka.actor.runner_context.RunnerContext` (re-exported
here).

Part of ``turnstream.kafka``; imports the runtime's actor and restore (adapters
sit above the runtime) and the wire codec; aiokafka only through its siblings.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any
from uuid import UUID

from aiokafka import TopicPartition

from turnstream.commands import AnyCommand, DeleteLoop, Interrupt, SubmitInput
from turnstream.errors import DecodeError, TransportError, TurnstreamError
from turnstream.events import Cause, RejectReason, TurnRejected
from turnstream.ids import LoopId, SessionId
from turnstream.kafka.actor.journal import PartitionJournal
from turnstream.kafka.actor.live_loops import LiveEntry, LiveLoops, answers
from turnstream.kafka.actor.poison import Poison, check_command, dead_letter
from turnstream.kafka.actor.runner_context import RunnerContext, SetupFor, Spawn
from turnstream.kafka.actor.writer import (
    PartitionWriter,
    WriterState,
    transactional_id,
)
from turnstream.kafka.errors import KafkaAuthorizationError
from turnstream.kafka.faults import PartitionClosedError
from turnstream.kafka.reader import HistoryReader, read_state_index
from turnstream.kafka.records import DeadLetterKind
from turnstream.runtime.actor import LoopActor
from turnstream.runtime.errors import LoopClosedError, RestoreError
from turnstream.runtime.restore import restore_loop
from turnstream.runtime.stamping import EventFactory
from turnstream.runtime.tracing import TRACEPARENT, TraceContext, TraceContexts

__all__ = ["PartitionRunner", "RunnerContext", "SetupFor", "Spawn"]

_log = logging.getLogger(__name__)


def _remember_trace(traces: TraceContexts, command: SubmitInput, record: Any) -> None:
    """Keep the ``traceparent`` a submit's record carries, for its turn."""
    for name, value in record.headers or ():
        if name == TRACEPARENT:
            carried = TraceContext.parse(value)
            if carried is not None:
                traces.remember(command.command_id, carried)
            return


class PartitionRunner:
    """Everything this process does for one commands partition.

    Args:
        partition: the partition number.
        ctx: what the runners of the service share.
        still_owner: whether the consumer still holds this partition.
        on_broken: called when the writer is fenced or failed.
    """

    def __init__(
        self,
        partition: int,
        ctx: RunnerContext,
        *,
        still_owner: Callable[[], bool],
        on_broken: Callable[[PartitionRunner], None],
    ) -> None:
        self.partition = partition
        self._ctx = ctx
        self._on_broken = on_broken
        self._closing = False
        self._loops = LiveLoops(
            partition,
            ctx,
            journal=lambda: self.journal,
            closed=lambda: self._closing or self.broken,
        )
        self._draining = False
        self._held: set[UUID] = set()
        self.next_offset: int | None = None
        """The offset after the last record this runner took (``None``: none yet)."""
        self._journal: PartitionJournal | None = None
        self._history: HistoryReader | None = None
        self._writer_task: asyncio.Task[None] | None = None
        self._sweeper_task: asyncio.Task[None] | None = None
        self.writer = PartitionWriter(
            partition=partition,
            clients=ctx.clients,
            topics=ctx.topics,
            group_id=ctx.group_id,
            txn_id=transactional_id(
                ctx.txn_prefix, ctx.group_id, ctx.topics.commands, partition
            ),
            codec=ctx.codec,
            metrics=ctx.metrics,
            settings=ctx.writer,
            traces=ctx.traces,
            still_owner=still_owner,
            on_broken=lambda _writer: self._on_broken(self),
        )

    @property
    def broken(self) -> bool:
        """Whether the writer was fenced or failed."""
        return self.writer.state in (WriterState.FENCED, WriterState.FAILED)

    @property
    def journal(self) -> PartitionJournal:
        """The partition's journal (after :meth:`open`)."""
        if self._journal is None:
            raise RuntimeError("the partition runner is not open")
        return self._journal

    # ------------------------------------------------------------ opening

    async def open(self) -> None:
        """Take the partition over: fence, read snapshots, settle open turns.

        An open turn is closed (``TurnInterrupted``), or resumed by its loop's
        actor, started here, when its agent continues turns.

        Raises:
            TransportError: Kafka could not be read or written in time.
            RestoreError: a loop with an open turn could not be closed.
        """
        ctx = self._ctx
        await self.writer.start()
        self._writer_task = ctx.spawn(
            self.writer.run(), f"writer-{ctx.topics.commands}-{self.partition}"
        )
        history = TopicPartition(ctx.topics.history, self.partition)
        self._history = HistoryReader(ctx.clients, ctx.codec, history)
        snapshots = await read_state_index(
            ctx.clients,
            ctx.codec,
            TopicPartition(ctx.topics.loops, self.partition),
            history,
            self._history.fetch,
        )
        self._journal = PartitionJournal(
            partition=self.partition,
            writer=self.writer,
            snapshots=snapshots,
            clients=ctx.clients,
            codec=ctx.codec,
            events_topic=ctx.topics.events,
            metrics=ctx.metrics,
        )
        pending = self._journal.open_turn_loops()
        try:
            await self._journal.prefetch(pending)
        except DecodeError:
            # One unreadable record must not keep the partition from opening:
            # each loop is restored (or refused) on its own below.
            _log.error("journal tail unreadable", extra={"partition": self.partition})
        for loop_id in pending:
            setup = ctx.setup_for(LoopId(loop_id), "")
            try:
                state = await restore_loop(
                    self._journal,
                    LoopId(loop_id),
                    clock=ctx.clock,
                    ids=ctx.ids,
                    commit_timeout=setup.config.commit_timeout,
                    policy=self._loops.restore_policy(LoopId(loop_id)),
                )
                if state.open_turn is not None:
                    # Resumed (a continuing agent): its actor runs the turn now,
                    # not when the loop's next command arrives.
                    self._loops.start_resumed(state)
            except RestoreError as exc:
                # Retried when the loop's next input arrives; its open turn
                # stays open until then (no one can write it meanwhile).
                _log.error(
                    "loop with an open turn not restored",
                    extra={"partition": self.partition, "reason": exc.reason},
                )
            if self.broken:
                raise PartitionClosedError(self.partition)
        self._sweeper_task = ctx.spawn(
            self._loops.sweep(), f"passivate-{ctx.topics.commands}-{self.partition}"
        )

    # ----------------------------------------------------------- dispatch

    async def dispatch(self, record: Any) -> None:  # noqa: PLR0911 - one per outcome
        """Handle one command record (called in offset order)."""
        if self._closing or self.broken:
            return  # not noted: the next owner reads it again
        if self.next_offset is not None and record.offset < self.next_offset:
            return  # taken already: fetched again after a rebalance kept it here
        self.next_offset = record.offset + 1
        ctx = self._ctx
        try:
            command = check_command(ctx.codec, record, ctx.partitions)
        except Poison as poison:
            ctx.spawn(
                self._dead_letter(record, poison.kind, poison.reason), "dead-letter"
            )
            return
        if ctx.traces is not None and isinstance(command, SubmitInput):
            _remember_trace(ctx.traces, command, record)
        if self._draining and (
            isinstance(command, SubmitInput | DeleteLoop)
            or command.loop_id in self._held
        ):
            # Not noted: the next owner runs it, and everything after it for
            # the same loop (log order per loop).
            self._held.add(command.loop_id)
            return
        ctx.metrics.commands[command.type] += 1
        try:
            actor = await self._loops.actor_for(command)
        except KafkaAuthorizationError as exc:
            # Rebuilding the partition would be denied the same way: stop.
            self.writer.deny(exc)
            return
        except TransportError:
            if not self._closing:
                # Kafka could not be read: rebuild the partition; the command
                # is read again from the committed offset.
                self.writer.fail()
            return
        except TurnstreamError as exc:  # RestoreError, DecodeError: permanent
            reason = f"loop {command.loop_id} cannot be restored ({exc.kind})"
            ctx.spawn(
                self._dead_letter(record, DeadLetterKind.UNRESTORABLE, reason),
                "dead-letter",
            )
            return
        if not (self._closing or self.broken):
            await self._deliver(record.offset, command, actor)

    async def _deliver(
        self, offset: int, command: AnyCommand, actor: LoopActor | None
    ) -> None:
        """Note the command in the offset ledger and hand it to its actor.

        A command the loop has already applied (at or before its durable mark,
        or answered since) is skipped, however far back redelivery started.
        """
        if actor is None:
            if isinstance(command, DeleteLoop) or answers(command):
                # Noted before the answer is written, which must not stall
                # the partition's next records.
                self.writer.note_awaiting(offset, command.command_id)
                self._ctx.spawn(self._unknown_loop(command), "unknown-loop")
                return
            self.writer.note_processed(offset)
            return
        if self.journal.already_applied(command.loop_id, offset, command.command_id):
            self._ctx.metrics.duplicates += 1
            self.writer.note_processed(offset)
            return
        if isinstance(command, SubmitInput | DeleteLoop):
            self.writer.note_awaiting(offset, command.command_id)
        else:
            self.writer.note_processed(offset)
        try:
            actor.post(command, offset)
        except LoopClosedError:
            # The actor stopped since it was looked up: an input (or a
            # deletion, or a named interrupt, which is answered) restarts the
            # loop; any other command has nothing left to act on.
            if not (isinstance(command, SubmitInput | DeleteLoop) or answers(command)):
                return
            try:
                restarted = await self._loops.actor_for(command)
            except TurnstreamError:
                return  # stays unanswered: read again from the committed offset
            if restarted is not None and not (self._closing or self.broken):
                restarted.post(command, offset)

    async def _unknown_loop(self, command: DeleteLoop | Interrupt) -> None:
        """Answer a deletion or a named interrupt of a loop stored nowhere here.

        ``TurnRejected{unknown_loop}``, written alone: no state record, so the
        loop stays unknown (its first input would start it afresh).
        """
        ctx = self._ctx
        factory = EventFactory(
            session_id=SessionId(command.session_id),
            loop_id=LoopId(command.loop_id),
            clock=ctx.clock,
            ids=ctx.ids,
        )
        cause = Cause(command_id=command.command_id, agency=command.agency)
        rejected = factory.stamp(
            TurnRejected(
                header=factory.header(cause=cause),
                reason=RejectReason.UNKNOWN_LOOP,
                detail="no state of this loop is stored",
            )
        )
        try:
            await self.writer.append(command.loop_id, [rejected], None)
        except TurnstreamError:
            # Unanswered: the command is read again by the partition's next
            # owner (or this one, after a rebuild).
            _log.warning(
                "unknown_loop answer not committed",
                extra={"partition": self.partition},
            )

    async def _dead_letter(
        self, record: Any, kind: DeadLetterKind, reason: str
    ) -> None:
        """Dead-letter a poison record (see :func:`poison.dead_letter`)."""
        settled = await dead_letter(
            self.writer,
            self._ctx.metrics,
            record,
            kind=kind,
            reason=reason,
            topic=self._ctx.topics.commands,
            partition=self.partition,
        )
        if not settled and not (self._closing or self.broken):
            _log.warning(
                "dead letter not written; the partition is rebuilt and the "
                "record read again",
                extra={"partition": self.partition},
            )
            self.writer.fail()

    # ------------------------------------------------------------ stopping

    @property
    def running_turns(self) -> int:
        """Loops of this partition with a turn still running."""
        return self._loops.running_turns

    def begin_drain(self) -> None:
        """Start no turn and take no input; running turns go on.

        Interrupts and gate answers for running turns are still applied. A
        continuing agent's turn only finishes the step it is in: it stops after
        that step's ``StepDone`` commits, still open, and the handover leaves
        it to the next owner (:meth:`LoopActor.suspend_turn`).
        """
        self._draining = True
        if self._journal is not None:
            self._journal.close_for_drain()
        self._loops.suspend_turns()

    async def release(self) -> None:
        """Give the partition up: hand it over, or abandon it if the writer broke."""
        await (self.abandon() if self.broken else self.handover())

    async def handover(self) -> None:
        """Stop for another owner: end turns durably, keep queued input for it."""
        if self._closing:
            return
        self._closing = True
        if self._journal is not None:
            self._journal.close_for_handover()
        live = self._loops.entries()
        if live and not self.broken:
            async with asyncio.TaskGroup() as group:
                for entry in live:
                    group.create_task(self._loops.stop_actor(entry))
        await self._finish(live)

    async def abandon(self) -> None:
        """Stop without writing anything more (fenced, failed or lost)."""
        self._closing = True
        await self._finish(self._loops.entries())

    async def give_up(self) -> None:
        """Stop at once, writing nothing and waiting on no commit (Kafka is down).

        The writer is failed first, so nothing waits for a transaction that
        cannot commit; the next owner's restore ends the turns that ran here.
        """
        self._closing = True
        self.writer.fail()
        await self._finish(self._loops.entries(), grace=1.0)

    async def _finish(
        self, live: list[LiveEntry], *, grace: float | None = None
    ) -> None:
        wait = self._ctx.stop_timeout if grace is None else grace
        if self._sweeper_task is not None:
            self._sweeper_task.cancel()
        for entry in live:
            entry.task.cancel()
        if live:
            await asyncio.wait([e.task for e in live], timeout=wait)
        self._loops.clear()
        if self._history is not None:
            await self._history.close()
        await self.writer.close()
        if self._writer_task is not None:
            await asyncio.wait([self._writer_task], timeout=wait)
            if not self._writer_task.done():
                self._writer_task.cancel()
                await asyncio.wait([self._writer_task], timeout=1.0)
