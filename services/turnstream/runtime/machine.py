"""A loop's state and how each message changes it (contract §4).

Owns :class:`LoopMachine`: the mutable state of one loop -- status, turn
index, committed history, inbox and draining entries, open gates, the running
turn -- and the handler of every domain message: admission (§4.2), turn start
in strict order (§4.3), the turn's hand-offs (commit, drain, gates; §4.4,
§4.7, §4.9), interrupt / shutdown / drain timeout (§4.8), a continuing
agent's turn stopped open for a planned stop or a handover, and terminal
handling with queue resolution (§4.6). Only the loop's actor task calls it, one
message at a time, so nothing here needs a lock. Every state change follows a
committed :class:`~turnstream.runtime.writer.LoopWriter` commit, never precedes
it. Imports the turn modules, ports and value types; never an adapter.

One module on purpose (~450 lines): every transition of one loop's state, driven
by one actor; the turn's own steps live in ``turn``/``step``/``tools``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TypeVar
from uuid import UUID

from turnstream.commands import DeleteLoop, Interrupt, RespondGate, Retract, SubmitInput
from turnstream.content import Conversation, UserMessage
from turnstream.events import (
    Agency,
    CancelReason,
    Cause,
    EnduringEvent,
    GateCloseReason,
    RejectReason,
    StepDone,
    TurnStarted,
)
from turnstream.ids import (
    CommandId,
    GateId,
    LoopId,
    SessionId,
    StepId,
    ToolExecutionId,
    TurnId,
)
from turnstream.runtime.config import LoopConfig
from turnstream.runtime.errors import RestoreError
from turnstream.runtime.gates import (
    PERMISSION_ACTIONS,
    GateAnswer,
    GateTable,
    PendingGate,
    abandon_gates,
    answer_gate,
    open_gate,
    resolved_event,
)
from turnstream.runtime.handshake import (
    Completed,
    Failed,
    Interrupted,
    TurnOutcome,
    TurnSpec,
)
from turnstream.runtime.hooks import HookCall, HookRunner, Operation, Outcome, Started
from turnstream.runtime.input_queue import (
    Inbox,
    QueuedInput,
    SeenCommands,
    input_problem,
)
from turnstream.runtime.mailbox import (
    ActorMessage,
    CommitRequest,
    DrainExpired,
    DrainRequest,
    Mailbox,
    OpenGateRequest,
    TurnEnded,
)
from turnstream.runtime.model_client import ModelClient
from turnstream.runtime.ports import AccessPolicy
from turnstream.runtime.supervision import TurnTasks
from turnstream.runtime.turn_handle import (
    ActiveTurn,
    hook_outcome,
    launch_turn,
    turn_usage,
)
from turnstream.runtime.writer import LoopWriter
from turnstream.state import LoopState, OpenTurn

__all__ = ["LoopMachine", "LoopStatus"]

_log = logging.getLogger(__name__)
T = TypeVar("T")


class LoopStatus(StrEnum):
    """Where the loop is in its life."""

    IDLE = "idle"
    RUNNING = "running"
    SHUTTING_DOWN = "shutting_down"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class _Closing:
    """What follows a committed terminal in the same commit (queue resolution).

    Attributes:
        returned: the entries returned as ``InputCancelled{reason}``.
        stop: the loop stops after the turn (no ``LoopIdle``).
        stop_durably: ... with a ``LoopStopped`` (a client's shutdown).
        delete: ... with a ``LoopDeleted`` (a client's ``DeleteLoop``).
        parks: the commit ends with ``LoopIdle``.
    """

    returned: list[QueuedInput]
    reason: CancelReason
    stop: bool = False
    stop_durably: bool = False
    delete: bool = False
    parks: bool = False


class _Unstartable:
    """The queued turn to chain cannot start: its id could not be minted."""


_UNSTARTABLE = _Unstartable()


@dataclass(frozen=True, slots=True)
class _Opening:
    """A turn about to start: its ``TurnStarted`` and what the turn runs on."""

    entry: QueuedInput
    turn_id: TurnId
    index: int
    config: LoopConfig
    hook: Started
    started: TurnStarted
    history: tuple[Conversation, ...]


@dataclass(frozen=True, slots=True)
class _Step:
    """A step the actor commits with the terminal, and the history it adds."""

    events: tuple[EnduringEvent, ...]
    messages: tuple[Conversation, ...]


class LoopMachine:
    """The state of one loop and its transitions (driven by the actor only)."""

    def __init__(
        self,
        *,
        session_id: SessionId,
        loop_id: LoopId,
        config: LoopConfig,
        model: ModelClient,
        writer: LoopWriter,
        mailbox: Mailbox[ActorMessage],
        hooks: HookRunner,
        access_policy: AccessPolicy | None,
        state: LoopState | None,
    ) -> None:
        self.session_id = session_id
        self.loop_id = loop_id
        self.config = config
        self._model = model
        self._writer = writer
        self._factory = writer.factory
        self._mail = mailbox
        self._hooks = hooks
        self._access_policy = access_policy
        self.status = LoopStatus.IDLE
        self._stopped = state.stopped if state else False
        self._stop_durably = False
        self._deleted = state.deleted if state else False
        # The DeleteLoop being applied (its LoopDeleted not committed yet).
        self._deleting: Cause | None = None
        self._turn_index = state.turn_index if state else 0
        self._messages: list[Conversation] = list(state.messages) if state else []
        self._inbox = Inbox(config.inbox_capacity)
        recent = state.recent_command_ids if state else ()
        self.seen = SeenCommands(CommandId(c) for c in recent)
        self._gates = GateTable()
        # A turn restored to continue: resumed when the actor starts.
        self._resuming = state.open_turn if state else None
        # The resumed turn's gates opened before the crash, until a call of
        # the same tool and summary takes one over (or the turn ends).
        self._orphans: dict[GateId, tuple[str, str, PendingGate]] = {}
        self._active: ActiveTurn | None = None
        self._generation = 0
        self.tasks: TurnTasks[TurnOutcome] = TurnTasks()

    @property
    def parked(self) -> bool:
        """Idle with no turn: nothing left to start."""
        return self.status is LoopStatus.IDLE and self._active is None

    @property
    def deleted(self) -> bool:
        """Whether the loop's ``LoopDeleted`` is committed."""
        return self._deleted

    @property
    def turn_suspended(self) -> bool:
        """The open turn stopped after a committed step (a planned stop)."""
        return self._active is not None and self._active.suspended

    def snapshot(self) -> LoopState:
        """The committed state (history is exactly what the journal holds)."""
        progress = self._writer.progress.after(())
        active = self._active
        open_turn = (
            OpenTurn(turn_id=active.turn_id, turn_index=active.turn_index)
            if active
            else None
        )
        return LoopState(
            session_id=self.session_id,
            loop_id=self.loop_id,
            agent_name=self.config.agent_name,
            model=self.config.model,
            turn_index=self._turn_index,
            messages=tuple(self._messages),
            open_turn=open_turn,
            recent_command_ids=self.seen.recent(),
            updated_at=self._factory.now(),
            applied_command_offset=progress.applied,
            pending_command_offsets=progress.pending,
            stopped=self._stopped,
            deleted=self._deleted,
        )

    def abandon_gates(self) -> None:
        """Wake every parked call (the actor is going away)."""
        self._orphans.clear()
        for gate in self._gates.close_all():
            gate.settle(None)

    # ------------------------------------------------------------------
    # Admission (§4.2) and turn start (§4.3)
    # ------------------------------------------------------------------

    async def on_submit(
        self, command: SubmitInput, position: int | None = None
    ) -> None:
        """Admit, queue or refuse an input (``position``: its place in the log)."""
        command_id = CommandId(command.command_id)
        if command_id in self.seen:
            return  # a redelivered command: it was resolved already
        self.seen.add(command_id)
        if position is not None:
            self._writer.progress.admit(position, command_id)
        refusal = self._refusal(command)
        if refusal is not None:
            await self._writer.reject(command_id, *refusal)
            return
        entry = QueuedInput(
            command_id=command_id,
            agency=command.agency,
            message=command.message,
            # An input choosing its turn's model or options starts its own turn.
            no_fold=command.no_fold or command.picks_turn_options(),
            model=command.model,
            max_tokens=command.max_tokens,
        )
        if self.status is LoopStatus.IDLE:
            await self._start_turn(entry)  # no InputQueued for an immediate start
            return
        if self._inbox.full:
            await self._writer.reject(command_id, RejectReason.QUEUE_FULL)
            return
        self._inbox.push(replace(entry, queued=True))
        await self._writer.queued(command_id)

    def _refusal(  # noqa: PLR0911 - one return per refusal, in check order
        self, command: SubmitInput
    ) -> tuple[RejectReason, str] | None:
        """Why this loop refuses ``command`` before it becomes a turn, if it does."""
        config = self.config
        if self._deleted or self._deleting is not None:
            return RejectReason.LOOP_DELETED, "the loop was deleted"
        if self.status in (LoopStatus.SHUTTING_DOWN, LoopStatus.STOPPED):
            return RejectReason.SHUTTING_DOWN, ""
        if not config.hosted:
            if not config.agent_name:
                detail = "name an agent: this service hosts several"
            else:
                detail = f"agent {config.agent_name!r} is not hosted by this service"
            return RejectReason.UNKNOWN_AGENT, detail
        if command.agent and command.agent != config.agent_name:
            return (
                RejectReason.WRONG_AGENT,
                f"the loop is bound to agent {config.agent_name!r}",
            )
        if self._stopped and not config.reopen_after_shutdown:
            return RejectReason.SHUTTING_DOWN, "the loop was shut down"
        if command.model and command.model not in config.allowed_models():
            allowed = ", ".join(config.allowed_models())
            return RejectReason.MODEL_NOT_ALLOWED, f"allowed models: {allowed}"
        problem = input_problem(command.message)
        if problem is not None:
            return RejectReason.INVALID_INPUT, problem
        return None

    async def _start_turn(self, entry: QueuedInput) -> bool:
        """Open a turn for ``entry``; ``False`` (and ``entry`` resolved) if not."""
        try:
            turn_id = TurnId(self._factory.new_id())
        except Exception:  # noqa: BLE001 - fail secure: the input is resolved, never stranded
            _log.warning("turn id could not be minted")
            await self._start_failed(entry)
            return False
        hook = await self._hooks.start(self._turn_call(entry, turn_id))
        if hook.blocked is not None:
            await self._start_failed(entry)  # the hook finishes after the rejection
            hook.finish(Outcome.DENIED if hook.blocked.denied else Outcome.FAILED)
            return False
        opening = self._opening(entry, turn_id, hook)
        if not await self._writer.commit(
            [opening.started], apply=lambda: self._install(opening)
        ):
            await self._start_failed(entry)
            hook.finish(Outcome.FAILED)
            return False
        self._launch(opening)
        return True

    def _turn_call(self, entry: QueuedInput, turn_id: TurnId) -> HookCall:
        return HookCall(
            operation=Operation.TURN,
            started_at=self._factory.now(),
            session_id=self.session_id,
            loop_id=self.loop_id,
            turn_id=turn_id,
            turn_index=self._turn_index + 1,
            input=entry.message,
            command_id=entry.command_id,
        )

    def _opening(self, entry: QueuedInput, turn_id: TurnId, hook: Started) -> _Opening:
        """The next turn for ``entry``: its ``TurnStarted`` and request base."""
        config = self.config
        if entry.model or entry.max_tokens is not None:
            # Captured here, for the whole turn: TurnStarted records it.
            config = replace(
                config,
                model=entry.model or config.model,
                max_tokens=entry.max_tokens or config.max_tokens,
            )
        index = self._turn_index + 1
        started = TurnStarted(
            header=self._factory.header(
                turn_id=turn_id,
                cause=Cause(command_id=entry.command_id, agency=entry.agency),
            ),
            turn_index=index,
            message=entry.message,
            model=config.model,
            max_tokens=config.max_tokens,
        )
        # The request base: a copy of history before the input, never an alias.
        return _Opening(
            entry, turn_id, index, config, hook, started, tuple(self._messages)
        )

    def _install(self, opening: _Opening) -> None:
        """After ``TurnStarted`` is durable: the input joins history."""
        self._turn_index = opening.index
        self._messages.append(opening.entry.message)
        self._stopped = False  # a reopened loop (the agent allows it)

    async def _chained(self, closing: _Closing) -> _Opening | _Unstartable | None:
        """The queued turn a completed turn's end can commit with it, if any.

        Only without Turn hooks: a hook's begin and guard run before its
        turn's ``TurnStarted``, and its finish sees the previous terminal
        durable alone. The entry stays queued until the commit applies;
        ``_UNSTARTABLE`` if it cannot start (it is returned after the end).
        """
        if closing.parks or closing.stop or self._hooks.handles(Operation.TURN):
            return None
        front = self._inbox.draining or self._inbox.entries()
        if not front:
            return None
        entry = front[0]
        try:
            turn_id = TurnId(self._factory.new_id())
        except Exception:  # noqa: BLE001 - fail secure: the input is resolved, never stranded
            _log.warning("turn id could not be minted")
            return _UNSTARTABLE
        hook = await self._hooks.start(self._turn_call(entry, turn_id))
        if hook.blocked is not None:
            return None
        return self._opening(entry, turn_id, hook)

    def _launch(self, opening: _Opening) -> None:
        self._generation += 1
        spec = TurnSpec(
            session_id=self.session_id,
            loop_id=self.loop_id,
            turn_id=opening.turn_id,
            turn_index=opening.index,
            message=opening.entry.message,
            history=opening.history,
            config=opening.config,
            model=self._model,
            hooks=self._hooks,
            access_policy=self._access_policy,
            factory=self._factory,
            check_effect_topic=self._writer.check_effect_topic,
        )
        self._run(spec, opening.hook)

    def _run(self, spec: TurnSpec, hook: Started) -> None:
        self._active = launch_turn(
            spec,
            generation=self._generation,
            hook=hook,
            mailbox=self._mail,
            publish=self._writer.publish,
            tasks=self.tasks,
        )
        self.status = LoopStatus.RUNNING

    def resume(self) -> bool:
        """Run the turn a crash left open again; ``True`` iff one was resumed.

        The restore committed its ``TurnResumed``; the turn goes on after its
        last committed ``StepDone``, with the model and cap its ``TurnStarted``
        recorded. Its Turn hook's guard ran when it started: a resumed turn is
        observed from here on, not guarded again. Its gates opened before the
        crash stay open and answerable: a call of the resumed turn that asks
        the same tool with the same summary takes the oldest one over.
        """
        turn, self._resuming = self._resuming, None
        if turn is None:
            return False
        at = turn.message_index
        message = self._messages[at]
        if not isinstance(message, UserMessage):  # from_state checked it
            raise RestoreError("open_turn")
        config = self.config
        if turn.model or turn.max_tokens is not None:
            config = replace(
                config,
                model=turn.model or config.model,
                max_tokens=turn.max_tokens or config.max_tokens,
            )
        turn_id = TurnId(turn.turn_id)
        call = HookCall(
            operation=Operation.TURN,
            started_at=self._factory.now(),
            session_id=self.session_id,
            loop_id=self.loop_id,
            turn_id=turn_id,
            turn_index=turn.turn_index,
            input=message,
        )
        self._generation += 1
        for gate in turn.gates:
            pending = PendingGate(
                gate_id=GateId(gate.gate_id),
                generation=self._generation,
                turn_id=turn_id,
                step_id=StepId(gate.step_id),
                tool_execution_id=ToolExecutionId(UUID(int=0)),
                actions=PERMISSION_ACTIONS,
                answer=asyncio.get_running_loop().create_future(),
            )
            self._gates.install(pending)
            self._orphans[pending.gate_id] = (gate.tool_name, gate.summary, pending)
        spec = TurnSpec(
            session_id=self.session_id,
            loop_id=self.loop_id,
            turn_id=turn_id,
            turn_index=turn.turn_index,
            message=message,
            history=tuple(self._messages[:at]),
            resumed=tuple(self._messages[at + 1 :]),
            first_step=turn.steps,
            decided=tuple((d.tool_name, d.effect) for d in turn.decisions),
            config=config,
            model=self._model,
            hooks=self._hooks,
            access_policy=self._access_policy,
            factory=self._factory,
            check_effect_topic=self._writer.check_effect_topic,
        )
        self._run(spec, Started(call=call, blocked=None))
        return True

    def _adopt(self, request: OpenGateRequest) -> bool:
        """Hand a resumed turn's gate from before the crash to ``request``.

        The oldest one of the same tool and summary; its answer (given before
        or after the take-over) becomes the call's. ``False``: none matches.
        """
        wanted = (request.request.tool_name, request.request.summary)
        for gate_id, (tool_name, summary, gate) in self._orphans.items():
            if (tool_name, summary) != wanted:
                continue
            del self._orphans[gate_id]
            gate.answer.add_done_callback(functools.partial(_relay, request.answer))
            return True
        return False

    async def _start_failed(self, entry: QueuedInput) -> None:
        """Resolve an input whose turn could not start (contract §4.3 step 1)."""
        if entry.queued:
            await self._writer.cancel_inputs([entry], CancelReason.TURN_FAILED, None)
        else:
            await self._writer.reject(entry.command_id, RejectReason.INTERNAL)

    async def on_retract(self, command: Retract) -> None:
        """Withdraw a queued input; a silent no-op if it is not queued (§4.8)."""
        entry = self._inbox.retract(CommandId(command.target_command_id))
        if entry is not None:
            await self._writer.cancel_inputs(
                [entry], CancelReason.CLIENT_RETRACTED, None
            )

    # ------------------------------------------------------------------
    # Hand-offs from the running turn (§4.4, §4.7, §4.9)
    # ------------------------------------------------------------------

    def _current(self, generation: int) -> ActiveTurn | None:
        """The active turn if ``generation`` is it and it is not being cancelled."""
        active = self._active
        if active is None or active.generation != generation or active.cancelling:
            return None
        return active

    async def on_commit(self, request: CommitRequest) -> None:
        """Commit a turn's events; only then grow history (and settle a fold).

        The turn's final step is only taken here: the terminal's commit
        carries it, so a text turn ends in one commit, not two.
        """
        active = self._current(request.generation)
        if active is None or request.reply.done():
            _settle(request.reply, False)  # a cancelled turn commits nothing more
            return
        if request.final:
            active.held = request
            _settle(request.reply, True)
            return

        def apply() -> None:
            self._messages.extend(request.messages)
            for command_id in request.folded:
                self._inbox.folded(command_id)

        committed = await self._writer.commit(
            request.events, apply=apply, effects=request.effects
        )
        _settle(request.reply, committed)
        if (
            committed
            and active.suspending
            and self._active is active
            and not active.cancelling
            and any(isinstance(e, StepDone) for e in request.events)
        ):
            # The step boundary a planned stop waits for: the turn stops here,
            # before its next request, and stays open (see on_suspend).
            active.cancel(self._mail, self.config.drain_timeout)

    def on_drain(self, request: DrainRequest) -> None:
        """Hand the leading run of foldable input to the turn (§4.7)."""
        if self._current(request.generation) is None or request.reply.done():
            _settle(request.reply, None)
            return
        _settle(request.reply, self._inbox.drain_foldable())

    async def on_open_gate(self, request: OpenGateRequest) -> None:
        """Open an approval gate for the running turn's tool call."""
        active = self._current(request.generation)
        if active is None or request.answer.done():
            _settle(request.answer, None)
            return
        if self._orphans and self._adopt(request):
            return
        await open_gate(
            self._gates,
            self._writer,
            generation=active.generation,
            turn_id=active.turn_id,
            request=request.request,
            answer=request.answer,
        )

    async def on_answer(self, command: RespondGate) -> GateAnswer:
        """Route a gate answer; stale, unknown or duplicate answers are dropped."""
        gate_id = GateId(command.gate_id)
        return await answer_gate(self._gates, self._writer, gate_id, command.action)

    # ------------------------------------------------------------------
    # Interrupt, shutdown, drain timeout (§4.8)
    # ------------------------------------------------------------------

    def on_interrupt(self) -> bool:
        """Cancel the running turn; ``True`` iff this cancelled one.

        A suspended turn (stopped after a step, open) ends interrupted too,
        and so does one about to be suspended: the interrupt wins.
        """
        active = self._active
        if active is None:
            return False
        if active.suspending or active.suspended:
            active.suspending = False
            if active.suspended:
                self._wake_suspended(active)
                return True
            if active.cancelling:
                return True  # its end, in flight, is now an interrupt
        if active.cancelling:
            return False
        active.cancel(self._mail, self.config.drain_timeout)
        return True

    def _wake_suspended(self, active: ActiveTurn) -> None:
        """End a suspended turn (its task is over) through the usual end."""
        active.suspended = False
        self._mail.put_internal(TurnEnded(active.generation, Interrupted()))

    def on_suspend(self) -> bool:
        """A planned stop: stop a continuing turn after its next committed step.

        Only for an agent that continues turns (``on_restore="continue"``):
        the turn runs on until its current step's ``StepDone`` commits, then
        its task is cancelled before the next model request and the turn
        stays open -- no terminal, gates as they are -- while the actor keeps
        serving (an interrupt still ends it). A handover then leaves it to the
        next owner, which resumes it after that step. A final text step is
        committed with ``TurnDone`` as usual. ``True`` iff a turn will stop.
        """
        active = self._active
        if (
            not self.config.restore.continues
            or active is None
            or active.cancelling
            or self.status is not LoopStatus.RUNNING
        ):
            return False
        active.suspending = True
        return True

    async def on_interrupt_command(self, command: Interrupt) -> bool:
        """Apply an ``Interrupt``; ``True`` iff it cancelled a turn.

        Without a turn id it cancels whichever turn runs. With one, only that
        turn: a turn no longer running (ended, or never this loop's) is left
        alone, and so is any later turn, and the interrupt is answered
        ``TurnRejected{turn_ended}``, so its sender is not left waiting.
        """
        active = self._active
        if command.turn_id is None or (
            active is not None and active.turn_id == command.turn_id
        ):
            return self.on_interrupt()
        await self._writer.reject(
            CommandId(command.command_id), RejectReason.TURN_ENDED
        )
        return False

    async def on_shutdown(
        self, *, durable: bool = False, handover: bool = False
    ) -> None:
        """Stop: cancel the turn (its terminal finishes the shutdown) or stop now.

        Args:
            durable: a client's ``Shutdown`` from the command log: the stop
                ends with a durable ``LoopStopped``, so every later owner
                refuses new input alike. A host's own stop (handover, a
                session closing) writes none.
            handover: another owner takes the loop over. A continuing
                agent's turn is then left open for it: cancelled if it still
                runs, its uncommitted step dropped, and nothing written that
                ends it (no terminal, no abandoned gate) -- unless an
                interrupt is already ending it.
        """
        if durable:
            self._stop_durably = True
        if self.status in (LoopStatus.SHUTTING_DOWN, LoopStatus.STOPPED):
            return  # a second shutdown just waits for the first
        self.status = LoopStatus.SHUTTING_DOWN
        active = self._active
        if active is not None:
            interrupting = active.cancelling and not (
                active.suspending or active.suspended
            )
            if (
                handover
                and self.config.restore.continues
                and not durable
                and not interrupting
            ):
                active.leave_open = True
            else:
                active.suspending = False
            if active.suspended:
                self._wake_suspended(active)
            elif not active.cancelling:
                active.cancel(self._mail, self.config.drain_timeout)
            return
        returned = self._inbox.take_all()
        if self._deleting is not None:
            # The returned inputs and LoopDeleted: one commit.
            cancelled = self._writer.cancelled_events(
                returned, CancelReason.LOOP_DELETED, None
            )
            await self._commit_deleted(cancelled)
        else:
            await self._writer.cancel_inputs(
                returned, CancelReason.TURN_INTERRUPTED, None
            )
            await self._stopped_for_good()
        self.status = LoopStatus.STOPPED

    async def on_delete(self, command: DeleteLoop) -> None:
        """Apply a ``DeleteLoop``: stop as a client's shutdown does, then delete.

        The running turn is interrupted and queued input returned
        (``InputCancelled{loop_deleted}``); ``LoopDeleted`` is committed after
        them -- with the terminal when it can -- and the loop's history is
        dropped. A loop deleted already answers ``TurnRejected{loop_deleted}``.
        """
        command_id = CommandId(command.command_id)
        if command_id in self.seen:
            return  # a redelivered command: it was resolved already
        self.seen.add(command_id)
        if self._deleted or self._deleting is not None:
            await self._writer.reject(
                command_id, RejectReason.LOOP_DELETED, "the loop is deleted already"
            )
            return
        self._deleting = Cause(command_id=command_id, agency=command.agency)
        await self.on_shutdown(durable=True)

    async def delete_stopped(self, command: DeleteLoop) -> None:
        """Apply a ``DeleteLoop`` taken after the loop stopped (nothing runs)."""
        command_id = CommandId(command.command_id)
        if command_id in self.seen:
            return
        self.seen.add(command_id)
        if self._deleted:
            await self._writer.reject(
                command_id, RejectReason.LOOP_DELETED, "the loop is deleted already"
            )
            return
        self._deleting = Cause(command_id=command_id, agency=command.agency)
        await self._commit_deleted([])

    async def _commit_deleted(self, before: Sequence[EnduringEvent]) -> None:
        """Commit ``before`` and ``LoopDeleted`` together; then forget history."""
        cause = self._deleting
        if cause is None:
            return
        events = [*before, self._writer.deleted_event(cause)]
        if not await self._writer.commit(events, apply=self._forget_history):
            # Unanswered: the command is read again by the partition's next
            # owner (or this one, after a rebuild).
            _log.warning("LoopDeleted not committed; the loop is not deleted")
            self._deleting = None

    def _forget_history(self) -> None:
        """After ``LoopDeleted`` is durable: nothing of the conversation stays."""
        self._deleted = self._stopped = True
        self._deleting = None
        self._messages.clear()

    async def _stopped_for_good(self) -> None:
        """Commit ``LoopStopped`` after a client's shutdown (after everything else).

        A deletion commits ``LoopDeleted`` instead.
        """
        if self._deleting is not None:
            await self._commit_deleted([])
            return
        if not self._stop_durably or self._stopped or not self.config.hosted:
            return

        def apply() -> None:
            self._stopped = True

        if not await self._writer.commit([self._writer.stopped_event()], apply=apply):
            _log.warning("LoopStopped not committed; the loop may be reopened")

    async def on_drain_expired(self, message: DrainExpired) -> None:
        """A cancelled turn ignored cancellation: detach it and end it here."""
        active = self._active
        if active is None or active.generation != message.generation:
            return
        _log.warning("turn ignored cancellation; detached after the drain timeout")
        await self._end_turn(active, Interrupted())

    # ------------------------------------------------------------------
    # Terminal handling and queue resolution (§4.6)
    # ------------------------------------------------------------------

    async def on_turn_ended(self, message: TurnEnded) -> None:
        """The turn task's outcome (late ones of detached turns are ignored)."""
        active = self._active
        if active is None or active.generation != message.generation:
            return
        await self._end_turn(active, message.outcome)

    async def _end_turn(self, active: ActiveTurn, outcome: TurnOutcome) -> None:
        """Commit the turn's end: at best one commit, else piece by piece.

        A resumed turn's gates from before the crash that no call took over
        close with the turn's others (``abandoned``, after the terminal).

        The common end -- the final (or truncated) step's ``StepDone``, the
        terminal, the abandoned gates, the inputs it returns, and ``LoopIdle``
        or ``LoopStopped`` -- is one commit, in exactly the order the separate
        commits have. If that commit fails nothing of it is durable, and the
        end is committed again piece by piece (:meth:`_end_apart`), so every
        failure keeps the outcome it has when the pieces commit alone.
        """
        if active.leave_open:
            self._leave_open(active)
            return
        if (
            active.suspending
            and isinstance(outcome, Interrupted)
            and self.status is LoopStatus.RUNNING
        ):
            self._suspend(active)
            return
        active.close()
        self._orphans.clear()
        step: _Step | None = None
        if active.held is not None:
            held = active.held
            step = _Step(tuple(held.events), tuple(held.messages))
        elif not isinstance(outcome, Completed) and outcome.truncated is not None:
            pending = outcome.truncated
            if isinstance(outcome, Failed):
                event = self._writer.step_event(active.ended, pending)
                step = _Step((event,), (pending.message,))
            else:
                # An interrupted prefix has a short grace of its own (§4.5):
                # never merged, so the grace bounds the prefix alone.
                await self._writer.commit_step(
                    active.ended,
                    pending,
                    apply=lambda: self._messages.append(pending.message),
                    within=self.config.truncated_commit_grace,
                )
        if self.status is LoopStatus.RUNNING:
            self.status = LoopStatus.IDLE
        if await self._end_together(active, outcome, step):
            return
        await self._end_apart(active, outcome, step)

    def _suspend(self, active: ActiveTurn) -> None:
        """The turn stopped after a committed step: it stays open, not running."""
        active.close()
        active.suspending = False
        active.suspended = True
        _log.info(
            "turn suspended after its committed step; the next owner continues it"
        )

    def _leave_open(self, active: ActiveTurn) -> None:
        """Stop for a handover, leaving the turn open: write nothing that ends it.

        What was committed stays (its steps, its decisions, its open gates);
        the step that was running is dropped. The next owner's restore resumes
        the turn after its last ``StepDone`` (``TurnResumed``) and takes its
        gates over; queued inputs stay unanswered in the command log for it.
        """
        active.close()
        self._orphans.clear()
        active.hook.finish(Outcome.CANCELED)
        self._active = None
        for gate in self._gates.close_generation(active.generation):
            gate.settle(None)  # in memory only: the gate stays open in the journal
        self.status = LoopStatus.STOPPED
        _log.info("turn left open for the next owner")

    def _closing(self, outcome: TurnOutcome) -> _Closing:
        """How the queue resolves after a committed terminal (§4.6), unapplied."""
        inbox = self._inbox
        everything = [*inbox.draining, *inbox.entries()]  # the take_all order
        interrupted = isinstance(outcome, Interrupted)
        if self.status is LoopStatus.SHUTTING_DOWN:
            delete = self._deleting is not None
            durably = (
                not delete
                and self._stop_durably
                and not self._stopped
                and self.config.hosted
            )
            reason = self._stop_reason(interrupted)
            return _Closing(
                everything, reason, stop=True, stop_durably=durably, delete=delete
            )
        if isinstance(outcome, Failed):
            return _Closing(everything, CancelReason.TURN_FAILED, parks=True)
        if interrupted:
            machine = [e for e in everything if e.agency is not Agency.USER]
            return _Closing(machine, CancelReason.TURN_INTERRUPTED, parks=True)
        # A completed turn with input waiting chains: no LoopIdle (§4.6).
        return _Closing([], CancelReason.TURN_FAILED, parks=not everything)

    def _apply_closing(self, outcome: TurnOutcome, closing: _Closing) -> None:
        if closing.stop or isinstance(outcome, Failed):
            self._inbox.take_all()
        elif isinstance(outcome, Interrupted):
            self._inbox.keep_user_input()
        else:
            self._inbox.requeue_draining()
        if closing.stop_durably:
            self._stopped = True
        if closing.delete:
            self._forget_history()

    async def _end_together(
        self,
        active: ActiveTurn,
        outcome: TurnOutcome,
        step: _Step | None,
        *,
        chain: bool = True,
    ) -> bool:
        """The turn's end as one commit; ``False`` (nothing changed) if it failed.

        A completed turn with input waiting also commits the next turn's
        ``TurnStarted`` in it (the order is the same as apart). If that commit
        fails, the end is tried again without it, as it would be on its own.
        """
        ended = active.ended
        writer = self._writer
        events: list[EnduringEvent] = []
        if step is not None:
            events += step.events
        events.append(writer.terminal(ended, outcome))
        # A Turn hook's finish sees the terminal durable and nothing after it
        # (§4.6 steps 2-5), so with one the rest is a commit of its own.
        tail = not active.hook.observed
        gates = self._gates.of_generation(active.generation) if tail else []
        reason = GateCloseReason.ABANDONED
        events += [resolved_event(self._factory, g, reason) for g in gates]
        closing = self._closing(outcome)
        opening: _Opening | _Unstartable | None = None
        if tail:
            events += writer.cancelled_events(closing.returned, closing.reason, ended)
            if closing.stop_durably:
                events.append(writer.stopped_event())
            if closing.delete and self._deleting is not None:
                events.append(writer.deleted_event(self._deleting))
            if closing.parks:
                events.append(writer.idle_event())
            opening = await self._chained(closing) if chain else None
            if isinstance(opening, _Opening):
                events.append(opening.started)

        def apply() -> None:
            if step is not None:
                self._messages.extend(step.messages)
            if tail:
                self._gates.close_generation(active.generation)
                self._apply_closing(outcome, closing)
            if isinstance(opening, _Opening):
                self._inbox.pop()  # the front entry: the opening's own
                self._install(opening)

        if not await writer.commit(events, apply=apply):
            if isinstance(opening, _Opening):
                return await self._end_together(active, outcome, step, chain=False)
            return False
        active.hook.finish(*hook_outcome(outcome), usage=turn_usage(outcome))
        self._active = None
        if not tail:
            await abandon_gates(self._gates, writer, active.generation)
            await self._resolve_queue(active, outcome, terminal_ok=True)
            return True
        for gate in gates:
            gate.settle(None)
        await self._after_end(outcome, closing, opening)
        return True

    async def _after_end(
        self,
        outcome: TurnOutcome,
        closing: _Closing,
        opening: _Opening | _Unstartable | None,
    ) -> None:
        """After an end committed with its tail: stop, start the next, or park."""
        if closing.stop:
            self.status = LoopStatus.STOPPED  # quiet: no LoopIdle (§10.1.6)
        elif isinstance(outcome, Interrupted):
            await self._start_next()  # retained user input starts after LoopIdle
        elif isinstance(opening, _Opening):
            self._launch(opening)  # its TurnStarted committed with the end
        elif isinstance(opening, _Unstartable):
            entry = self._inbox.pop()
            if entry is not None:
                await self._start_failed(entry)
            await self._return_the_rest()
            await self._writer.park()
        elif not closing.parks and not await self._start_next():
            await self._writer.park()

    async def _end_apart(
        self, active: ActiveTurn, outcome: TurnOutcome, step: _Step | None
    ) -> None:
        """The turn's end as separate commits, each failure with its own outcome."""
        if step is not None:
            committed = await self._writer.commit(
                step.events, apply=lambda: self._messages.extend(step.messages)
            )
            if not committed and isinstance(outcome, Completed):
                outcome = Interrupted()  # any commit error interrupts (§10.1.7)
        terminal = self._writer.terminal(active.ended, outcome)
        terminal_ok = await self._writer.commit([terminal])
        active.hook.finish(*hook_outcome(outcome), usage=turn_usage(outcome))
        self._active = None
        # Still-open gates are closed after the terminal (§10.1.17).
        await abandon_gates(self._gates, self._writer, active.generation)
        await self._resolve_queue(active, outcome, terminal_ok=terminal_ok)

    async def _resolve_queue(
        self, active: ActiveTurn, outcome: TurnOutcome, *, terminal_ok: bool
    ) -> None:
        interrupted = isinstance(outcome, Interrupted)
        if self.status is LoopStatus.SHUTTING_DOWN:
            reason = self._stop_reason(interrupted)
            await self._writer.cancel_inputs(
                self._inbox.take_all(), reason, active.ended
            )
            await self._stopped_for_good()
            self.status = LoopStatus.STOPPED  # quiet: no LoopIdle (§10.1.6)
            return
        if not terminal_ok or isinstance(outcome, Failed):
            await self._writer.cancel_inputs(
                self._inbox.take_all(), CancelReason.TURN_FAILED, active.ended
            )
            await self._writer.park()
            return
        if interrupted:
            returned = self._inbox.keep_user_input()
            await self._writer.cancel_inputs(
                returned, CancelReason.TURN_INTERRUPTED, active.ended
            )
            await self._writer.park()
            await self._start_next()  # retained user input starts after LoopIdle
            return
        self._inbox.requeue_draining()
        if not await self._start_next():  # chained: no LoopIdle in between
            await self._writer.park()

    def _stop_reason(self, interrupted: bool) -> CancelReason:
        """Why a stop returns the queued inputs."""
        if self._deleting is not None:
            return CancelReason.LOOP_DELETED
        if interrupted:
            return CancelReason.TURN_INTERRUPTED
        return CancelReason.TURN_FAILED

    async def _start_next(self) -> bool:
        """Start the front entry; ``True`` iff a turn started.

        A failed start returns every other entry too (``turn_failed``), so no
        input is stranded behind a loop that cannot start turns.
        """
        entry = self._inbox.pop()
        if entry is None:
            return False
        if await self._start_turn(entry):
            return True
        await self._return_the_rest()
        return False

    async def _return_the_rest(self) -> None:
        """After a failed start: no input is stranded behind it."""
        await self._writer.cancel_inputs(
            self._inbox.take_all(), CancelReason.TURN_FAILED, None
        )


def _relay(
    answer: asyncio.Future[str | None], done: asyncio.Future[str | None]
) -> None:
    """Pass a taken-over gate's answer on to the call that took it over."""
    _settle(answer, None if done.cancelled() else done.result())


def _settle(future: asyncio.Future[T], value: T) -> None:
    if not future.done():
        future.set_result(value)
