"""Restoring one loop from its journal (contract §8.2, sequence F).

Owns :func:`restore_loop`: read the journal's recovery (a snapshot plus the
events after it), fold it, and close a turn the crash left open with a
*durable* ``GateResolved{abandoned}`` per gate it left open, then
``TurnInterrupted`` (appended, never delivered live: nobody can be
subscribed yet). The restored loop comes up idle and numbers its next turn
from the count of ``TurnStarted`` events. Imports ports, the fold and value
types.
"""

from __future__ import annotations

import asyncio

from turnstream.events import (
    EnduringEvent,
    GateCloseReason,
    GateResolved,
    TurnInterrupted,
)
from turnstream.ids import LoopId, SessionId
from turnstream.runtime.config import DEFAULT_COMMIT_TIMEOUT
from turnstream.runtime.errors import RestoreError
from turnstream.runtime.fold import fold_loop
from turnstream.runtime.ports import Clock, IdSource, Journal
from turnstream.runtime.stamping import EventFactory
from turnstream.state import LoopState

__all__ = ["restore_loop"]


async def restore_loop(
    journal: Journal,
    loop_id: LoopId,
    *,
    clock: Clock,
    ids: IdSource,
    commit_timeout: float = DEFAULT_COMMIT_TIMEOUT,
) -> LoopState:
    """Rebuild ``loop_id``'s committed state, closing an open turn durably.

    Raises:
        RestoreError: ``journal_failed``, ``empty_journal``, ``loop_mismatch``
            or ``append_failed``.
    """
    try:
        async with asyncio.timeout(commit_timeout):
            recovery = await journal.recover(loop_id)
    except Exception as exc:  # any adapter failure means no restore
        raise RestoreError("journal_failed") from exc
    state = fold_loop(recovery.events, recovery.snapshot)
    if state.loop_id != loop_id:
        raise RestoreError("loop_mismatch")
    open_turn = state.open_turn
    if open_turn is None:
        return state
    factory = EventFactory(
        session_id=SessionId(state.session_id),
        loop_id=loop_id,
        clock=clock,
        ids=ids,
        agent_name=state.agent_name,
    )
    # The crash seam (§8.2 steps 4-5): the turn's still-open gates are closed
    # abandoned first, then the turn ends; one commit, so never half of it.
    closing: list[EnduringEvent] = [
        factory.stamp(
            GateResolved(
                header=factory.header(turn_id=open_turn.turn_id, step_id=gate.step_id),
                gate_id=gate.gate_id,
                reason=GateCloseReason.ABANDONED,
            )
        )
        for gate in open_turn.gates
    ]
    closing.append(
        factory.stamp(
            TurnInterrupted(
                header=factory.header(turn_id=open_turn.turn_id),
                turn_index=open_turn.turn_index,
            )
        )
    )
    try:
        async with asyncio.timeout(commit_timeout):
            await journal.append(loop_id, closing)
    except Exception as exc:  # the open turn could not be closed
        raise RestoreError("append_failed") from exc
    return fold_loop(closing, state)
