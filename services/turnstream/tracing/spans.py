"""Span records of a turn, with the GenAI semantic-convention attributes.

Owns :class:`SpanRecord` (one finished span, SDK-free), the :class:`SpanSink`
port the exporters implement, and the builders both span sources use (the
actor's live tracer and the journal exporter), so the two name, parent and
attribute every span alike: ``invoke_agent`` (the turn), ``step``,
``chat {model}`` (one model request) and ``execute_tool {tool}``.

Attributes follow the OpenTelemetry GenAI conventions (``gen_ai.*``,
``error.type``); turnstream's own coordinates go under ``turnstream.*``.
Message content is never recorded here. Pure: imports only value types and
the runtime's trace ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol
from uuid import UUID

from turnstream.content import Usage
from turnstream.runtime.tracing import TurnTrace, span_id_for

__all__ = [
    "AttributeValue",
    "SpanRecord",
    "SpanSink",
    "chat_span",
    "step_span",
    "tool_span",
    "turn_span",
]

AttributeValue = str | bool | int | float


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One finished span, ready for an exporter.

    Attributes:
        name: the span name.
        trace_id / span_id / parent_id: 128- and 64-bit ids (parent 0: root).
        start_ns / end_ns: Unix epoch nanoseconds.
        attributes: the span's attributes.
        error_type: set iff the operation failed (``error.type``; status ERROR).
        client: a call out of the process (the model request), else internal.
        sampled: the trace's sampling flag.
    """

    name: str
    trace_id: int
    span_id: int
    parent_id: int
    start_ns: int
    end_ns: int
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    error_type: str | None = None
    client: bool = False
    sampled: bool = True


class SpanSink(Protocol):
    """Where finished spans go (an OTLP exporter, or a list in tests)."""

    def emit(self, span: SpanRecord) -> None:
        """Hand over one finished span; must not block or raise."""
        ...


def _usage(attributes: dict[str, AttributeValue], usage: Usage | None) -> None:
    if usage is not None:
        attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
        attributes["gen_ai.usage.output_tokens"] = usage.output_tokens


def _span(
    trace: TurnTrace,
    name: str,
    ids: tuple[int, int],
    times: tuple[int, int],
    attributes: dict[str, AttributeValue],
    *,
    error_type: str | None,
    client: bool = False,
    content: dict[str, AttributeValue] | None = None,
) -> SpanRecord:
    # What every span does alike: ``ids`` are its own and its parent's,
    # ``times`` its start and end; ``error.type`` iff it failed, then the
    # content the operator opted in to.
    if error_type is not None:
        attributes["error.type"] = error_type
    if content:
        attributes.update(content)
    span_id, parent_id = ids
    start_ns, end_ns = times
    return SpanRecord(
        name=name,
        trace_id=trace.trace_id,
        span_id=span_id,
        parent_id=parent_id,
        start_ns=start_ns,
        end_ns=end_ns,
        attributes=attributes,
        error_type=error_type,
        client=client,
        sampled=trace.sampled,
    )


def turn_span(
    trace: TurnTrace,
    *,
    turn_id: UUID,
    loop_id: UUID | None,
    turn_index: int,
    start_ns: int,
    end_ns: int,
    outcome: str,
    error_type: str | None = None,
    usage: Usage | None = None,
    model: str = "",
) -> SpanRecord:
    """The span of one turn (the agent invocation)."""
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "invoke_agent",
        "turnstream.turn.id": str(turn_id),
        "turnstream.turn.index": turn_index,
        "turnstream.turn.outcome": outcome,
    }
    if loop_id is not None:
        attributes["gen_ai.conversation.id"] = str(loop_id)
    if model:
        attributes["gen_ai.request.model"] = model
    _usage(attributes, usage)
    return _span(
        trace,
        "invoke_agent",
        (span_id_for("turn", turn_id), trace.parent_span_id),
        (start_ns, end_ns),
        attributes,
        error_type=error_type,
    )


def step_span(
    trace: TurnTrace,
    *,
    turn_id: UUID,
    step_id: UUID,
    step_index: int,
    start_ns: int,
    end_ns: int,
    error_type: str | None = None,
) -> SpanRecord:
    """The span of one step (its model request, then its tool calls)."""
    attributes: dict[str, AttributeValue] = {
        "turnstream.step.id": str(step_id),
        "turnstream.step.index": step_index,
    }
    return _span(
        trace,
        "step",
        (span_id_for("step", step_id), span_id_for("turn", turn_id)),
        (start_ns, end_ns),
        attributes,
        error_type=error_type,
    )


def chat_span(
    trace: TurnTrace,
    *,
    step_id: UUID,
    model: str,
    start_ns: int,
    end_ns: int,
    usage: Usage | None = None,
    max_tokens: int | None = None,
    error_type: str | None = None,
    content: dict[str, AttributeValue] | None = None,
) -> SpanRecord:
    """The span of one model request (``content``: only if the operator opted in)."""
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
    }
    if max_tokens is not None:
        attributes["gen_ai.request.max_tokens"] = max_tokens
    _usage(attributes, usage)
    return _span(
        trace,
        f"chat {model}" if model else "chat",
        (span_id_for("chat", step_id), span_id_for("step", step_id)),
        (start_ns, end_ns),
        attributes,
        error_type=error_type,
        client=True,
        content=content,
    )


def tool_span(
    trace: TurnTrace,
    *,
    step_id: UUID,
    tool_name: str,
    tool_use_id: str,
    start_ns: int,
    end_ns: int,
    error_type: str | None = None,
) -> SpanRecord:
    """The span of one tool call."""
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool_name,
        "gen_ai.tool.call.id": tool_use_id,
        "gen_ai.tool.type": "function",
    }
    return _span(
        trace,
        f"execute_tool {tool_name}",
        (span_id_for("tool", step_id, tool_use_id), span_id_for("step", step_id)),
        (start_ns, end_ns),
        attributes,
        error_type=error_type,
    )
