"""Spans rebuilt from the committed journal: a turn's trace, whatever the actor did.

Owns :class:`JournalSpans`. Fed a loop's committed events in journal order
(with their record headers), it yields the spans of each turn from the times
the actor committed: the turn from ``TurnStarted`` to its terminal, each step
from the previous boundary (the turn's start, the previous ``StepDone``, a
``TurnResumed``) to its ``StepDone``, the step's model request up to its first
tool call, each tool call from its ``tool_timings``. An actor killed -9 loses
the spans it had not exported; the journal keeps every committed step, and the
next owner's ``TurnResumed`` or ``TurnInterrupted`` closes the turn.

Ids are the live tracer's (:mod:`turnstream.runtime.tracing`): the trace is
the one the ``TurnStarted`` record's ``traceparent`` names (else derived from
the turn id), the turn span's parent the submit's (its ``ts-trace-origin``).
Pure: imports value types, the runtime's trace ids and the span builders.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from turnstream.content import Usage
from turnstream.events import (
    EnduringEvent,
    StepDone,
    TurnDone,
    TurnFailed,
    TurnInterrupted,
    TurnResumed,
    TurnStarted,
)
from turnstream.runtime.tracing import (
    TRACE_ORIGIN,
    TRACEPARENT,
    TraceContext,
    TurnTrace,
    trace_id_for,
)
from turnstream.tracing.spans import (
    SpanRecord,
    chat_span,
    step_span,
    tool_span,
    turn_span,
)

__all__ = ["JournalSpans"]

_US = 1000


def _ns(at: datetime | None) -> int:
    if at is None:
        return 0
    return int(at.timestamp() * 1_000_000) * _US


@dataclass(slots=True)
class _OpenTurn:
    trace: TurnTrace
    loop_id: UUID | None
    turn_index: int
    model: str
    max_tokens: int | None
    started_ns: int
    boundary_ns: int
    steps: int = 0
    usage: Usage = field(default_factory=Usage)


class JournalSpans:
    """Rebuilds each turn's spans from its loop's committed events.

    Args:
        sampler: decides for a turn whose ``TurnStarted`` carried no trace
            (``None``: every such turn); a carried trace's flag decides for
            its own.
    """

    def __init__(self, sampler: Callable[[int], bool] | None = None) -> None:
        self._sampler = sampler
        self._open: dict[UUID, _OpenTurn] = {}

    @property
    def open_turns(self) -> int:
        """Turns started and not (yet) ended in what was read."""
        return len(self._open)

    def add(  # noqa: PLR0911 - one return per event kind
        self, event: EnduringEvent, headers: Sequence[tuple[str, bytes]] = ()
    ) -> list[SpanRecord]:
        """The spans ``event`` completes (each step's at its ``StepDone``)."""
        turn_id = event.header.turn_id
        if turn_id is None:
            return []
        if isinstance(event, TurnStarted):
            self._open[turn_id] = self._opened(event, turn_id, headers)
            return []
        turn = self._open.get(turn_id)
        if turn is None:
            return []  # its TurnStarted is before what was read
        at = _ns(event.header.created_at)
        if isinstance(event, StepDone):
            return self._step(turn, event, at)
        if isinstance(event, TurnResumed):
            turn.boundary_ns = at  # the time the loop had no owner is no step
            return []
        if isinstance(event, TurnDone | TurnFailed | TurnInterrupted):
            del self._open[turn_id]
            return [self._ended(turn, turn_id, event, at)] if turn.trace.sampled else []
        return []

    def add_all(
        self, entries: Iterable[tuple[EnduringEvent, Sequence[tuple[str, bytes]]]]
    ) -> list[SpanRecord]:
        """The spans of many events, in order."""
        spans: list[SpanRecord] = []
        for event, headers in entries:
            spans += self.add(event, headers)
        return spans

    def _opened(
        self, event: TurnStarted, turn_id: UUID, headers: Sequence[tuple[str, bytes]]
    ) -> _OpenTurn:
        named = dict(headers)
        own = TraceContext.parse(named.get(TRACEPARENT))
        origin = TraceContext.parse(named.get(TRACE_ORIGIN))
        if own is not None:
            # The actor's own decision (or the submit's) stands.
            parent = origin.span_id if origin is not None else 0
            trace = TurnTrace(own.trace_id, parent, own.sampled)
        else:
            trace_id = trace_id_for(turn_id)
            trace = TurnTrace(trace_id, 0, self._decide(trace_id))
        at = _ns(event.header.created_at)
        return _OpenTurn(
            trace=trace,
            loop_id=event.header.loop_id,
            turn_index=event.turn_index,
            model=event.model,
            max_tokens=event.max_tokens,
            started_ns=at,
            boundary_ns=at,
        )

    def _decide(self, trace_id: int) -> bool:
        return self._sampler is None or self._sampler(trace_id)

    def _step(self, turn: _OpenTurn, event: StepDone, at: int) -> list[SpanRecord]:
        start, turn.boundary_ns = turn.boundary_ns, at
        index = turn.steps
        turn.steps += 1
        step_id = event.header.step_id
        if step_id is None or not turn.trace.sampled:
            return []
        trace = turn.trace
        turn_id = event.header.turn_id
        if turn_id is None:
            return []
        usage = event.ai_message.usage
        first_tool = min((_ns(t.started_at) for t in event.tool_timings), default=at)
        spans = [
            step_span(
                trace,
                turn_id=turn_id,
                step_id=step_id,
                step_index=index,
                start_ns=start,
                end_ns=at,
            ),
            chat_span(
                trace,
                step_id=step_id,
                model=turn.model,
                max_tokens=turn.max_tokens,
                start_ns=start,
                end_ns=max(start, first_tool),
                usage=usage,
            ),
        ]
        for timing in event.tool_timings:
            began = _ns(timing.started_at)
            spans.append(
                tool_span(
                    trace,
                    step_id=step_id,
                    tool_name=timing.tool_name,
                    tool_use_id=timing.tool_use_id,
                    start_ns=began,
                    end_ns=began + timing.duration_us * _US,
                    error_type="tool_error" if timing.is_error else None,
                )
            )
        return spans

    def _ended(
        self,
        turn: _OpenTurn,
        turn_id: UUID,
        event: TurnDone | TurnFailed | TurnInterrupted,
        at: int,
    ) -> SpanRecord:
        usage: Usage | None = None
        error: str | None = None
        if isinstance(event, TurnDone):
            outcome, usage = "completed", event.usage
        elif isinstance(event, TurnFailed):
            outcome, error = "failed", event.error.kind.value
        else:
            outcome = "interrupted"
        return turn_span(
            turn.trace,
            turn_id=turn_id,
            loop_id=turn.loop_id,
            turn_index=turn.turn_index,
            start_ns=turn.started_ns,
            end_ns=at,
            outcome=outcome,
            error_type=error,
            usage=usage,
            model=turn.model,
        )
