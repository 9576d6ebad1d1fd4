"""Terminal handling and queue resolution (contract §4.6).

Owns :class:`TurnEnds`, the layer of
:class:`~turnstream.runtime.machine.LoopMachine` that commits a turn's end --
at best as one commit with the queue's resolution and the next turn's start,
else piece by piece -- and leaves a continuing agent's turn open for a planned
stop or a handover.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from turnstream.content import Conversation
from turnstream.events import (
    Agency,
    CancelReason,
    EnduringEvent,
    GateCloseReason,
    RejectReason,
)
from turnstream.runtime.gates import abandon_gates, resolved_event
from turnstream.runtime.handshake import Completed, Failed, Interrupted, TurnOutcome
from turnstream.runtime.hooks import Operation, Outcome
from turnstream.runtime.input_queue import QueuedInput
from turnstream.runtime.machine_state import LoopStatus
from turnstream.runtime.mailbox import TurnEnded
from turnstream.runtime.turn_handle import ActiveTurn, hook_outcome, turn_usage
from turnstream.runtime.turn_start import UNSTARTABLE, Opening, TurnStarts, Unstartable

__all__ = ["TurnEnds"]

_log = logging.getLogger(__name__)


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


@dataclass(frozen=True, slots=True)
class _Step:
    """A step the actor commits with the terminal, and the history it adds."""

    events: tuple[EnduringEvent, ...]
    messages: tuple[Conversation, ...]


class TurnEnds(TurnStarts):
    """Terminal handling of one loop's machine (see the module docstring)."""

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
        if not await self._end_together(active, outcome, step):
            await self._end_apart(active, outcome, step)
        if not isinstance(outcome, Interrupted):
            # Interrupts that arrived as the turn's task was already done:
            # their sender is answered, as for any turn that had ended.
            for command_id in active.interrupts:
                await self._writer.reject(command_id, RejectReason.TURN_ENDED)

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

    async def _chained(self, closing: _Closing) -> Opening | Unstartable | None:
        """The queued turn a completed turn's end can commit with it, if any.

        Only without Turn hooks: a hook's begin and guard run before its
        turn's ``TurnStarted``, and its finish sees the previous terminal
        durable alone. The entry stays queued until the commit applies;
        ``UNSTARTABLE`` if it cannot start (it is returned after the end).
        """
        if closing.parks or closing.stop or self._hooks.handles(Operation.TURN):
            return None
        front = self._inbox.draining or self._inbox.entries()
        if not front:
            return None
        entry = front[0]
        turn_id = self._new_turn_id()
        if turn_id is None:
            return UNSTARTABLE
        hook = await self._hooks.start(self._turn_call(entry, turn_id))
        if hook.blocked is not None:
            return None
        return self._opening(entry, turn_id, hook)

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
        opening: Opening | Unstartable | None = None
        if tail:
            events += writer.cancelled_events(closing.returned, closing.reason, ended)
            if closing.stop_durably:
                events.append(writer.stopped_event())
            if closing.delete and self._deleting is not None:
                events.append(writer.deleted_event(self._deleting))
            if closing.parks:
                events.append(writer.idle_event())
            opening = await self._chained(closing) if chain else None
            if isinstance(opening, Opening):
                events.append(opening.started)

        def apply() -> None:
            if step is not None:
                self._messages.extend(step.messages)
            if tail:
                self._gates.close_generation(active.generation)
                self._apply_closing(outcome, closing)
            if isinstance(opening, Opening):
                self._inbox.pop()  # the front entry: the opening's own
                self._install(opening)

        if not await writer.commit(events, apply=apply):
            if isinstance(opening, Opening):
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
        opening: Opening | Unstartable | None,
    ) -> None:
        """After an end committed with its tail: stop, start the next, or park."""
        if closing.stop:
            self.status = LoopStatus.STOPPED  # quiet: no LoopIdle (§10.1.6)
        elif isinstance(outcome, Interrupted):
            await self._start_next()  # retained user input starts after LoopIdle
        elif isinstance(opening, Opening):
            self._launch(opening)  # its TurnStarted committed with the end
        elif isinstance(opening, Unstartable):
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
