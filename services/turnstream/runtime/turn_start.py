"""Admission (contract §4.2) and turn start in strict order (§4.3).

Owns :class:`TurnStarts`, the layer of
:class:`~turnstream.runtime.machine.LoopMachine` that admits, queues or
refuses an input, opens its turn (its ``TurnStarted`` committed, then the turn
task launched), resumes a turn a crash left open, and starts the next queued
input; and :class:`Opening`, a turn about to start.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from uuid import UUID

from turnstream.commands import Retract, SubmitInput
from turnstream.content import Conversation, UserMessage
from turnstream.events import CancelReason, Cause, RejectReason, TurnStarted
from turnstream.ids import CommandId, GateId, StepId, ToolExecutionId, TurnId
from turnstream.runtime.config import LoopConfig
from turnstream.runtime.errors import RestoreError
from turnstream.runtime.gates import PERMISSION_ACTIONS, PendingGate
from turnstream.runtime.handshake import TurnSpec
from turnstream.runtime.hooks import HookCall, Operation, Outcome, Started
from turnstream.runtime.input_queue import QueuedInput, input_problem
from turnstream.runtime.machine_state import LoopStatus, MachineState
from turnstream.runtime.turn_handle import launch_turn

__all__ = ["UNSTARTABLE", "Opening", "TurnStarts", "Unstartable"]

_log = logging.getLogger(__name__)


class Unstartable:
    """The queued turn to chain cannot start: its id could not be minted."""


UNSTARTABLE = Unstartable()


@dataclass(frozen=True, slots=True)
class Opening:
    """A turn about to start: its ``TurnStarted`` and what the turn runs on."""

    entry: QueuedInput
    turn_id: TurnId
    index: int
    config: LoopConfig
    hook: Started
    started: TurnStarted
    history: tuple[Conversation, ...]


class TurnStarts(MachineState):
    """Admission and turn start of one loop's machine (see the module docstring)."""

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
        turn_id = self._new_turn_id()
        if turn_id is None:
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

    def _new_turn_id(self) -> TurnId | None:
        """A new turn's id; ``None`` (logged) if it could not be minted."""
        try:
            return TurnId(self._factory.new_id())
        except Exception:  # noqa: BLE001 - fail secure: the input is resolved, never stranded
            _log.warning("turn id could not be minted")
            return None

    def _turn_call(self, entry: QueuedInput, turn_id: TurnId) -> HookCall:
        return self._hook_call(
            turn_id, self._turn_index + 1, entry.message, entry.command_id
        )

    def _hook_call(
        self,
        turn_id: TurnId,
        turn_index: int,
        message: UserMessage,
        command_id: CommandId | None = None,
    ) -> HookCall:
        """The Turn hook's call for a turn (a resumed one has no command)."""
        return HookCall(
            operation=Operation.TURN,
            started_at=self._factory.now(),
            session_id=self.session_id,
            loop_id=self.loop_id,
            turn_id=turn_id,
            turn_index=turn_index,
            input=message,
            command_id=command_id,
        )

    def _turn_config(self, model: str, max_tokens: int | None) -> LoopConfig:
        """The loop's config with a turn's own model and output cap, if it has any."""
        config = self.config
        if model or max_tokens is not None:
            config = replace(
                config,
                model=model or config.model,
                max_tokens=max_tokens or config.max_tokens,
            )
        return config

    def _spec(
        self,
        turn_id: TurnId,
        turn_index: int,
        message: UserMessage,
        history: tuple[Conversation, ...],
        config: LoopConfig,
    ) -> TurnSpec:
        """What a turn runs with: its own part, and the loop's model and hooks."""
        return TurnSpec(
            session_id=self.session_id,
            loop_id=self.loop_id,
            turn_id=turn_id,
            turn_index=turn_index,
            message=message,
            history=history,
            config=config,
            model=self._model,
            hooks=self._hooks,
            access_policy=self._access_policy,
            factory=self._factory,
            check_effect_topic=self._writer.check_effect_topic,
        )

    def _opening(self, entry: QueuedInput, turn_id: TurnId, hook: Started) -> Opening:
        """The next turn for ``entry``: its ``TurnStarted`` and request base."""
        # Captured here, for the whole turn: TurnStarted records it.
        config = self._turn_config(entry.model, entry.max_tokens)
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
        return Opening(
            entry, turn_id, index, config, hook, started, tuple(self._messages)
        )

    def _install(self, opening: Opening) -> None:
        """After ``TurnStarted`` is durable: the input joins history."""
        self._turn_index = opening.index
        self._messages.append(opening.entry.message)
        self._stopped = False  # a reopened loop (the agent allows it)

    def _launch(self, opening: Opening) -> None:
        self._generation += 1
        spec = self._spec(
            opening.turn_id,
            opening.index,
            opening.entry.message,
            opening.history,
            opening.config,
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
        config = self._turn_config(turn.model, turn.max_tokens)
        turn_id = TurnId(turn.turn_id)
        call = self._hook_call(turn_id, turn.turn_index, message)
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
        spec = replace(
            self._spec(
                turn_id, turn.turn_index, message, tuple(self._messages[:at]), config
            ),
            resumed=tuple(self._messages[at + 1 :]),
            first_step=turn.steps,
            decided=tuple((d.tool_name, d.effect) for d in turn.decisions),
        )
        self._run(spec, Started(call=call, blocked=None))
        return True

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
