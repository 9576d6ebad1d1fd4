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

Part of ``turnstream.kafka``; imports the runtime's actor and restore (adapters
sit above the runtime) and the wire codec; aiokafka only through its siblings.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from aiokafka import TopicPartition

from turnstream.commands import AnyCommand, DeleteLoop, Shutdown, SubmitInput
from turnstream.errors import DecodeError, TransportError, TurnstreamError
from turnstream.events import Agency, Cause, RejectReason, TurnRejected
from turnstream.ids import CommandId, LoopId, SessionId
from turnstream.kafka.actor.deltas import DeltaPublisher
from turnstream.kafka.actor.journal import PartitionJournal
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.actor.poison import Poison, check_command, dead_letter
from turnstream.kafka.actor.writer import (
    PartitionWriter,
    WriterSettings,
    WriterState,
    transactional_id,
)
from turnstream.kafka.clients import KafkaClients
from turnstream.kafka.errors import KafkaAuthorizationError
from turnstream.kafka.faults import PartitionClosedError
from turnstream.kafka.reader import HistoryReader, read_state_index
from turnstream.kafka.records import DeadLetterKind
from turnstream.kafka.topology import TopicNames
from turnstream.runtime.actor import LoopActor, LoopStatus
from turnstream.runtime.config import RestorePolicy
from turnstream.runtime.errors import LoopClosedError, RestoreError
from turnstream.runtime.hooks import HookRunner, Tracer
from turnstream.runtime.ports import Clock, IdSource
from turnstream.runtime.restore import restore_loop
from turnstream.runtime.session import LoopSetup
from turnstream.runtime.stamping import EventFactory
from turnstream.runtime.tracing import TRACEPARENT, TraceContext, TraceContexts
from turnstream.state import LoopState
from turnstream.wire import Codec

__all__ = ["PartitionRunner", "RunnerContext", "SetupFor", "Spawn"]

_log = logging.getLogger(__name__)

_PASSIVATE_SCAN = 16
"""Busy loops a passivation pass looks past, at most, for parked ones."""
_SWEEP_INTERVAL = 1.0
"""Seconds between two passivation passes of a partition."""

SetupFor = Callable[[LoopId, str], LoopSetup]
"""What a loop runs with, by the agent it is bound to or asks for (``""``: the
service's single agent); given by the composition root (an
:class:`~turnstream.runtime.agent.AgentHost`'s ``setup_for``)."""

Spawn = Callable[[Coroutine[Any, Any, None], str], asyncio.Task[None]]
"""Starts a task in the service's task group."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunnerContext:
    """What every partition runner of a service shares.

    Attributes:
        clients: builds producers and consumers.
        topics: the topic set.
        group_id: the consumer group.
        txn_prefix: prefix of the transactional ids.
        codec: encodes and decodes records.
        hub: the live (deltas) hub for the actors.
        setup_for: the loop configuration and model for a loop id.
        clock: stamps events.
        ids: mints ids.
        metrics: the service's counters.
        writer: the writers' settings.
        stop_timeout: seconds a handover may take per loop.
        spawn: starts tasks in the service's task group.
        partitions: the commands topic's partition count (a command on any
            other partition than its key's is dead-lettered).
        resident_budget: how many loops this runner keeps live (actor and
            decoded state) before it passivates the least recently used.
        traces: the trace context submits carried, for the turns and their
            event records (``None``: no trace headers are read or written).
        tracer: records the loops' spans (``None``: tracing off).
    """

    clients: KafkaClients
    topics: TopicNames
    group_id: str
    txn_prefix: str
    codec: Codec
    hub: DeltaPublisher
    setup_for: SetupFor
    clock: Clock
    ids: IdSource
    metrics: ServiceMetrics
    writer: WriterSettings
    stop_timeout: float
    spawn: Spawn
    partitions: int
    resident_budget: Callable[[], int] = lambda: 1 << 62
    traces: TraceContexts | None = None
    tracer: Tracer | None = None


@dataclass(slots=True)
class _Live:
    actor: LoopActor
    task: asyncio.Task[None]
    # Set while the loop is being passivated; done once it is (or was not).
    leaving: asyncio.Event | None = None
    refusing: bool = False  # never announced: it only refuses, and binds nothing


def _traced(hooks: HookRunner | None, tracer: Tracer | None) -> HookRunner | None:
    """The loop's hooks, with the service's tracer recording its operations."""
    if tracer is None:
        return hooks
    return (hooks or HookRunner()).traced(tracer)


def _remember_trace(traces: TraceContexts, command: SubmitInput, record: Any) -> None:
    """Keep the ``traceparent`` a submit's record carries, for its turn."""
    for name, value in record.headers or ():
        if name == TRACEPARENT:
            carried = TraceContext.parse(value)
            if carried is not None:
                traces.remember(command.command_id, carried)
            return


def _may_bind(command: AnyCommand, setup: LoopSetup) -> bool:
    """Whether ``command`` may bind a loop that is not bound yet to ``setup``'s agent.

    An input refused for its model (``model_not_allowed``) binds nothing, as an
    input for an agent not hosted here binds nothing: the loop stays unbound
    and its next input is resolved afresh.
    """
    if not isinstance(command, SubmitInput) or not command.model:
        return True
    return command.model in setup.config.allowed_models()


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
        self._live: dict[UUID, _Live] = {}
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
                    policy=self._restore_policy(LoopId(loop_id)),
                )
                if state.open_turn is not None:
                    # Resumed (a continuing agent): its actor runs the turn now,
                    # not when the loop's next command arrives.
                    self._start_resumed(state)
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
            self._sweep(), f"passivate-{ctx.topics.commands}-{self.partition}"
        )

    def _restore_policy(self, loop_id: LoopId) -> Callable[[str], RestorePolicy]:
        """The restore policy of the agent a restored loop is bound to."""

        def policy(agent: str) -> RestorePolicy:
            return self._ctx.setup_for(loop_id, agent).config.restore

        return policy

    def _start_resumed(self, state: LoopState) -> None:
        """Start the actor of a loop whose restore resumed its open turn."""
        ctx = self._ctx
        loop_id = LoopId(state.loop_id)
        setup = ctx.setup_for(loop_id, state.agent_name)
        actor = LoopActor.from_state(
            state,
            config=setup.config,
            model=setup.model,
            journal=self.journal,
            hub=ctx.hub,
            clock=ctx.clock,
            ids=ctx.ids,
            hooks=_traced(setup.hooks, ctx.tracer),
            access_policy=setup.access_policy,
        )
        task = ctx.spawn(self._run_actor(actor), f"loop-{loop_id}")
        self._live[loop_id] = _Live(actor, task)

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
            actor = await self._actor_for(command)
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

    async def _sweep(self) -> None:
        """Every second, passivate what is over the resident budget."""
        while not (self._closing or self.broken):
            await asyncio.sleep(_SWEEP_INTERVAL)
            try:
                await self._passivate()
            except Exception:  # noqa: BLE001 - a defect here must not stop the service
                _log.exception(
                    "passivation failed", extra={"partition": self.partition}
                )

    async def _passivate(self) -> None:
        """Stop the least recently used parked loops beyond the budget.

        A loop with a turn running or anything queued is skipped (it counts
        as used). A command that arrives for a loop being passivated waits
        until it is (:meth:`_actor_for`), then restores it.
        """
        excess = len(self._live) - self._ctx.resident_budget()
        if excess <= 0:
            return
        journal = self.journal
        oldest = list(itertools.islice(self._live.items(), excess + _PASSIVATE_SCAN))
        for loop_id, entry in oldest:
            if excess <= 0 or self._closing or self.broken:
                return
            done = entry.task.done()  # stopped already (a client's Shutdown)
            if entry.leaving is not None or not (
                (done or entry.actor.parked) and journal.parkable(loop_id)
            ):
                continue
            entry.leaving = asyncio.Event()
            try:
                if not done:
                    await self._stop_actor(entry)
                if (
                    entry.task.done()
                    and self._live.get(loop_id) is entry
                    and journal.park(loop_id)
                ):
                    del self._live[loop_id]
                    self._ctx.metrics.passivated += 1
                    excess -= 1
            finally:
                entry.leaving.set()

    async def _deliver(
        self, offset: int, command: AnyCommand, actor: LoopActor | None
    ) -> None:
        """Note the command in the offset ledger and hand it to its actor.

        A command the loop has already applied (at or before its durable mark,
        or answered since) is skipped, however far back redelivery started.
        """
        if actor is None:
            if isinstance(command, DeleteLoop):
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
            # deletion) restarts the loop; any other command has nothing left
            # to act on.
            if not isinstance(command, SubmitInput | DeleteLoop):
                return
            try:
                restarted = await self._actor_for(command)
            except TurnstreamError:
                return  # stays unanswered: read again from the committed offset
            if restarted is not None and not (self._closing or self.broken):
                restarted.post(command, offset)

    async def _unknown_loop(self, command: DeleteLoop) -> None:
        """Answer a ``DeleteLoop`` of a loop this partition holds nothing of.

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

    async def _actor_for(self, command: AnyCommand) -> LoopActor | None:
        """The live actor of the command's loop, restored or created if needed.

        Raises:
            TransportError: Kafka could not be read (transient).
            TurnstreamError: the loop cannot be restored (permanent).
        """
        loop_id = LoopId(command.loop_id)
        live = self._live.get(loop_id)
        if live is not None and live.leaving is not None:
            await live.leaving.wait()  # passivated (or not) before it goes on
            live = self._live.get(loop_id)
        if live is not None and isinstance(command, SubmitInput):
            await self._retire_refusing(live)
        if live is not None and live.actor.status is not LoopStatus.STOPPED:
            self._live[loop_id] = self._live.pop(loop_id)  # most recently used
            return live.actor
        if live is not None:
            del self._live[loop_id]
        journal = self.journal
        # Only an input (re)starts a loop -- and a Shutdown or DeleteLoop of a
        # known one, so that its LoopStopped or LoopDeleted is recorded
        # whichever process restores it.
        stop = isinstance(command, Shutdown | DeleteLoop) and journal.known(loop_id)
        if not (isinstance(command, SubmitInput) or stop):
            return None
        ctx = self._ctx
        asked = command.agent if isinstance(command, SubmitInput) else ""
        setup = ctx.setup_for(loop_id, asked)
        binds = _may_bind(command, setup)
        refusing = not binds
        try:
            if journal.known(loop_id):
                state = await restore_loop(
                    journal,
                    loop_id,
                    clock=ctx.clock,
                    ids=ctx.ids,
                    commit_timeout=setup.config.commit_timeout,
                    policy=self._restore_policy(loop_id),
                )
                # The loop keeps the agent it is bound to; a loop that only
                # ever refused input (never announced) is bound by this one.
                announced = bool(state.model)
                refusing = not announced and not binds
                if announced:
                    setup = ctx.setup_for(loop_id, state.agent_name)
                actor = LoopActor.from_state(
                    state,
                    config=setup.config,
                    model=setup.model,
                    journal=journal,
                    hub=ctx.hub,
                    clock=ctx.clock,
                    ids=ctx.ids,
                    hooks=_traced(setup.hooks, ctx.tracer),
                    access_policy=setup.access_policy,
                    announce=not announced and not stop and binds and not state.deleted,
                )
            else:
                await journal.recover(loop_id)
                actor = LoopActor(
                    session_id=SessionId(command.session_id),
                    loop_id=loop_id,
                    config=setup.config,
                    model=setup.model,
                    journal=journal,
                    hub=ctx.hub,
                    clock=ctx.clock,
                    ids=ctx.ids,
                    hooks=_traced(setup.hooks, ctx.tracer),
                    access_policy=setup.access_policy,
                    announce=binds,
                )
        except RestoreError as exc:
            _log.error(
                "loop could not be restored",
                extra={"partition": self.partition, "reason": exc.reason},
            )
            if isinstance(exc.__cause__, TransportError):
                raise exc.__cause__ from exc
            raise
        if self._closing or self.broken:
            return None
        task = ctx.spawn(self._run_actor(actor), f"loop-{loop_id}")
        self._live[loop_id] = _Live(actor, task, refusing=refusing)
        return actor

    async def _retire_refusing(self, live: _Live) -> None:
        """Stop a loop that only refuses before a new input.

        It refuses when its agent is not hosted here, or when its first input
        named a model the agent does not allow. A refusal binds nothing, so
        the next input is resolved afresh: once the refusing actor has
        answered everything before it, it is stopped (quietly) and the input
        gets a new actor.
        """
        actor = live.actor
        if (actor.config.hosted and not live.refusing) or (
            actor.status is LoopStatus.STOPPED
        ):
            return
        ctx = self._ctx
        stop = Shutdown(
            command_id=CommandId(ctx.ids.new_id()),
            session_id=actor.session_id,
            loop_id=actor.loop_id,
            created_at=ctx.clock.now(),
            agency=Agency.MACHINE,
        )
        try:
            async with asyncio.timeout(ctx.stop_timeout):
                await actor.wait_idle()
                await actor.shutdown(stop)
        except TimeoutError:
            _log.warning("refusing loop did not stop in time")

    async def _run_actor(self, actor: LoopActor) -> None:
        self._ctx.metrics.live_loops += 1
        try:
            await actor.run()
        finally:
            self._ctx.metrics.live_loops -= 1

    # ------------------------------------------------------------ stopping

    @property
    def running_turns(self) -> int:
        """Loops of this partition with a turn still running."""
        return sum(
            1
            for entry in self._live.values()
            if entry.actor.status in (LoopStatus.RUNNING, LoopStatus.SHUTTING_DOWN)
            and not entry.actor.turn_suspended
            and not entry.task.done()
        )

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
        for entry in self._live.values():
            if not entry.task.done():
                entry.actor.suspend_turn()

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
        live = list(self._live.values())
        if live and not self.broken:
            async with asyncio.TaskGroup() as group:
                for entry in live:
                    group.create_task(self._stop_actor(entry))
        await self._finish(live)

    async def abandon(self) -> None:
        """Stop without writing anything more (fenced, failed or lost)."""
        self._closing = True
        await self._finish(list(self._live.values()))

    async def give_up(self) -> None:
        """Stop at once, writing nothing and waiting on no commit (Kafka is down).

        The writer is failed first, so nothing waits for a transaction that
        cannot commit; the next owner's restore ends the turns that ran here.
        """
        self._closing = True
        self.writer.fail()
        await self._finish(list(self._live.values()), grace=1.0)

    async def _stop_actor(self, entry: _Live) -> None:
        ctx = self._ctx
        actor = entry.actor
        command = Shutdown(
            command_id=CommandId(ctx.ids.new_id()),
            session_id=actor.session_id,
            loop_id=actor.loop_id,
            created_at=ctx.clock.now(),
            agency=Agency.MACHINE,
        )
        try:
            async with asyncio.timeout(ctx.stop_timeout):
                await actor.shutdown(command, handover=True)
                await asyncio.wait([entry.task])
        except TimeoutError:
            _log.warning(
                "loop did not stop in time", extra={"partition": self.partition}
            )

    async def _finish(self, live: list[_Live], *, grace: float | None = None) -> None:
        wait = self._ctx.stop_timeout if grace is None else grace
        if self._sweeper_task is not None:
            self._sweeper_task.cancel()
        for entry in live:
            entry.task.cancel()
        if live:
            await asyncio.wait([e.task for e in live], timeout=wait)
        self._live.clear()
        if self._history is not None:
            await self._history.close()
        await self.writer.close()
        if self._writer_task is not None:
            await asyncio.wait([self._writer_task], timeout=wait)
            if not self._writer_task.done():
                self._writer_task.cancel()
                await asyncio.wait([self._writer_task], timeout=1.0)
