"""Parser for the OpenAI-compatible ``chat.completion.chunk`` event stream.

Owns :class:`ChunkParser`, which folds chunk events (until ``data: [DONE]``)
into turnstream chunks and one :class:`~turnstream.runtime.model_client.StreamEnd`.
Internal to :mod:`turnstream.models.openai`. Imports pydantic and value types;
must not import httpx, aiokafka, fastavro or faust.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from turnstream.content import (
    RefusalChunk,
    TextChunk,
    ThinkingChunk,
    ToolUseChunk,
    Usage,
)
from turnstream.models._sse import ProtocolFault, SseEvent, bounded_reason
from turnstream.runtime.model_client import ModelEvent, StopReason, StreamEnd

__all__ = ["ChunkParser"]

_STOP_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _FunctionDelta(_Wire):
    name: str | None = None
    arguments: str | None = None


class _ToolCallDelta(_Wire):
    index: int | None = Field(default=None, ge=0)
    id: str | None = None
    function: _FunctionDelta | None = None


class _Delta(_Wire):
    content: str | None = None
    refusal: str | None = None
    reasoning_content: str | None = None
    # Some servers send reasoning as a string, others as an object; only the
    # string form is a reasoning delta.
    reasoning: object = None
    tool_calls: list[_ToolCallDelta] | None = None


class _Choice(_Wire):
    index: int = 0
    delta: _Delta | None = None
    finish_reason: str | None = None


class _PromptDetails(_Wire):
    cached_tokens: int | None = None


class _CompletionDetails(_Wire):
    reasoning_tokens: int | None = None


class _Usage(_Wire):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None


class _ErrorDetail(_Wire):
    message: str | None = None
    type: str | None = None
    code: int | str | None = None


class _Chunk(_Wire):
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: _ErrorDetail | None = None


class ChunkParser:
    """Folds ``chat.completion.chunk`` events; ``data: [DONE]`` ends them."""

    def __init__(self) -> None:
        self._done = False
        self._finish: str | None = None
        self._usage: Usage | None = None
        self._saw_tool_call = False

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, event: SseEvent) -> list[ModelEvent]:
        if event.data.strip() == "[DONE]":
            self._done = True
            return []
        chunk = _decode(event)
        if event.event == "error" or chunk.error is not None:
            raise _stream_error(chunk.error)
        if chunk.usage is not None:
            self._usage = _usage(chunk.usage)
        out: list[ModelEvent] = []
        for choice in chunk.choices or ():
            if choice.index != 0:
                continue  # only one completion is ever requested
            if choice.finish_reason:
                self._finish = choice.finish_reason
            if choice.delta is not None:
                out.extend(self._delta(choice.delta))
        return out

    def end(self) -> StreamEnd:
        if not self._done:
            raise ProtocolFault("truncated stream")
        stop = _STOP_REASONS.get(self._finish or "", "other")
        if self._saw_tool_call and (self._finish in (None, "stop")):
            # Several compatible servers report "stop" (or nothing) for a reply
            # that ends in tool calls; the calls are what the runtime acts on.
            stop = "tool_use"
        elif self._finish is None:
            stop = "end_turn"
        return StreamEnd(usage=self._usage, stop_reason=stop)

    def _delta(self, delta: _Delta) -> list[ModelEvent]:
        out: list[ModelEvent] = []
        reasoning = delta.reasoning_content or (
            delta.reasoning if isinstance(delta.reasoning, str) else None
        )
        if reasoning:
            out.append(ThinkingChunk(index=0, thinking=reasoning))
        if delta.refusal:
            out.append(RefusalChunk(text=delta.refusal))
        if delta.content:
            out.append(TextChunk(text=delta.content))
        for position, call in enumerate(delta.tool_calls or ()):
            function = call.function or _FunctionDelta()
            piece = ToolUseChunk(
                index=position if call.index is None else call.index,
                id=call.id or "",
                name=function.name or "",
                input_json=function.arguments or "",
            )
            if piece.id or piece.name or piece.input_json:
                self._saw_tool_call = True
                out.append(piece)
        return out


def _decode(event: SseEvent) -> _Chunk:
    try:
        return _Chunk.model_validate_json(event.data)
    except ValidationError as exc:
        if event.event == "error":
            raise _stream_error(None) from None
        kind = "invalid JSON" if _is_json_error(exc) else "unexpected chunk shape"
        raise ProtocolFault(f"malformed stream ({kind})") from None


def _is_json_error(exc: ValidationError) -> bool:
    return any(error["type"] == "json_invalid" for error in exc.errors())


def _stream_error(detail: _ErrorDetail | None) -> ProtocolFault:
    message = (detail.message or detail.type) if detail is not None else None
    status = None
    if detail is not None and isinstance(detail.code, int):
        status = detail.code if 400 <= detail.code < 600 else None
    reason = bounded_reason(message or "unknown")
    return ProtocolFault(f"stream error: {reason}", status)


def _usage(wire: _Usage) -> Usage:
    cached = (wire.prompt_tokens_details or _PromptDetails()).cached_tokens or 0
    reasoning = (
        wire.completion_tokens_details or _CompletionDetails()
    ).reasoning_tokens or 0
    prompt = wire.prompt_tokens or 0
    try:
        # prompt_tokens includes the cached tokens; turnstream keeps them apart
        # (context = input + cache_read + cache_creation), as Anthropic does.
        return Usage(
            input_tokens=max(prompt - cached, 0),
            output_tokens=wire.completion_tokens or 0,
            cache_read_tokens=cached,
            reasoning_tokens=reasoning,
        )
    except ValidationError:
        raise ProtocolFault("malformed stream (invalid usage)") from None
