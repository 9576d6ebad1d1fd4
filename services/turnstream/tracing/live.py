"""The actor's live tracer: each hooked operation becomes one span.

Owns :class:`LiveTracer`, the :class:`~turnstream.runtime.hooks.Tracer` the
composition root hands to the actors when tracing is on. A span is built when
its operation finishes (ids are deterministic, so nothing is kept open but a
start time in a closure) and handed to a :class:`~turnstream.tracing.spans.
SpanSink` (the OTLP batch exporter, off the event loop).

What it never records: tool input or output, and message text unless the
operator opted in (``capture_content``). Imports the runtime's hook values and
trace store, and the span builders; no OpenTelemetry package.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import assert_never
from uuid import UUID

from turnstream.content import text_of
from turnstream.errors import TurnstreamError
from turnstream.runtime.hooks import FinishFn, HookCall, HookResult, Operation, Outcome
from turnstream.runtime.model_client import ModelRequest
from turnstream.runtime.tracing import TraceContexts, TurnTrace
from turnstream.tracing.spans import (
    AttributeValue,
    SpanRecord,
    SpanSink,
    chat_span,
    step_span,
    tool_span,
    turn_span,
)

__all__ = ["LiveTracer", "error_type_of"]

_OUTCOME = {
    Outcome.COMPLETED: "completed",
    Outcome.FAILED: "failed",
    Outcome.DENIED: "denied",
    Outcome.CANCELED: "interrupted",
}


def error_type_of(result: HookResult) -> str | None:
    """``error.type`` of a finished operation; ``None`` if it did not fail.

    A typed error's stable ``kind``; a denial ``denied``; a tool call that
    returned an error result ``tool_error``. Never the error's message.
    """
    if result.outcome is Outcome.DENIED:
        return "denied"
    if result.outcome is Outcome.FAILED:
        error = result.error
        if isinstance(error, TurnstreamError):
            return error.kind
        return type(error).__name__ if error is not None else "failed"
    if result.is_error:
        return "tool_error"
    return None


def _content(request: ModelRequest) -> dict[str, AttributeValue]:
    """The request's messages as ``gen_ai.input.messages`` (opt-in only)."""
    messages = [
        {
            "role": m.role,
            "parts": [{"type": "text", "content": text_of(m.blocks)}],
        }
        for m in request.messages
    ]
    attributes: dict[str, AttributeValue] = {
        "gen_ai.input.messages": json.dumps(messages)
    }
    if request.system:
        attributes["gen_ai.system_instructions"] = json.dumps(
            [{"type": "text", "content": request.system}]
        )
    return attributes


@dataclass(slots=True, eq=False)
class _Open:
    """A started span: what its end needs (the runtime's ``FinishFn``).

    One object the garbage collector tracks, where a closure over the same
    values is six (the function, its cell tuple, a cell per value); an open
    turn's span lives as long as the turn, long enough to reach the oldest
    generation, whose passes walk the actor's whole heap.
    """

    tracer: LiveTracer
    trace: TurnTrace
    turn_id: UUID
    start: int

    def __call__(self, result: HookResult) -> None:
        self.tracer.end(self, result)


class LiveTracer:
    """Records the turns an actor runs as spans (the runtime's ``Tracer``).

    Args:
        sink: where finished spans go.
        traces: the service's trace store (the submit's context, the
            sampling decision of each turn), shared with the event writer.
        capture_content: record message text on model spans.
    """

    def __init__(
        self, sink: SpanSink, traces: TraceContexts, *, capture_content: bool = False
    ) -> None:
        self._sink = sink
        self._traces = traces
        self._capture = capture_content

    def begin(self, call: HookCall) -> FinishFn | None:
        """Start the span of ``call``; ``None`` if its turn is not sampled."""
        turn_id = call.turn_id
        if turn_id is None or (
            call.step_id is None and call.operation is not Operation.TURN
        ):
            return None
        if call.operation is Operation.TURN:
            trace = self._traces.open_turn(turn_id, call.command_id)
        else:
            trace = self._traces.turn(turn_id)
        if trace is None or not trace.sampled:
            return None
        return _Open(self, trace, turn_id, time.time_ns())

    def end(self, open_span: _Open, result: HookResult) -> None:
        """Finish the span ``open_span`` with ``result`` and hand it over."""
        span = self._span(
            open_span.trace, open_span.turn_id, result, open_span.start, time.time_ns()
        )
        self._sink.emit(span)

    def _span(
        self, trace: TurnTrace, turn_id: UUID, result: HookResult, start: int, end: int
    ) -> SpanRecord:
        call = result.call
        error = error_type_of(result)
        # begin returned None for a step-level call without its step id.
        step_id = call.step_id or turn_id
        match call.operation:
            case Operation.TURN:
                return turn_span(
                    trace,
                    turn_id=turn_id,
                    loop_id=call.loop_id,
                    turn_index=call.turn_index,
                    start_ns=start,
                    end_ns=end,
                    outcome=_OUTCOME[result.outcome],
                    error_type=error,
                    usage=result.usage,
                )
            case Operation.STEP:
                return step_span(
                    trace,
                    turn_id=turn_id,
                    step_id=step_id,
                    step_index=call.step_index,
                    start_ns=start,
                    end_ns=end,
                    error_type=error,
                )
            case Operation.INFERENCE:
                request = call.request
                return chat_span(
                    trace,
                    step_id=step_id,
                    model=request.model if request is not None else "",
                    max_tokens=request.max_tokens if request is not None else None,
                    start_ns=start,
                    end_ns=end,
                    usage=result.usage,
                    error_type=error,
                    content=_content(request)
                    if self._capture and request is not None
                    else None,
                )
            case Operation.TOOL_CALL:
                return tool_span(
                    trace,
                    step_id=step_id,
                    tool_name=call.tool_name,
                    tool_use_id=call.tool_use_id,
                    start_ns=start,
                    end_ns=end,
                    error_type=error,
                )
            case _:
                assert_never(call.operation)
