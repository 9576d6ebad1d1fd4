"""The model port: what the runtime asks a model for and what it streams back.

Owns :class:`ModelRequest`, :class:`ToolSpec`, :class:`StreamEnd` and the
:class:`ModelClient` protocol. Pure: imports only value types; never an HTTP
library (clients live in :mod:`turnstream.models`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

from turnstream.content import (
    Conversation,
    ImageChunk,
    RefusalChunk,
    TextChunk,
    ThinkingChunk,
    ToolUseChunk,
    Usage,
)

__all__ = [
    "ModelClient",
    "ModelEvent",
    "ModelRequest",
    "StopReason",
    "StreamEnd",
    "ToolSpec",
]


class ToolSpec(BaseModel):
    """A tool offered to the model; ``input_schema`` is JSON Schema text."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str = ""
    input_schema: str = '{"type":"object"}'


class ModelRequest(BaseModel):
    """One step's request.

    ``system`` is never part of history; ``messages`` is the committed history
    plus the turn's staged messages, in order.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    system: str = ""
    messages: tuple[Conversation, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int | None = None


StopReason = Literal["end_turn", "tool_use", "max_tokens", "refusal", "other"]


class StreamEnd(BaseModel):
    """The last item of a successful stream: usage and why the model stopped."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    usage: Usage | None = None
    stop_reason: StopReason = "end_turn"


ModelEvent = (
    TextChunk | RefusalChunk | ThinkingChunk | ToolUseChunk | ImageChunk | StreamEnd
)
"""What :meth:`ModelClient.stream` yields: chunks, then exactly one StreamEnd."""


class ModelClient(Protocol):
    """A streaming model.

    ``stream`` yields chunks in arrival order and ends with one
    :class:`StreamEnd`. A stream that stops without a StreamEnd is truncated.
    Failures raise :class:`turnstream.errors.ProviderError` (HTTP errors,
    malformed or truncated streams). Cancellation must propagate: a client
    never swallows ``asyncio.CancelledError``.
    """

    @property
    def name(self) -> str:
        """A short provider label for logs and metrics (no secrets)."""
        ...

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Start the request and stream its response."""
        ...
