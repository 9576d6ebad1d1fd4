"""The actor's handle on its running turn.

Owns :class:`ActiveTurn` (the running turn's coordinates, task, cancellation
state and drain timer), :class:`ActorLink` (the actor's implementation of
:class:`~turnstream.runtime.handshake.TurnLink`: every request becomes a
message on the actor's internal lane, tagged with the turn's *generation* so a
detached turn's late requests are recognised and refused) and
:func:`launch_turn` (start the turn task and route its outcome back, however
it ends -- via :func:`outcome_of`). Imports the handshake, the turn, the
mailbox and hooks; never an adapter.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import assert_never

from turnstream.content import Conversation, Usage
from turnstream.errors import TurnPanicError
from turnstream.events import EnduringEvent, EphemeralEvent
from turnstream.ids import CommandId, TurnId
from turnstream.runtime.effects import StagedRecord
from turnstream.runtime.errors import CommitError
from turnstream.runtime.handshake import (
    ApprovalRequest,
    Completed,
    Failed,
    Interrupted,
    TurnDraft,
    TurnOutcome,
    TurnSpec,
)
from turnstream.runtime.hooks import Outcome, Started
from turnstream.runtime.input_queue import QueuedInput
from turnstream.runtime.mailbox import (
    ActorMessage,
    CommitRequest,
    DrainExpired,
    DrainRequest,
    Mailbox,
    OpenGateRequest,
    TurnEnded,
)
from turnstream.runtime.supervision import TurnTasks
from turnstream.runtime.turn import run_turn
from turnstream.runtime.user_code import log_user_error
from turnstream.runtime.writer import EndedTurn

__all__ = [
    "ActiveTurn",
    "ActorLink",
    "hook_outcome",
    "launch_turn",
    "outcome_of",
    "turn_usage",
]

_log = logging.getLogger(__name__)


class ActorLink:
    """A running turn's requests, as messages to its actor."""

    def __init__(
        self,
        mailbox: Mailbox[ActorMessage],
        publish: Callable[[EphemeralEvent], Awaitable[None]],
        generation: int,
    ) -> None:
        self._mail = mailbox
        self._publish = publish
        self.generation = generation
        self.detached = False  # written only by the actor

    async def publish(self, event: EphemeralEvent) -> None:
        """Publish live, unless the actor has already ended this turn."""
        if not self.detached:
            await self._publish(event)

    async def commit(
        self,
        events: Sequence[EnduringEvent],
        messages: Sequence[Conversation] = (),
        *,
        folded: Sequence[CommandId] = (),
        final: bool = False,
        effects: Sequence[StagedRecord] = (),
    ) -> None:
        """Ask the actor to commit; raise :class:`CommitError` if it did not."""
        reply: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        request = CommitRequest(
            self.generation,
            tuple(events),
            tuple(messages),
            tuple(folded),
            reply,
            final=final,
            effects=tuple(effects),
        )
        if not self._mail.put_internal(request):
            raise CommitError("loop stopped")
        if not await reply:
            raise CommitError("not committed")

    async def drain(self) -> tuple[QueuedInput, ...]:
        """Ask the actor for foldable input; raise :class:`CommitError` if refused."""
        reply: asyncio.Future[tuple[QueuedInput, ...] | None]
        reply = asyncio.get_running_loop().create_future()
        if not self._mail.put_internal(DrainRequest(self.generation, reply)):
            raise CommitError("loop stopped")
        entries = await reply
        if entries is None:
            raise CommitError("turn cancelled")
        return entries

    async def request_approval(self, request: ApprovalRequest) -> str | None:
        """Ask the actor to open a gate; wait for its answer (``None``: no gate)."""
        answer: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        if not self._mail.put_internal(
            OpenGateRequest(self.generation, request, answer)
        ):
            return None
        return await answer


@dataclass(slots=True, kw_only=True)
class ActiveTurn:
    """The running turn, as its actor sees it (only the actor writes it)."""

    generation: int
    turn_id: TurnId
    turn_index: int
    hook: Started
    link: ActorLink
    draft: TurnDraft
    task: asyncio.Task[TurnOutcome] | None = None
    held: CommitRequest | None = None  # the final step, committed with the terminal
    cancelling: bool = False
    timer: asyncio.TimerHandle | None = None
    # A continuing agent's turn on a planned stop: ``suspending`` stops it
    # after its next committed StepDone; ``suspended`` it has stopped there,
    # still open; ``leave_open`` ends it writing nothing (a handover: the
    # next owner continues it).
    suspending: bool = False
    suspended: bool = False
    leave_open: bool = False
    # Interrupts that named this turn while it ran. One that met a task
    # already done (its end still on its way through the mailbox) cancels
    # nothing: the turn ends as it ended, and those are answered turn_ended.
    interrupts: list[CommandId] = field(default_factory=list)

    @property
    def ended(self) -> EndedTurn:
        """The coordinates events about this turn's end carry."""
        return EndedTurn(self.turn_id, self.turn_index)

    def cancel(self, mailbox: Mailbox[ActorMessage], drain_timeout: float) -> None:
        """Cancel the task and arm the drain timer (contract §4.8)."""
        self.cancelling = True
        if self.task is not None:
            self.task.cancel()
        self.timer = asyncio.get_running_loop().call_later(
            drain_timeout, mailbox.put_internal, DrainExpired(self.generation)
        )

    def close(self) -> None:
        """The turn is over for the actor: no timer, nothing more goes out live."""
        if self.timer is not None:
            self.timer.cancel()
        self.link.detached = True


def outcome_of(task: asyncio.Task[TurnOutcome], draft: TurnDraft) -> TurnOutcome:
    """The outcome of a finished turn task (cancelled means interrupted).

    This runs from the task's done-callback, so it also covers a task that was
    cancelled before its first step (whose body never ran).
    """
    if task.cancelled():
        return Interrupted(draft.interrupted_prefix)
    error = task.exception()
    if error is not None:  # a BaseException that is not an Exception
        return Failed(TurnPanicError(type(error).__name__))
    return task.result()


def turn_usage(outcome: TurnOutcome) -> Usage | None:
    """A completed turn's total usage (what its Turn hook's finish sees)."""
    return outcome.usage if isinstance(outcome, Completed) else None


def hook_outcome(outcome: TurnOutcome) -> tuple[Outcome, BaseException | None]:
    """How the Turn hook sees a turn's end (contract §5.4 outcome mapping)."""
    match outcome:
        case Completed():
            return Outcome.COMPLETED, None
        case Failed():
            return Outcome.FAILED, outcome.error
        case Interrupted():
            return Outcome.CANCELED, None
        case _:
            assert_never(outcome)


def launch_turn(
    spec: TurnSpec,
    *,
    generation: int,
    hook: Started,
    mailbox: Mailbox[ActorMessage],
    publish: Callable[[EphemeralEvent], Awaitable[None]],
    tasks: TurnTasks[TurnOutcome],
) -> ActiveTurn:
    """Start the turn task; its one outcome comes back as ``TurnEnded``."""
    link = ActorLink(mailbox, publish, generation)
    draft = TurnDraft()
    active = ActiveTurn(
        generation=generation,
        turn_id=spec.turn_id,
        turn_index=spec.turn_index,
        hook=hook,
        link=link,
        draft=draft,
    )
    task = tasks.spawn(
        _turn_main(spec, link, draft), name=f"turn-{spec.loop_id}-{spec.turn_index}"
    )
    active.task = task
    # The hand-back runs however the task ends -- even when it is cancelled
    # before its first step, when the coroutine body never runs at all.
    task.add_done_callback(
        lambda done: mailbox.put_internal(
            TurnEnded(generation, outcome_of(done, draft))
        )
    )
    return active


async def _turn_main(spec: TurnSpec, link: ActorLink, draft: TurnDraft) -> TurnOutcome:
    """The turn task: run the turn; any exception becomes a panic failure."""
    try:
        return await run_turn(spec, link, draft)
    except Exception as exc:  # noqa: BLE001 - the actor survives any exception in a turn
        log_user_error(
            _log, "unexpected error in turn", exc, turn_index=spec.turn_index
        )
        return Failed(TurnPanicError(type(exc).__name__))
