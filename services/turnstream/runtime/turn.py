"""A turn's steps, from the first request to the outcome (contract §4.4).

Owns :func:`run_turn`: build each step's request from the pre-turn history
plus the turn's staged messages, stream it, validate it, enforce the tool
limits (strict and late, §10.1.8), run the tool batch, commit a tool step's
group through the actor, fold queued input after a tool step (§4.7), and return
exactly one outcome. The final text step is handed over as ``final``: the
actor commits its ``StepDone`` together with the terminal. It never touches
loop state and never publishes an enduring event itself. Cancellation
propagates (the caller turns it into ``TurnInterrupted``); a commit error ends
the turn interrupted (§10.1.7).
Imports the step, tool and handshake modules and value types.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from turnstream.content import (
    AIMessage,
    Conversation,
    ToolResultMessage,
    Usage,
)
from turnstream.errors import (
    StructuredOutputError,
    ToolLimitError,
    UsageOverflowError,
)
from turnstream.events import Cause, StepDone, ToolTiming, TurnFoldedInto
from turnstream.ids import StepId
from turnstream.runtime.effects import StagedRecord
from turnstream.runtime.errors import CommitError
from turnstream.runtime.handshake import (
    Completed,
    Failed,
    Interrupted,
    TurnDraft,
    TurnLink,
    TurnOutcome,
    TurnSpec,
    step_call,
)
from turnstream.runtime.hooks import Operation, Outcome
from turnstream.runtime.output_schema import check_structured_output
from turnstream.runtime.step import StepFailed, stream_step
from turnstream.runtime.tools import run_batch

__all__ = ["run_turn"]


@dataclass(slots=True)
class _Progress:
    """The running counters of one turn (turn-task local)."""

    staged: list[Conversation]
    usage: Usage = field(default_factory=Usage)
    tool_steps: int = 0
    tool_calls: int = 0


async def run_turn(spec: TurnSpec, link: TurnLink, draft: TurnDraft) -> TurnOutcome:
    """Run the turn's steps until one outcome.

    Raises:
        asyncio.CancelledError: the turn was cancelled; ``draft`` holds the
            interrupted safe prefix, if any.
    """
    progress = _resumed_progress(spec)
    step_index = spec.first_step
    try:
        while True:
            outcome = await _hooked_step(spec, link, draft, progress, step_index)
            if outcome is not None:
                return outcome
            step_index += 1
    except CommitError:
        return Interrupted()


def _resumed_progress(spec: TurnSpec) -> _Progress:
    """The counters of a turn, with what a resumed turn had committed.

    A resumed turn's committed tool steps count towards its limits, and their
    usage towards ``TurnDone.usage``, as if the turn had never stopped.
    """
    progress = _Progress(staged=[spec.message, *spec.resumed])
    for message in spec.resumed:
        if not isinstance(message, AIMessage):
            continue
        calls = len(message.tool_uses())
        if calls:
            progress.tool_steps += 1
            progress.tool_calls += calls
        if message.usage is not None:
            # An overflow here is met again, and fails the turn, at the next add.
            with contextlib.suppress(UsageOverflowError):
                progress.usage = progress.usage.add(message.usage)
    return progress


async def _hooked_step(
    spec: TurnSpec,
    link: TurnLink,
    draft: TurnDraft,
    progress: _Progress,
    step_index: int,
) -> TurnOutcome | None:
    """One step inside its Step hook (observers only; steps are not guardable)."""
    step_id = StepId(spec.factory.new_id())
    draft.steps.append(step_id)
    hook = await spec.hooks.start(step_call(spec, Operation.STEP, step_id, step_index))
    outcome_seen: Outcome = Outcome.CANCELED
    try:
        outcome = await _step(
            spec, link, draft, progress, step_id=step_id, step_index=step_index
        )
    except CommitError:
        outcome_seen = Outcome.FAILED
        raise
    else:
        failed = isinstance(outcome, Failed)
        outcome_seen = Outcome.FAILED if failed else Outcome.COMPLETED
    finally:
        hook.finish(outcome_seen)
    return outcome


async def _step(
    spec: TurnSpec,
    link: TurnLink,
    draft: TurnDraft,
    progress: _Progress,
    *,
    step_id: StepId,
    step_index: int,
) -> TurnOutcome | None:
    """One step; ``None`` means a committed tool step (continue)."""
    result = await stream_step(
        spec,
        link,
        draft,
        step_id=step_id,
        step_index=step_index,
        messages=(*spec.history, *progress.staged),
    )
    if isinstance(result, StepFailed):
        return Failed(result.error, result.truncated)
    message = result.message
    if not result.calls and spec.config.output_schema is not None:
        try:
            check_structured_output(message, spec.config.output_schema)
        except StructuredOutputError as error:
            return Failed(error)  # nothing of this step is committed
    try:
        progress.usage = progress.usage.add(result.usage or Usage())
    except UsageOverflowError as error:
        return Failed(error)
    if not result.calls:
        # A text-only answer always wins, whatever the tool counts (§10.1.8).
        await _commit_group(spec, link, step_id, (message,), final=True)
        return Completed(message=message, usage=progress.usage)
    limit = _over_limit(spec, progress, len(result.calls))
    if limit is not None:
        return Failed(limit)  # the over-limit step is never committed
    results, timings, effects = await run_batch(
        spec, link, result.calls, step_id=step_id, step_index=step_index
    )
    group: tuple[AIMessage | ToolResultMessage, ...] = (message, *results)
    await _commit_group(spec, link, step_id, group, timings=timings, effects=effects)
    progress.staged.extend(group)
    await _fold(spec, link, progress)
    return None


def _over_limit(
    spec: TurnSpec, progress: _Progress, calls: int
) -> ToolLimitError | None:
    limits = spec.config.limits
    progress.tool_steps += 1
    progress.tool_calls += calls
    if (
        progress.tool_steps > limits.max_tool_steps
        or progress.tool_calls > limits.max_tool_calls
    ):
        return ToolLimitError(
            iterations=progress.tool_steps,
            max_iterations=limits.max_tool_steps,
            calls=progress.tool_calls,
            max_calls=limits.max_tool_calls,
        )
    return None


async def _commit_group(
    spec: TurnSpec,
    link: TurnLink,
    step_id: StepId,
    group: tuple[AIMessage | ToolResultMessage, ...],
    *,
    final: bool = False,
    timings: tuple[ToolTiming, ...] = (),
    effects: tuple[StagedRecord, ...] = (),
) -> None:
    event = StepDone(
        header=spec.factory.header(turn_id=spec.turn_id, step_id=step_id),
        messages=group,
        tool_timings=timings,
    )
    # The calls' staged records go in the StepDone's own commit: both or neither.
    await link.commit([event], group, final=final, effects=effects)


async def _fold(spec: TurnSpec, link: TurnLink, progress: _Progress) -> None:
    """Fold the leading run of queued input after a committed tool step.

    One commit folds the whole run, in order: each ``TurnFoldedInto`` stays one
    event, and a failed commit leaves every entry draining (returned on the
    interrupt that follows), so nothing is folded half-way.
    """
    entries = await link.drain()
    if not entries:
        return
    events = [
        TurnFoldedInto(
            header=spec.factory.header(
                turn_id=spec.turn_id,
                cause=Cause(command_id=entry.command_id, agency=entry.agency),
            ),
            turn_index=spec.turn_index,
            message=entry.message,
        )
        for entry in entries
    ]
    messages = [entry.message for entry in entries]
    await link.commit(events, messages, folded=[e.command_id for e in entries])
    progress.staged.extend(messages)
