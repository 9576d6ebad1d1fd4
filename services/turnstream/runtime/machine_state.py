"""The state of one loop's machine, and the commits that stop or delete it.

Owns :class:`MachineState`, the base of
:class:`~turnstream.runtime.machine.LoopMachine`: the mutable state of one loop
-- status, turn index, committed history, inbox and draining entries, open
gates, the running turn -- its committed snapshot, and the commits every path
that stops the loop shares (``LoopStopped``, ``LoopDeleted``); and
:class:`LoopStatus`. Only the loop's actor task calls it, one message at a
time, so nothing here needs a lock. Every state change follows a committed
:class:`~turnstream.runtime.writer.LoopWriter` commit, never precedes it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from enum import StrEnum

from turnstream.content import Conversation
from turnstream.events import Cause, EnduringEvent
from turnstream.ids import CommandId, GateId, LoopId, SessionId
from turnstream.runtime.config import LoopConfig
from turnstream.runtime.gates import GateTable, PendingGate
from turnstream.runtime.handshake import TurnOutcome
from turnstream.runtime.hooks import HookRunner
from turnstream.runtime.input_queue import Inbox, SeenCommands
from turnstream.runtime.mailbox import ActorMessage, Mailbox
from turnstream.runtime.model_client import ModelClient
from turnstream.runtime.ports import AccessPolicy
from turnstream.runtime.supervision import TurnTasks
from turnstream.runtime.turn_handle import ActiveTurn
from turnstream.runtime.writer import LoopWriter
from turnstream.state import LoopState, OpenTurn

__all__ = ["LoopStatus", "MachineState"]

_log = logging.getLogger(__name__)


class LoopStatus(StrEnum):
    """Where the loop is in its life."""

    IDLE = "idle"
    RUNNING = "running"
    SHUTTING_DOWN = "shutting_down"
    STOPPED = "stopped"


class MachineState:
    """The state of one loop (driven by its actor only); see the module docstring."""

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

    def _current(self, generation: int) -> ActiveTurn | None:
        """The active turn if ``generation`` is it and it is not being cancelled."""
        active = self._active
        if active is None or active.generation != generation or active.cancelling:
            return None
        return active

    # ------------------------------------------------------------------
    # Stopping and deleting for good (§4.8)
    # ------------------------------------------------------------------

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
