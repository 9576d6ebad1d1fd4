"""Parser for the Anthropic Messages event stream.

Owns :class:`EventParser`, which folds ``message_start`` …
``message_stop`` events into turnstream chunks and one
:class:`~turnstream.runtime.model_client.StreamEnd`, and :data:`SIGNATURE_FORMAT`.
Internal to :mod:`turnstream.models.anthropic`. Imports pydantic and value
types; must not import httpx, aiokafka, fastavro or faust.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from turnstream.content import TextChunk, ThinkingChunk, ToolUseChunk, Usage
from turnstream.models._sse import ProtocolFault, SseEvent, bounded_reason
from turnstream.runtime.model_client import ModelEvent, StopReason, StreamEnd

__all__ = ["SIGNATURE_FORMAT", "EventParser"]

SIGNATURE_FORMAT = "anthropic"
"""The format label of signatures and provider state this dialect replays."""

_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "refusal": "refusal",
}

# Mid-stream errors carry a type, not a status; the documented pairing keeps
# ProviderError.is_retriable meaningful for them (overloaded is retriable).
_ERROR_STATUS: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _Envelope(_Wire):
    type: str


class _Usage(_Wire):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None


class _Message(_Wire):
    usage: _Usage | None = None


class _MessageStart(_Wire):
    message: _Message


class _ContentBlock(_Wire):
    type: str
    id: str = ""
    name: str = ""
    text: str = ""
    thinking: str = ""
    signature: str = ""
    data: str = ""
    input: dict[str, object] | None = None


class _BlockStart(_Wire):
    index: int = Field(ge=0)
    content_block: _ContentBlock


class _Delta(_Wire):
    type: str
    text: str = ""
    partial_json: str = ""
    thinking: str = ""
    signature: str = ""


class _BlockDelta(_Wire):
    index: int = Field(ge=0)
    delta: _Delta


class _BlockStop(_Wire):
    index: int = Field(ge=0)


class _StopDelta(_Wire):
    stop_reason: str | None = None


class _MessageDelta(_Wire):
    delta: _StopDelta | None = None
    usage: _Usage | None = None


class _ErrorDetail(_Wire):
    type: str = ""
    message: str = ""


class _ErrorEvent(_Wire):
    error: _ErrorDetail | None = None


_BlockKind = Literal["text", "thinking", "tool_use", "ignored"]

_BLOCK_KIND: dict[str, _BlockKind] = {
    "text": "text",
    "thinking": "thinking",
    "redacted_thinking": "thinking",
    "tool_use": "tool_use",
}

_DELTA_KIND: dict[str, _BlockKind] = {
    "text_delta": "text",
    "thinking_delta": "thinking",
    "signature_delta": "thinking",
    "input_json_delta": "tool_use",
}


@dataclass(slots=True)
class _Block:
    kind: _BlockKind
    index: int  # dense per kind: the stream's block index counts every kind
    has_input: bool = False


class EventParser:
    """Folds the Messages event stream; ``message_stop`` ends it.

    Unknown event and block types are skipped, as the API's versioning policy
    asks of clients; ``ping`` is a keep-alive.
    """

    def __init__(self) -> None:
        self._done = False
        self._blocks: dict[int, _Block] = {}
        self._counts: dict[_BlockKind, int] = {}
        self._usage: dict[str, int] = {}
        self._stop: str | None = None

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, event: SseEvent) -> list[ModelEvent]:
        if event.event == "error":
            raise _stream_error(_json_or_none(event.data))
        payload = _json(event.data)
        kind = _parse(_Envelope, payload).type
        if kind == "error":
            raise _stream_error(payload)
        match kind:
            case "message_start":
                start = _parse(_MessageStart, payload)
                self._take_usage(start.message.usage)
            case "content_block_start":
                return self._start(_parse(_BlockStart, payload))
            case "content_block_delta":
                return self._delta(_parse(_BlockDelta, payload))
            case "content_block_stop":
                return self._stop_block(_parse(_BlockStop, payload).index)
            case "message_delta":
                delta = _parse(_MessageDelta, payload)
                if delta.delta is not None and delta.delta.stop_reason:
                    self._stop = delta.delta.stop_reason
                self._take_usage(delta.usage)
            case "message_stop":
                self._done = True
        return []

    def end(self) -> StreamEnd:
        if not self._done:
            raise ProtocolFault("truncated stream")
        usage = None
        if self._usage:
            try:
                usage = Usage(
                    input_tokens=self._usage.get("input_tokens", 0),
                    output_tokens=self._usage.get("output_tokens", 0),
                    cache_read_tokens=self._usage.get("cache_read_input_tokens", 0),
                    cache_creation_tokens=self._usage.get(
                        "cache_creation_input_tokens", 0
                    ),
                )
            except ValidationError:
                raise ProtocolFault("malformed stream (invalid usage)") from None
        stop = _STOP_REASONS.get(self._stop or "end_turn", "other")
        return StreamEnd(usage=usage, stop_reason=stop)

    def _take_usage(self, usage: _Usage | None) -> None:
        # message_delta counts are cumulative: the latest value wins.
        if usage is not None:
            for field, value in usage.model_dump(exclude_none=True).items():
                self._usage[field] = value

    def _start(self, start: _BlockStart) -> list[ModelEvent]:
        if start.index in self._blocks:
            raise ProtocolFault("malformed stream (block started twice)")
        block = start.content_block
        kind = _BLOCK_KIND.get(block.type, "ignored")
        index = self._counts.get(kind, 0)
        self._counts[kind] = index + 1
        state = self._blocks[start.index] = _Block(kind=kind, index=index)
        match block.type:
            case "text" if block.text:
                return [TextChunk(text=block.text)]
            case "thinking" if block.thinking or block.signature:
                return [_thinking_chunk(index, block.thinking, block.signature)]
            case "redacted_thinking":
                state_json = json.dumps(
                    {"type": "redacted_thinking", "data": block.data}
                )
                return [
                    ThinkingChunk(
                        index=index,
                        provider_state=state_json,
                        provider_state_format=SIGNATURE_FORMAT,
                    )
                ]
            case "tool_use":
                # The start carries an empty input object; the JSON arrives in
                # input_json_delta events. A non-empty input here is complete.
                initial = json.dumps(block.input) if block.input else ""
                state.has_input = bool(initial)
                return [
                    ToolUseChunk(
                        index=index, id=block.id, name=block.name, input_json=initial
                    )
                ]
        return []

    def _delta(self, event: _BlockDelta) -> list[ModelEvent]:
        block = self._blocks.get(event.index)
        if block is None:
            raise ProtocolFault("malformed stream (delta for an unknown block)")
        delta = event.delta
        if block.kind == "ignored" or delta.type not in _DELTA_KIND:
            return []  # e.g. citations, or deltas of server-tool blocks
        if _DELTA_KIND[delta.type] != block.kind:
            raise ProtocolFault("malformed stream (delta does not match its block)")
        match delta.type:
            case "text_delta" if delta.text:
                return [TextChunk(text=delta.text)]
            case "thinking_delta" if delta.thinking:
                return [ThinkingChunk(index=block.index, thinking=delta.thinking)]
            case "signature_delta" if delta.signature:
                return [_thinking_chunk(block.index, "", delta.signature)]
            case "input_json_delta" if delta.partial_json:
                block.has_input = True
                return [ToolUseChunk(index=block.index, input_json=delta.partial_json)]
        return []

    def _stop_block(self, index: int) -> list[ModelEvent]:
        block = self._blocks.get(index)
        if block is None:
            raise ProtocolFault("malformed stream (stop for an unknown block)")
        if block.kind == "tool_use" and not block.has_input:
            # A call without arguments streams no JSON at all; make it "{}".
            block.has_input = True
            return [ToolUseChunk(index=block.index, input_json="{}")]
        return []


def _thinking_chunk(index: int, thinking: str, signature: str) -> ThinkingChunk:
    if not signature:
        return ThinkingChunk(index=index, thinking=thinking)
    return ThinkingChunk(
        index=index,
        thinking=thinking,
        signature=signature,
        signature_format=SIGNATURE_FORMAT,
    )


def _json(data: str) -> object:
    try:
        value: object = json.loads(data)
    except ValueError:
        raise ProtocolFault("malformed stream (invalid JSON)") from None
    return value


_W = TypeVar("_W", bound=_Wire)


def _json_or_none(data: str) -> object:
    try:
        return _json(data)
    except ProtocolFault:
        return None


def _parse(model: type[_W], payload: object) -> _W:
    try:
        return model.model_validate(payload)
    except ValidationError:
        raise ProtocolFault("malformed stream (unexpected event shape)") from None


def _stream_error(payload: object) -> ProtocolFault:
    try:
        detail = _ErrorEvent.model_validate(payload).error or _ErrorDetail()
    except ValidationError:
        detail = _ErrorDetail()
    reason = bounded_reason(detail.message or detail.type or "unknown")
    return ProtocolFault(f"stream error: {reason}", _ERROR_STATUS.get(detail.type))
