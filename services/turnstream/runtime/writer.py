"""A loop's single write path: durable first, then state, then live.

Owns :class:`LoopWriter`, used only by the loop's actor: :meth:`LoopWriter.
commit` stamps enduring events (``event_id`` + ``created_at``), appends them to
the journal as one atomic commit under a timeout (with the loop's
:class:`~turnstream.runtime.progress.CommandProgress` as it stands once they
are committed), applies the caller's state
change only if the append committed, and only then delivers them live (a
hub whose deltas travel apart from the journal, a
:class:`~turnstream.runtime.ports.SettlingHub`, is settled first, so the
loop's deltas so far reach watchers before the commit does);
:meth:`LoopWriter.publish` sends ephemeral events (which may be dropped). It
also builds the events the actor itself emits (``LoopStarted``, ``LoopIdle``,
``TurnRejected``, ``InputQueued``, ``InputCancelled``, the ``StepDone`` of a
final or truncated step, and the terminals).

Failures never escape: a refused or timed-out append returns ``False`` (and is
logged with its type only, never content); a hub failure is logged. Imports
ports, the stamping seam and value types.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import assert_never

from turnstream import events as ev
from turnstream.ids import CommandId, LoopId, TurnId
from turnstream.runtime.config import LoopConfig
from turnstream.runtime.effects import StagedRecord
from turnstream.runtime.handshake import (
    Completed,
    Failed,
    Interrupted,
    PendingStep,
    TurnOutcome,
)
from turnstream.runtime.input_queue import QueuedInput
from turnstream.runtime.ports import EffectTopics, Journal, LiveHub, SettlingHub
from turnstream.runtime.progress import CommandProgress, ProgressTracker
from turnstream.runtime.stamping import EventFactory

__all__ = ["EndedTurn", "LoopWriter"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EndedTurn:
    """The coordinates of a turn whose end returns queued input."""

    turn_id: TurnId
    turn_index: int


class LoopWriter:
    """Commits and publishes one loop's events (the actor's only output)."""

    def __init__(
        self,
        *,
        loop_id: LoopId,
        factory: EventFactory,
        journal: Journal,
        hub: LiveHub,
        commit_timeout: float,
        progress: CommandProgress | None = None,
    ) -> None:
        self.loop_id = loop_id
        self.factory = factory
        self.progress = ProgressTracker(progress)
        self._journal = journal
        self._hub = hub
        self._settling = hub if isinstance(hub, SettlingHub) else None
        self._commit_timeout = commit_timeout
        self.check_effect_topic: Callable[[str], None] | None = (
            journal.check_effect_topic if isinstance(journal, EffectTopics) else None
        )
        """The journal's refusal of a staged record's topic, if it has one."""

    async def commit(
        self,
        events: Sequence[ev.EnduringEvent],
        *,
        apply: Callable[[], None] | None = None,
        within: float | None = None,
        effects: Sequence[StagedRecord] = (),
    ) -> bool:
        """Append durably, then ``apply`` the state change, then deliver live.

        Args:
            events: committed together, in order, or not at all.
            apply: the state change that must follow the commit, and only it.
            within: seconds allowed (default: the commit timeout).
            effects: records the step's tool calls staged, in the same commit.

        Returns:
            Whether the events were committed.
        """
        try:
            stamped = [self.factory.stamp(e) for e in events]
        except Exception:  # noqa: BLE001 - fail secure: an event without an id is never written
            _log.warning("event id could not be minted")
            return False
        answered = [r for r in (e.reply_to() for e in stamped) if r is not None]
        if self._settling is not None:
            # The deltas streamed before this commit reach watchers first.
            await self._settling.settle(self.loop_id)
        try:
            async with asyncio.timeout(within or self._commit_timeout):
                # Without effects the call is the port's original one, so a
                # journal written before staged records keeps working.
                if effects:
                    await self._journal.append(
                        self.loop_id,
                        stamped,
                        self.progress.after(answered),
                        effects=effects,
                    )
                else:
                    await self._journal.append(
                        self.loop_id, stamped, self.progress.after(answered)
                    )
        except Exception as exc:  # noqa: BLE001 - not committed: nothing changes, nothing is seen
            _log.warning(
                "journal append failed",
                extra={
                    "exc_type": type(exc).__name__,
                    "events": len(stamped),
                    "loop_id": str(self.loop_id),
                },
            )
            return False
        self.progress.settle(answered)
        if apply is not None:
            apply()
        try:
            await self._hub.deliver(stamped)
        except Exception as exc:  # noqa: BLE001 - live delivery is best effort once durable
            _log.warning("hub delivery failed", extra={"exc_type": type(exc).__name__})
        return True

    async def publish(self, event: ev.EphemeralEvent) -> None:
        """Send an ephemeral event live (dropped on failure)."""
        try:
            await self._hub.publish(event)
        except Exception as exc:  # noqa: BLE001 - ephemeral events may be dropped
            _log.warning("hub publish failed", extra={"exc_type": type(exc).__name__})

    # -- the actor's own events -------------------------------------------

    async def announce(self, config: LoopConfig) -> bool:
        """Commit ``LoopStarted`` (a new loop's first event)."""
        started = ev.LoopStarted(
            header=self.factory.header(named=True),
            model=config.model,
            display_name=config.display_name,
        )
        return await self.commit([started])

    def stopped_event(self) -> ev.LoopStopped:
        """A ``LoopStopped`` for this loop (a client's shutdown)."""
        return ev.LoopStopped(header=self.factory.header())

    def deleted_event(self, cause: ev.Cause) -> ev.LoopDeleted:
        """A ``LoopDeleted`` answering the ``DeleteLoop`` of ``cause``."""
        return ev.LoopDeleted(header=self.factory.header(cause=cause))

    def idle_event(self) -> ev.LoopIdle:
        """A ``LoopIdle`` for this loop (unstamped)."""
        return ev.LoopIdle(header=self.factory.header(named=True))

    async def park(self) -> None:
        """Commit ``LoopIdle``: the loop parked with nothing left to start."""
        await self.commit([self.idle_event()])

    async def queued(self, command_id: CommandId) -> None:
        """Publish ``InputQueued`` for an input waiting behind a turn."""
        cause = ev.Cause(command_id=command_id)
        await self.publish(ev.InputQueued(header=self.factory.header(cause=cause)))

    async def reject(
        self, command_id: CommandId, reason: ev.RejectReason, detail: str = ""
    ) -> None:
        """Commit ``TurnRejected`` for an input that never became a turn."""
        header = self.factory.header(cause=ev.Cause(command_id=command_id))
        await self.commit(
            [ev.TurnRejected(header=header, reason=reason, detail=detail)]
        )

    async def cancel_inputs(
        self,
        entries: Sequence[QueuedInput],
        reason: ev.CancelReason,
        ended: EndedTurn | None,
    ) -> None:
        """Commit one ``InputCancelled`` per entry, in order, as one commit."""
        if entries:
            await self.commit(self.cancelled_events(entries, reason, ended))

    def cancelled_events(
        self,
        entries: Sequence[QueuedInput],
        reason: ev.CancelReason,
        ended: EndedTurn | None,
    ) -> list[ev.InputCancelled]:
        """One ``InputCancelled`` per entry, in order (unstamped)."""
        return [
            ev.InputCancelled(
                header=self.factory.header(
                    turn_id=ended.turn_id if ended else None,
                    cause=ev.Cause(command_id=e.command_id, agency=e.agency),
                ),
                reason=reason,
                message=e.message,
                turn_index=ended.turn_index if ended else 0,
            )
            for e in entries
        ]

    async def commit_step(
        self,
        ended: EndedTurn,
        pending: PendingStep,
        *,
        apply: Callable[[], None],
        within: float | None,
    ) -> bool:
        """Commit a step's group (a final answer, a safe prefix) as its ``StepDone``."""
        return await self.commit(
            [self.step_event(ended, pending)], apply=apply, within=within
        )

    def step_event(self, ended: EndedTurn, pending: PendingStep) -> ev.StepDone:
        """The ``StepDone`` of a step the actor commits itself (unstamped)."""
        return ev.StepDone(
            header=self.factory.header(turn_id=ended.turn_id, step_id=pending.step_id),
            messages=(pending.message,),
        )

    def terminal(self, ended: EndedTurn, outcome: TurnOutcome) -> ev.EnduringEvent:
        """The terminal event for ``outcome`` (unstamped)."""
        header = self.factory.header(turn_id=ended.turn_id)
        match outcome:
            case Completed():
                return ev.TurnDone(
                    header=header,
                    turn_index=ended.turn_index,
                    message=outcome.message,
                    usage=outcome.usage,
                )
            case Failed():
                return ev.TurnFailed(
                    header=header,
                    turn_index=ended.turn_index,
                    error=ev.failure_from_error(outcome.error),
                )
            case Interrupted():
                return ev.TurnInterrupted(header=header, turn_index=ended.turn_index)
            case _:
                assert_never(outcome)
