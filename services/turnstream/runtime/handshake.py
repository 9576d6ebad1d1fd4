"""The handshake between a turn task and its loop actor.

Owns :class:`TurnLink` (everything a running turn may ask of its actor: publish
an ephemeral event, commit enduring events, drain foldable input, open an
approval gate), :class:`TurnSpec` (what a turn is started with, captured at
start), :class:`TurnDraft` (the turn task's own progress, read when it is
cancelled) and the turn outcomes (:class:`Completed`, :class:`Failed`,
:class:`Interrupted`).

The turn task never touches loop state: it asks the actor, which appends to the
journal first and only then mutates history (contract §4.4 commit handshake).
Imports only ports, config, hooks and value types.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from turnstream.content import AIMessage, Conversation, Usage, UserMessage
from turnstream.errors import TurnError
from turnstream.events import EnduringEvent, EphemeralEvent
from turnstream.ids import CommandId, LoopId, SessionId, StepId, ToolExecutionId, TurnId
from turnstream.runtime.config import LoopConfig
from turnstream.runtime.effects import StagedRecord
from turnstream.runtime.hooks import HookCall, HookRunner, Operation
from turnstream.runtime.input_queue import QueuedInput
from turnstream.runtime.model_client import ModelClient
from turnstream.runtime.ports import AccessPolicy
from turnstream.runtime.stamping import EventFactory

__all__ = [
    "ApprovalRequest",
    "Completed",
    "Failed",
    "Interrupted",
    "PendingStep",
    "TurnDraft",
    "TurnLink",
    "TurnOutcome",
    "TurnSpec",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRequest:
    """A tool call that waits for a person's answer."""

    step_id: StepId
    tool_execution_id: ToolExecutionId
    tool_name: str
    summary: str


class TurnLink(Protocol):
    """What a running turn may ask of its actor."""

    async def publish(self, event: EphemeralEvent) -> None:
        """Publish a live-only event (dropped once the turn is detached)."""
        ...

    async def commit(
        self,
        events: Sequence[EnduringEvent],
        messages: Sequence[Conversation] = (),
        *,
        folded: Sequence[CommandId] = (),
        final: bool = False,
        effects: Sequence[StagedRecord] = (),
    ) -> None:
        """Commit ``events`` durably, then append ``messages`` to history.

        ``folded`` names the draining entries the ``TurnFoldedInto`` events
        commit (one commit folds them all, or none). ``final`` marks the turn's
        last step: the actor takes it now and commits it in one commit with
        the terminal (one transaction instead of two), still before history
        grows; it returns once the actor has taken it. ``effects``: the
        records a tool step's calls staged, committed with its ``StepDone``.

        Raises:
            CommitError: nothing was committed (the turn was cancelled, or the
                journal failed); the turn must end interrupted.
        """
        ...

    async def drain(self) -> tuple[QueuedInput, ...]:
        """Take the leading run of foldable queued input (contract §4.7).

        Raises:
            CommitError: the turn was cancelled.
        """
        ...

    async def request_approval(self, request: ApprovalRequest) -> str | None:
        """Open a gate and wait for its answer (``"approve"`` or ``"deny"``).

        Returns ``None`` when no gate could be opened.
        """
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnSpec:
    """Everything a turn runs with, captured when it started.

    Attributes:
        history: committed history *before* the turn (a snapshot, never an
            alias of the actor's list).
        message: the turn's first user message.
        resumed: a resumed turn's committed messages after ``message`` (its
            step groups and folded inputs); empty for a new turn.
        first_step: the index of the turn's next step (its committed
            ``StepDone`` count when resumed).
        decided: a resumed turn's access decisions of step ``first_step``
            before the crash, ``(tool name, effect)`` in decision order: the
            resumed step reuses them instead of deciding those calls again.
        check_effect_topic: the journal's refusal of a staged record's topic.
    """

    session_id: SessionId
    loop_id: LoopId
    turn_id: TurnId
    turn_index: int
    message: UserMessage
    history: tuple[Conversation, ...]
    config: LoopConfig
    model: ModelClient
    hooks: HookRunner
    access_policy: AccessPolicy | None
    factory: EventFactory
    resumed: tuple[Conversation, ...] = ()
    first_step: int = 0
    decided: tuple[tuple[str, str], ...] = ()
    check_effect_topic: Callable[[str], None] | None = None


def step_call(
    spec: TurnSpec, operation: Operation, step_id: StepId, step_index: int
) -> HookCall:
    """The hook call of ``operation`` in one step of ``spec``'s turn.

    The fields a step, an inference and a tool call share; an inference's
    request and a tool call's fields are added with
    :func:`dataclasses.replace`.
    """
    return HookCall(
        operation=operation,
        started_at=spec.factory.now(),
        session_id=spec.session_id,
        loop_id=spec.loop_id,
        turn_id=spec.turn_id,
        step_id=step_id,
        turn_index=spec.turn_index,
        step_index=step_index,
    )


@dataclass(frozen=True, slots=True)
class PendingStep:
    """A step's group waiting to be committed by the actor (a safe prefix)."""

    step_id: StepId
    message: AIMessage


@dataclass(slots=True)
class TurnDraft:
    """The turn task's own progress; only the turn task writes it.

    Attributes:
        interrupted_prefix: the safe prefix of the step that was streaming
            when the turn was cancelled, if anything replayable had arrived.
    """

    interrupted_prefix: PendingStep | None = None
    steps: list[StepId] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Completed:
    """The turn ended with a final answer."""

    message: AIMessage
    usage: Usage


@dataclass(frozen=True, slots=True)
class Failed:
    """The turn failed; ``truncated`` is committed (as a StepDone) first."""

    error: TurnError
    truncated: PendingStep | None = None


@dataclass(frozen=True, slots=True)
class Interrupted:
    """The turn was cancelled; ``truncated`` is committed first, in a grace."""

    truncated: PendingStep | None = None


TurnOutcome = Completed | Failed | Interrupted
