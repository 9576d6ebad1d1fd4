"""Restoring one loop from its journal (contract §8.2, sequence F).

Owns :func:`restore_loop`: read the journal's recovery (a snapshot plus the
events after it), fold it, and settle a turn the crash left open, by the
loop's :class:`~turnstream.runtime.config.RestorePolicy`:

* ``interrupt`` (the contract's rule): a *durable* ``GateResolved{abandoned}``
  per gate it left open, then ``TurnInterrupted`` (appended, never delivered
  live: nobody can be subscribed yet); the loop comes up idle;
* ``continue``: ``TurnResumed`` (its committed steps and resume count), and
  the returned state keeps the turn open, its gates too: the actor resumes
  it after its last committed ``StepDone``; a turn resumed ``max_resumes``
  times already ends ``TurnFailed{resume_limit}`` instead (gates abandoned
  first), and so does one whose start is not recorded in the state.

The loop numbers its next turn from the count of ``TurnStarted`` events.
Imports ports, the fold and value types.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from turnstream.errors import ResumeLimitError
from turnstream.events import (
    EnduringEvent,
    GateCloseReason,
    GateResolved,
    TurnFailed,
    TurnInterrupted,
    TurnResumed,
    failure_from_error,
)
from turnstream.ids import LoopId, SessionId
from turnstream.runtime.config import DEFAULT_COMMIT_TIMEOUT, RestorePolicy
from turnstream.runtime.errors import RestoreError
from turnstream.runtime.fold import fold_loop
from turnstream.runtime.ports import Clock, IdSource, Journal
from turnstream.runtime.stamping import EventFactory
from turnstream.state import LoopState, OpenTurn

__all__ = ["RESUME_REASON", "restore_loop"]

RESUME_REASON = "owner_restored"
"""``TurnResumed.reason`` when a new owner restored the loop."""


async def restore_loop(
    journal: Journal,
    loop_id: LoopId,
    *,
    clock: Clock,
    ids: IdSource,
    commit_timeout: float = DEFAULT_COMMIT_TIMEOUT,
    policy: RestorePolicy | Callable[[str], RestorePolicy] | None = None,
) -> LoopState:
    """Rebuild ``loop_id``'s committed state, settling an open turn durably.

    Args:
        journal: the loop's journal.
        loop_id: the loop.
        clock: stamps the events restore appends.
        ids: mints their ids.
        commit_timeout: seconds each journal call may take.
        policy: the loop's restore policy, or a function from the loop's
            agent name to it (the agent is known only once folded);
            ``None``: interrupt.

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
    if callable(policy):
        policy = policy(state.agent_name)
    elif policy is None:
        policy = RestorePolicy()
    # A turn whose start the state does not place (a snapshot older than the
    # fields) cannot be rebuilt: it is interrupted, as the contract says.
    if policy.continues and open_turn.message_index >= 0:
        if open_turn.resumes < policy.max_resumes:
            resumed = factory.stamp(
                TurnResumed(
                    header=factory.header(turn_id=open_turn.turn_id),
                    turn_index=open_turn.turn_index,
                    steps=open_turn.steps,
                    resumes=open_turn.resumes + 1,
                    reason=RESUME_REASON,
                )
            )
            await _append(journal, loop_id, [resumed], commit_timeout)
            return fold_loop([resumed], state)
        error = ResumeLimitError(open_turn.resumes, policy.max_resumes)
        terminal: EnduringEvent = TurnFailed(
            header=factory.header(turn_id=open_turn.turn_id),
            turn_index=open_turn.turn_index,
            error=failure_from_error(error),
        )
    else:
        terminal = TurnInterrupted(
            header=factory.header(turn_id=open_turn.turn_id),
            turn_index=open_turn.turn_index,
        )
    # The crash seam (§8.2 steps 4-5): the turn's still-open gates are closed
    # abandoned first, then the turn ends; one commit, so never half of it.
    closing = [*_abandoned(factory, open_turn), factory.stamp(terminal)]
    await _append(journal, loop_id, closing, commit_timeout)
    return fold_loop(closing, state)


def _abandoned(factory: EventFactory, turn: OpenTurn) -> list[EnduringEvent]:
    """``GateResolved{abandoned}`` for each gate ``turn`` left open."""
    return [
        factory.stamp(
            GateResolved(
                header=factory.header(turn_id=turn.turn_id, step_id=gate.step_id),
                gate_id=gate.gate_id,
                reason=GateCloseReason.ABANDONED,
            )
        )
        for gate in turn.gates
    ]


async def _append(
    journal: Journal,
    loop_id: LoopId,
    events: list[EnduringEvent],
    commit_timeout: float,
) -> None:
    try:
        async with asyncio.timeout(commit_timeout):
            await journal.append(loop_id, events)
    except Exception as exc:  # the open turn could not be settled
        raise RestoreError("append_failed") from exc
