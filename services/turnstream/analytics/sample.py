"""Synthetic turn journals with known outcomes, for tests, benchmarks and demos.

Owns :class:`TurnPlan`, :class:`LoopPlan` and :func:`build_journal`, which
turn a plan into the valid enduring events a loop actor would journal
(``LoopStarted``, then per turn ``TurnStarted``, ``StepDone`` x N, one
terminal, ``LoopIdle``). Everything is deterministic for a given seed. Pure:
imports only value types; must not import faust, fastavro or aiokafka.

The plan states the expected aggregates directly: a turn's latency is
``latency_ms``, its steps ``steps``, its tool calls ``steps *
tool_calls_per_step``, and its token usage ``steps * step_usage`` (every
``StepDone`` carries ``step_usage``; a ``TurnDone`` carries the sum).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final, assert_never

from turnstream.analytics.aggregate import TerminalKind
from turnstream.content import (
    AIMessage,
    TextBlock,
    ToolResultMessage,
    ToolUseBlock,
    Usage,
    UserMessage,
)
from turnstream.events import (
    EnduringEvent,
    FailureInfo,
    FailureKind,
    Header,
    LoopIdle,
    LoopStarted,
    StepDone,
    TurnDone,
    TurnFailed,
    TurnInterrupted,
    TurnStarted,
)

__all__ = ["DEFAULT_START", "LoopPlan", "TurnPlan", "build_journal", "scale_usage"]

DEFAULT_START: Final = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
"""Where synthetic journals start by default (a window boundary)."""


def scale_usage(usage: Usage, times: int) -> Usage:
    """``usage`` added to itself ``times`` times."""
    return Usage(
        input_tokens=usage.input_tokens * times,
        output_tokens=usage.output_tokens * times,
        cache_read_tokens=usage.cache_read_tokens * times,
        cache_creation_tokens=usage.cache_creation_tokens * times,
        reasoning_tokens=usage.reasoning_tokens * times,
    )


@dataclass(frozen=True, slots=True)
class TurnPlan:
    """One turn of a synthetic loop.

    Attributes:
        outcome: how the turn ends.
        steps: ``StepDone`` events before the terminal.
        tool_calls_per_step: ``ToolResultMessage`` s in each step.
        latency_ms: ``TurnStarted`` → terminal, in milliseconds (> steps).
        step_usage: every step's ``AIMessage.usage``.
        failure: ``TurnFailed.error.kind`` when the turn fails.
        gap_ms: idle time before the turn starts (after the previous event).
    """

    outcome: TerminalKind = TerminalKind.DONE
    steps: int = 1
    tool_calls_per_step: int = 0
    latency_ms: int = 1_000
    step_usage: Usage = field(
        default_factory=lambda: Usage(input_tokens=10, output_tokens=5)
    )
    failure: FailureKind = FailureKind.PROVIDER
    gap_ms: int = 1_000

    @property
    def tool_calls(self) -> int:
        """Tool calls of the whole turn."""
        return self.steps * self.tool_calls_per_step

    @property
    def usage(self) -> Usage:
        """Token usage of the whole turn."""
        return scale_usage(self.step_usage, self.steps)


@dataclass(frozen=True, slots=True)
class LoopPlan:
    """One synthetic loop.

    Attributes:
        turns: the loop's turns, in order.
        model: ``LoopStarted.model``; ``None`` leaves ``LoopStarted`` out.
        start: ``LoopStarted.created_at`` (the first turn follows its gap).
        loop_id: the loop id; drawn from the seed when ``None``.
    """

    turns: Sequence[TurnPlan]
    model: str | None = "model-a"
    start: datetime = DEFAULT_START
    loop_id: uuid.UUID | None = None


class _Ids:
    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def next(self) -> uuid.UUID:
        return uuid.UUID(int=self._rng.getrandbits(128), version=4)


def build_journal(loops: Sequence[LoopPlan], *, seed: int = 0) -> list[EnduringEvent]:
    """Every loop's events, merged in ``created_at`` order (stable per loop).

    Args:
        loops: the plans.
        seed: drives every generated id.
    """
    ids = _Ids(seed)
    merged: list[tuple[datetime, int, int, EnduringEvent]] = []
    for loop_index, plan in enumerate(loops):
        for seq, event in enumerate(_loop_events(plan, ids)):
            at = event.header.created_at or plan.start
            merged.append((at, loop_index, seq, event))
    merged.sort(key=lambda item: (item[0], item[1], item[2]))
    return [event for _, _, _, event in merged]


def _loop_events(plan: LoopPlan, ids: _Ids) -> Iterator[EnduringEvent]:
    session_id = ids.next()
    loop_id = plan.loop_id or ids.next()

    def header(
        at: datetime, turn_id: uuid.UUID | None = None, step: bool = False
    ) -> Header:
        return Header(
            event_id=ids.next(),
            session_id=session_id,
            loop_id=loop_id,
            turn_id=turn_id,
            step_id=ids.next() if step else None,
            created_at=at,
        )

    now = plan.start
    if plan.model is not None:
        yield LoopStarted(header=header(now), model=plan.model)
    for index, turn in enumerate(plan.turns, start=1):
        if turn.steps >= turn.latency_ms:
            raise ValueError(
                "latency_ms must exceed steps (steps fall strictly inside)"
            )
        turn_id = ids.next()
        started = now + timedelta(milliseconds=turn.gap_ms)
        yield TurnStarted(
            header=header(started, turn_id),
            turn_index=index,
            message=UserMessage(blocks=(TextBlock(text=f"turn {index}"),)),
        )
        for step in range(1, turn.steps + 1):
            at = started + timedelta(
                milliseconds=turn.latency_ms * step / (turn.steps + 1)
            )
            yield _step(header(at, turn_id, step=True), turn, step)
        ended = started + timedelta(milliseconds=turn.latency_ms)
        yield _terminal(header(ended, turn_id), turn, index)
        yield LoopIdle(header=header(ended))
        now = ended


def _step(header: Header, turn: TurnPlan, step: int) -> StepDone:
    uses = tuple(
        ToolUseBlock(id=f"call-{step}-{n}", name="lookup", input="{}")
        for n in range(turn.tool_calls_per_step)
    )
    ai = AIMessage(
        blocks=(TextBlock(text=f"step {step}"), *uses), usage=turn.step_usage
    )
    results = tuple(
        ToolResultMessage(tool_use_id=use.id, blocks=(TextBlock(text="ok"),))
        for use in uses
    )
    return StepDone(header=header, messages=(ai, *results))


def _terminal(
    header: Header, turn: TurnPlan, index: int
) -> TurnDone | TurnFailed | TurnInterrupted:
    match turn.outcome:
        case TerminalKind.DONE:
            return TurnDone(
                header=header,
                turn_index=index,
                message=AIMessage(blocks=(TextBlock(text="done"),)),
                usage=turn.usage,
            )
        case TerminalKind.FAILED:
            return TurnFailed(
                header=header,
                turn_index=index,
                error=FailureInfo(kind=turn.failure, message="synthetic failure"),
            )
        case TerminalKind.INTERRUPTED:
            return TurnInterrupted(header=header, turn_index=index)
        case _:
            assert_never(turn.outcome)
