"""Folding a loop's journal into its state (contract §8.2 fold table).

Owns :func:`fold_loop`, a pure function from committed events (and an
optional earlier snapshot) to :class:`~turnstream.state.LoopState`:

=================================  ==========================================
``LoopStarted``                    agent name and model
``TurnStarted``                    turn index + 1, append its message, open turn
``StepDone``                       append its messages; the open turn steps + 1
``TurnFoldedInto``                 append its message
``TurnDone``/``Failed``/``Int…``   close the open turn (adds nothing)
``TurnResumed``                    the open turn's resume count
``LoopStopped``                    stopped (a later ``TurnStarted`` reopens)
``LoopDeleted``                    deleted and stopped; history dropped
``GateOpened``/``GateResolved``    the open turn's unresolved gates
``PermissionRequested``            its gate's tool name and summary
``PermissionDecided``              the open step's access decisions (so is an
                                   answered ``GateResolved``; ``StepDone`` resets)
every other event                  no effect on history
=================================  ==========================================

Every Reply event also records its command id in the bounded window of
recently resolved commands, so a redelivered command is recognised. The Kafka
adapter uses the same function to write its state snapshots. Imports only
value types and runtime errors.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, assert_never
from uuid import UUID

from turnstream import events as ev
from turnstream.content import Conversation
from turnstream.runtime.errors import RestoreError
from turnstream.runtime.input_queue import SEEN_WINDOW
from turnstream.state import CallDecision, LoopState, OpenGate, OpenTurn

__all__ = ["fold_loop"]


def fold_loop(
    events: Iterable[ev.EnduringEvent], base: LoopState | None = None
) -> LoopState:
    """Fold ``events`` (in commit order) onto ``base``.

    Raises:
        RestoreError: ``empty_journal`` with no base and no events, or
            ``loop_mismatch`` when an event belongs to another loop.
    """
    events = list(events)
    if base is None:
        if not events:
            raise RestoreError("empty_journal")
        first = events[0].header
        if first.session_id is None or first.loop_id is None:
            raise RestoreError("loop_mismatch")
        base = LoopState(session_id=first.session_id, loop_id=first.loop_id)
    fold = _Fold(
        agent_name=base.agent_name,
        model=base.model,
        turn_index=base.turn_index,
        open_turn=base.open_turn,
        messages=list(base.messages),
        recent=list(base.recent_command_ids),
        updated_at=base.updated_at,
        stopped=base.stopped,
        deleted=base.deleted,
    )
    for event in events:
        if event.header.loop_id != base.loop_id:
            raise RestoreError("loop_mismatch")
        fold.apply(event)
    return base.model_copy(
        update={
            "agent_name": fold.agent_name,
            "model": fold.model,
            "turn_index": fold.turn_index,
            "messages": tuple(fold.messages),
            "open_turn": fold.open_turn,
            "recent_command_ids": tuple(dict.fromkeys(fold.recent))[-SEEN_WINDOW:],
            "updated_at": fold.updated_at,
            "stopped": fold.stopped,
            "deleted": fold.deleted,
        }
    )


@dataclass(slots=True, kw_only=True)
class _Fold:
    agent_name: str
    model: str
    turn_index: int
    open_turn: OpenTurn | None
    messages: list[Conversation]
    recent: list[UUID]
    updated_at: datetime | None
    stopped: bool
    deleted: bool

    def apply(self, event: ev.EnduringEvent) -> None:  # noqa: PLR0912 - one case per type
        if event.header.created_at is not None:
            self.updated_at = event.header.created_at
        replied = event.reply_to()
        if replied is not None:
            self.recent.append(replied)
        match event:
            case ev.LoopStarted():
                self.agent_name = event.header.agent_name
                self.model = event.model
            case ev.TurnStarted():
                self.stopped = False
                self.turn_index += 1
                if event.header.turn_id is not None:
                    self.open_turn = OpenTurn(
                        turn_id=event.header.turn_id,
                        turn_index=event.turn_index,
                        message_index=len(self.messages),
                        model=event.model,
                        max_tokens=event.max_tokens,
                    )
                self.messages.append(event.message)
            case ev.StepDone():
                self.messages.extend(event.messages)
                self._turn(event)
            case ev.TurnFoldedInto():
                self.messages.append(event.message)
            case ev.TurnDone() | ev.TurnFailed() | ev.TurnInterrupted():
                self.open_turn = None
            case (
                ev.PermissionDecided()
                | ev.TurnResumed()
                | ev.GateOpened()
                | ev.GateResolved()
                | ev.PermissionRequested()
            ):
                self._turn(event)
            case ev.LoopStopped():
                self.stopped = True
            case ev.LoopDeleted():
                self._delete()
            case ev.LoopIdle() | ev.TurnRejected() | ev.InputCancelled():
                pass
            case _:
                assert_never(event)

    def _delete(self) -> None:
        """Nothing of the conversation outlives the deletion."""
        self.deleted = self.stopped = True
        self.messages.clear()
        self.open_turn = None

    def _turn(
        self,
        event: ev.StepDone
        | ev.PermissionDecided
        | ev.TurnResumed
        | ev.GateOpened
        | ev.GateResolved
        | ev.PermissionRequested,
    ) -> None:
        """What an event of the open turn changes of it (nothing of another turn)."""
        turn = self.open_turn
        if turn is None or turn.turn_id != event.header.turn_id:
            return
        update: dict[str, object]
        match event:
            case ev.StepDone():
                update = {"steps": turn.steps + 1, "decisions": ()}
            case ev.PermissionDecided():
                decided = CallDecision(tool_name=event.subject, effect=event.effect)
                update = {"decisions": (*turn.decisions, decided)}
            case ev.TurnResumed():
                update = {"resumes": max(turn.resumes, event.resumes)}
            case ev.GateOpened():
                if not event.header.step_id:
                    return
                gate = OpenGate(gate_id=event.gate_id, step_id=event.header.step_id)
                update = {"gates": (*turn.gates, gate)}
            case ev.GateResolved():
                closed = [g for g in turn.gates if g.gate_id == event.gate_id]
                update = {"gates": tuple(g for g in turn.gates if g not in closed)}
                if event.action in ("approve", "deny"):
                    effect: Literal["approve", "deny"] = (
                        "approve" if event.action == "approve" else "deny"
                    )
                    update["decisions"] = turn.decisions + tuple(
                        CallDecision(tool_name=g.tool_name, effect=effect)
                        for g in closed
                    )
            case ev.PermissionRequested():
                named = {"tool_name": event.tool_name, "summary": event.summary}
                update = {
                    "gates": tuple(
                        g.model_copy(update=named) if g.gate_id == event.gate_id else g
                        for g in turn.gates
                    )
                }
            case _:
                assert_never(event)
        self.open_turn = turn.model_copy(update=update)
