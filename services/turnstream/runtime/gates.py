"""Approval gates as the actor keeps them (contract §4.9).

Owns :class:`PendingGate`, :class:`GateTable` (the actor's open gates),
:class:`GateAnswer` (what became of a ``RespondGate``) and the builders of the
gate events: ``GateOpened`` + ``PermissionRequested`` (committed together, only
*after* the gate is installed: install-before-emit, so an answer can never
arrive for a gate the actor does not know) and ``GateResolved`` (``answered``
with the action, or ``abandoned`` after the turn's terminal).

Stale, unknown, duplicate or wrong-action answers are dropped by the actor; the
in-process session turns them into :class:`~turnstream.errors.SessionError`.
Only the actor touches a :class:`GateTable`; :func:`open_gate`,
:func:`answer_gate` and :func:`abandon_gates` are the actor's gate operations.
Imports the writer, the handshake and value types.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from enum import StrEnum

from turnstream.events import (
    GateCloseReason,
    GateOpened,
    GateResolved,
    PermissionRequested,
)
from turnstream.ids import GateId, StepId, ToolExecutionId, TurnId
from turnstream.runtime.handshake import ApprovalRequest
from turnstream.runtime.stamping import EventFactory
from turnstream.runtime.writer import LoopWriter

__all__ = [
    "APPROVE",
    "DENY",
    "PERMISSION_ACTIONS",
    "PERMISSION_KIND",
    "GateAnswer",
    "GateTable",
    "PendingGate",
    "abandon_gates",
    "answer_gate",
    "open_gate",
    "opened_events",
    "resolved_event",
]

APPROVE = "approve"
DENY = "deny"
PERMISSION_ACTIONS = (APPROVE, DENY)
PERMISSION_KIND = "permission"


class GateAnswer(StrEnum):
    """What became of an answer sent to a loop."""

    DELIVERED = "delivered"
    NOT_FOUND = "not_found"
    ACTION_INVALID = "action_invalid"
    NOT_COMMITTED = "not_committed"


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingGate:
    """An open gate and the future its parked tool call waits on."""

    gate_id: GateId
    generation: int
    turn_id: TurnId
    step_id: StepId
    tool_execution_id: ToolExecutionId
    actions: tuple[str, ...]
    answer: asyncio.Future[str | None]

    def settle(self, action: str | None) -> None:
        """Wake the parked call (``None``: the gate closed without an answer)."""
        if not self.answer.done():
            self.answer.set_result(action)


class GateTable:
    """The actor's open gates, by id."""

    def __init__(self) -> None:
        self._gates: dict[GateId, PendingGate] = {}

    def __len__(self) -> int:
        return len(self._gates)

    def install(self, gate: PendingGate) -> None:
        """Record ``gate`` (before any of its events is emitted)."""
        self._gates[gate.gate_id] = gate

    def get(self, gate_id: GateId) -> PendingGate | None:
        """The open gate ``gate_id``, if any."""
        return self._gates.get(gate_id)

    def remove(self, gate_id: GateId) -> None:
        """Forget ``gate_id`` (answered, or never activated)."""
        self._gates.pop(gate_id, None)

    def of_generation(self, generation: int) -> list[PendingGate]:
        """Every open gate of one turn, in opening order (nothing removed)."""
        return [g for g in self._gates.values() if g.generation == generation]

    def close_generation(self, generation: int) -> list[PendingGate]:
        """Remove and return every gate of one turn, in opening order."""
        closing = [g for g in self._gates.values() if g.generation == generation]
        for gate in closing:
            del self._gates[gate.gate_id]
        return closing

    def close_all(self) -> list[PendingGate]:
        """Remove and return every gate."""
        closing = list(self._gates.values())
        self._gates.clear()
        return closing


def opened_events(
    factory: EventFactory, gate: PendingGate, request: ApprovalRequest
) -> tuple[GateOpened, PermissionRequested]:
    """The two events that announce an installed gate, in order."""
    header = factory.header(turn_id=gate.turn_id, step_id=gate.step_id)
    return (
        GateOpened(
            header=header,
            gate_id=gate.gate_id,
            kind=PERMISSION_KIND,
            tool_execution_id=gate.tool_execution_id,
            actions=gate.actions,
        ),
        PermissionRequested(
            header=header,
            tool_execution_id=gate.tool_execution_id,
            gate_id=gate.gate_id,
            tool_name=request.tool_name,
            summary=request.summary,
        ),
    )


def resolved_event(
    factory: EventFactory,
    gate: PendingGate,
    reason: GateCloseReason,
    action: str = "",
) -> GateResolved:
    """The event that closes ``gate``."""
    return GateResolved(
        header=factory.header(turn_id=gate.turn_id, step_id=gate.step_id),
        gate_id=gate.gate_id,
        reason=reason,
        action=action,
    )


async def open_gate(
    table: GateTable,
    writer: LoopWriter,
    *,
    generation: int,
    turn_id: TurnId,
    request: ApprovalRequest,
    answer: asyncio.Future[str | None],
) -> None:
    """Install a permission gate, then announce it (install before emit, §10.2).

    If the gate cannot be opened the parked call is woken with ``None``.
    """
    try:
        gate_id = GateId(writer.factory.new_id())
    except Exception:  # noqa: BLE001 - fail secure: the call is denied, no gate exists
        if not answer.done():
            answer.set_result(None)
        return
    gate = PendingGate(
        gate_id=gate_id,
        generation=generation,
        turn_id=turn_id,
        step_id=request.step_id,
        tool_execution_id=request.tool_execution_id,
        actions=PERMISSION_ACTIONS,
        answer=answer,
    )
    table.install(gate)
    if not await writer.commit(list(opened_events(writer.factory, gate, request))):
        table.remove(gate_id)
        gate.settle(None)


async def answer_gate(
    table: GateTable, writer: LoopWriter, gate_id: GateId, action: str
) -> GateAnswer:
    """Commit ``GateResolved{answered}``, then wake the parked call."""
    gate = table.get(gate_id)
    if gate is None:
        return GateAnswer.NOT_FOUND  # stale, unknown or duplicate: dropped
    if action not in gate.actions:
        return GateAnswer.ACTION_INVALID
    resolved = resolved_event(writer.factory, gate, GateCloseReason.ANSWERED, action)
    if not await writer.commit([resolved]):
        return GateAnswer.NOT_COMMITTED  # the gate stays answerable
    table.remove(gate.gate_id)
    gate.settle(action)
    return GateAnswer.DELIVERED


async def abandon_gates(table: GateTable, writer: LoopWriter, generation: int) -> None:
    """Close a finished turn's open gates as ``abandoned`` (after its terminal)."""
    abandoned = table.close_generation(generation)
    if not abandoned:
        return
    reason = GateCloseReason.ABANDONED
    await writer.commit([resolved_event(writer.factory, g, reason) for g in abandoned])
    for gate in abandoned:
        gate.settle(None)
