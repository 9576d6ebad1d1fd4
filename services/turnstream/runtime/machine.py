"""A loop's state and how each message changes it (contract §4).

Owns :class:`LoopMachine`: the handler of every domain message of one loop.
It is built in layers, each a module: :mod:`~turnstream.runtime.machine_state`
(the state, its snapshot, the commits that stop or delete the loop),
:mod:`~turnstream.runtime.turn_start` (admission, §4.2; turn start in strict
order, §4.3; resume), :mod:`~turnstream.runtime.turn_end` (terminal handling
with queue resolution, §4.6); this one adds the running turn's hand-offs
(commit, drain, gates; §4.4, §4.7, §4.9) and interrupt / shutdown / delete /
drain timeout (§4.8). Each layer is a base class of the next
(``MachineState`` <- ``TurnStarts`` <- ``TurnEnds`` <- ``LoopMachine``) and
calls only the layers below it, so no module imports one above it. Only the
loop's actor task calls it, one message at a time, so nothing here needs a
lock. Every state change follows a committed
:class:`~turnstream.runtime.writer.LoopWriter` commit, never precedes it.
Imports the turn modules, ports and value types; never an adapter.
"""

from __future__ import annotations

import asyncio
import functools
import logging

from turnstream.commands import DeleteLoop, Interrupt, RespondGate
from turnstream.events import CancelReason, Cause, RejectReason, StepDone
from turnstream.ids import CommandId, GateId
from turnstream.runtime.gates import GateAnswer, answer_gate, open_gate
from turnstream.runtime.handshake import Interrupted
from turnstream.runtime.machine_state import LoopStatus
from turnstream.runtime.mailbox import (
    CommitRequest,
    DrainExpired,
    DrainRequest,
    OpenGateRequest,
    TurnEnded,
    settle,
)
from turnstream.runtime.turn_end import TurnEnds
from turnstream.runtime.turn_handle import ActiveTurn

__all__ = ["LoopMachine", "LoopStatus"]

_log = logging.getLogger(__name__)


class LoopMachine(TurnEnds):
    """The state of one loop and its transitions (driven by the actor only)."""

    # ------------------------------------------------------------------
    # Hand-offs from the running turn (§4.4, §4.7, §4.9)
    # ------------------------------------------------------------------

    async def on_commit(self, request: CommitRequest) -> None:
        """Commit a turn's events; only then grow history (and settle a fold).

        The turn's final step is only taken here: the terminal's commit
        carries it, so a text turn ends in one commit, not two.
        """
        active = self._current(request.generation)
        if active is None or request.reply.done():
            settle(request.reply, False)  # a cancelled turn commits nothing more
            return
        if request.final:
            active.held = request
            settle(request.reply, True)
            return

        def apply() -> None:
            self._messages.extend(request.messages)
            for command_id in request.folded:
                self._inbox.folded(command_id)

        committed = await self._writer.commit(
            request.events, apply=apply, effects=request.effects
        )
        settle(request.reply, committed)
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
            settle(request.reply, None)
            return
        settle(request.reply, self._inbox.drain_foldable())

    async def on_open_gate(self, request: OpenGateRequest) -> None:
        """Open an approval gate for the running turn's tool call."""
        active = self._current(request.generation)
        if active is None or request.answer.done():
            settle(request.answer, None)
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

    async def on_answer(self, command: RespondGate) -> GateAnswer:
        """Route a gate answer; stale, unknown or duplicate answers are dropped."""
        gate_id = GateId(command.gate_id)
        return await answer_gate(self._gates, self._writer, gate_id, command.action)

    # ------------------------------------------------------------------
    # Interrupt, shutdown, delete, drain timeout (§4.8)
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
        if active.task is not None and active.task.done():
            return False  # its end is on its way through the mailbox: too late
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
        ``TurnRejected{turn_ended}``, so its sender is not left waiting. So is
        one that reaches the turn after its task ended (its end still on its
        way): at the turn's end, unless the turn ended interrupted anyway.
        """
        active = self._active
        if command.turn_id is None:
            return self.on_interrupt()
        if active is not None and active.turn_id == command.turn_id:
            active.interrupts.append(CommandId(command.command_id))
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
                interrupt has reached it.
        """
        if durable:
            self._stop_durably = True
        if self.status in (LoopStatus.SHUTTING_DOWN, LoopStatus.STOPPED):
            return  # a second shutdown just waits for the first
        self.status = LoopStatus.SHUTTING_DOWN
        active = self._active
        if active is not None:
            # An interrupt that named the turn ends it here, even one that
            # met its task already finished (it is then answered turn_ended
            # at the end): left open, nobody would answer it.
            interrupting = (active.cancelling or bool(active.interrupts)) and not (
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
        deleted = self._deleted or self._deleting is not None
        if await self._take_delete(command, deleted=deleted):
            await self.on_shutdown(durable=True)

    async def delete_stopped(self, command: DeleteLoop) -> None:
        """Apply a ``DeleteLoop`` taken after the loop stopped (nothing runs)."""
        if await self._take_delete(command, deleted=self._deleted):
            await self._commit_deleted([])

    async def _take_delete(self, command: DeleteLoop, *, deleted: bool) -> bool:
        """Take a ``DeleteLoop`` as the deletion's cause; whether it goes ahead.

        It does not for a redelivered command (resolved already), nor when the
        loop is ``deleted`` already (answered ``TurnRejected{loop_deleted}``).
        """
        command_id = CommandId(command.command_id)
        if command_id in self.seen:
            return False
        self.seen.add(command_id)
        if deleted:
            await self._writer.reject(
                command_id, RejectReason.LOOP_DELETED, "the loop is deleted already"
            )
            return False
        self._deleting = Cause(command_id=command_id, agency=command.agency)
        return True

    async def on_drain_expired(self, message: DrainExpired) -> None:
        """A cancelled turn ignored cancellation: detach it and end it here."""
        active = self._active
        if active is None or active.generation != message.generation:
            return
        _log.warning("turn ignored cancellation; detached after the drain timeout")
        await self._end_turn(active, Interrupted())


def _relay(
    answer: asyncio.Future[str | None], done: asyncio.Future[str | None]
) -> None:
    """Pass a taken-over gate's answer on to the call that took it over."""
    settle(answer, None if done.cancelled() else done.result())
