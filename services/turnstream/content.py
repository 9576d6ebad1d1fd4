"""Content model: blocks, streamed chunks, messages and token usage.

Owns the value types a turn's history is made of. Every type is a frozen
pydantic model with extra fields forbidden, so untrusted input is validated at
the boundary. Imports only :mod:`turnstream.errors`.

Tool inputs and provider state are kept as raw JSON *text* (``str``), never as
parsed objects: the runtime must replay exactly what the provider sent, and a
stored copy must not change when re-encoded.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from turnstream.errors import UsageOverflowError

__all__ = [
    "MAX_TOKEN_COUNT",
    "AIMessage",
    "Block",
    "Chunk",
    "Conversation",
    "ImageBlock",
    "ImageChunk",
    "Message",
    "RefusalBlock",
    "RefusalChunk",
    "Role",
    "TextBlock",
    "TextChunk",
    "ThinkingBlock",
    "ThinkingChunk",
    "ToolResultBlock",
    "ToolResultContent",
    "ToolResultMessage",
    "ToolUseBlock",
    "ToolUseChunk",
    "Usage",
    "UserMessage",
    "text_of",
]

# Token counts travel as Avro ``long`` (signed 64-bit); a sum past this bound is
# an overflow, reported as UsageOverflowError rather than wrapped or clamped.
MAX_TOKEN_COUNT = 2**63 - 1


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --------------------------------------------------------------------------
# Blocks
# --------------------------------------------------------------------------


class TextBlock(_Value):
    """Plain text."""

    type: Literal["text"] = "text"
    text: str


class RefusalBlock(_Value):
    """A model refusal; distinct from text so it never collapses into it."""

    type: Literal["refusal"] = "refusal"
    text: str


class ImageBlock(_Value):
    """An image, given either by URL or by inline bytes (exactly one)."""

    # JSON carries ``data`` as base64 (as the Go contract does): raw image
    # bytes are not UTF-8, so the default bytes-as-text mode cannot dump them.
    model_config = ConfigDict(
        frozen=True, extra="forbid", ser_json_bytes="base64", val_json_bytes="base64"
    )

    type: Literal["image"] = "image"
    media_type: str
    url: str | None = None
    data: bytes | None = None

    @model_validator(mode="after")
    def _exactly_one_source(self) -> ImageBlock:
        if (self.url is None) == (self.data is None):
            raise ValueError("image needs exactly one of url or data")
        return self


class ThinkingBlock(_Value):
    """Model reasoning, with the provider's signature or opaque state.

    A thinking block is *sealed* (safe to replay to the provider) when it has a
    signature with a format label, or provider state.
    """

    type: Literal["thinking"] = "thinking"
    thinking: str = ""
    signature: str = ""
    signature_format: str = ""
    provider_state: str = ""
    provider_state_format: str = ""

    def is_sealed(self) -> bool:
        """Whether the provider can verify this block when it is replayed."""
        return bool((self.signature and self.signature_format) or self.provider_state)


class ToolUseBlock(_Value):
    """A tool call requested by the model; ``input`` is raw JSON text."""

    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: str = "{}"
    provider_state: str = ""
    provider_state_format: str = ""


ToolResultContent = Annotated[TextBlock | ImageBlock, Field(discriminator="type")]


class ToolResultBlock(_Value):
    """A tool's result as a block (nested content is text or images)."""

    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: tuple[ToolResultContent, ...] = ()
    is_error: bool = False


Block = Annotated[
    TextBlock
    | RefusalBlock
    | ImageBlock
    | ThinkingBlock
    | ToolUseBlock
    | ToolResultBlock,
    Field(discriminator="type"),
]

# --------------------------------------------------------------------------
# Streamed chunks (what a model client yields; folded into one AIMessage)
# --------------------------------------------------------------------------


class TextChunk(_Value):
    """A text delta; consecutive deltas concatenate."""

    type: Literal["text"] = "text"
    text: str


class RefusalChunk(_Value):
    """A refusal delta; consecutive deltas concatenate."""

    type: Literal["refusal"] = "refusal"
    text: str


class ThinkingChunk(_Value):
    """A reasoning delta for the thinking block at ``index``."""

    type: Literal["thinking"] = "thinking"
    index: int = Field(default=0, ge=0)
    thinking: str = ""
    signature: str = ""
    signature_format: str = ""
    provider_state: str = ""
    provider_state_format: str = ""


class ToolUseChunk(_Value):
    """A tool-call delta for the call at ``index``.

    The first chunk of a call carries ``id`` and ``name``; later ones append
    to ``input_json``.
    """

    type: Literal["tool_use"] = "tool_use"
    index: int = Field(default=0, ge=0)
    id: str = ""
    name: str = ""
    input_json: str = ""


class ImageChunk(_Value):
    """A complete image produced by the model."""

    # Same JSON form of ``data`` as ImageBlock (base64).
    model_config = ConfigDict(
        frozen=True, extra="forbid", ser_json_bytes="base64", val_json_bytes="base64"
    )

    type: Literal["image"] = "image"
    index: int = Field(default=0, ge=0)
    media_type: str
    url: str | None = None
    data: bytes | None = None


Chunk = Annotated[
    TextChunk | RefusalChunk | ThinkingChunk | ToolUseChunk | ImageChunk,
    Field(discriminator="type"),
]

# --------------------------------------------------------------------------
# Usage
# --------------------------------------------------------------------------

_Count = Annotated[int, Field(ge=0, le=MAX_TOKEN_COUNT)]


class Usage(_Value):
    """Token usage of one model response (or a sum of them).

    ``input_tokens`` excludes cache reads and cache writes (those are
    ``cache_read_tokens`` and ``cache_creation_tokens``), as Anthropic reports
    it; OpenAI-style ``prompt_tokens`` are split accordingly by the client.
    ``reasoning_tokens`` is a subset of ``output_tokens``; a disagreement is
    carried verbatim and never rejected (providers report it inconsistently).
    """

    input_tokens: _Count = 0
    output_tokens: _Count = 0
    cache_read_tokens: _Count = 0
    cache_creation_tokens: _Count = 0
    reasoning_tokens: _Count = 0

    def add(self, other: Usage) -> Usage:
        """Return the field-wise sum.

        Raises:
            UsageOverflowError: a field would exceed :data:`MAX_TOKEN_COUNT`.
        """
        sums: dict[str, int] = {}
        for name in Usage.model_fields:
            left, right = getattr(self, name), getattr(other, name)
            if left + right > MAX_TOKEN_COUNT:
                raise UsageOverflowError(field=name, left=left, right=right)
            sums[name] = left + right
        return Usage(**sums)

    def context_tokens(self) -> int:
        """Input plus cache-read plus cache-creation tokens."""
        return self.input_tokens + self.cache_read_tokens + self.cache_creation_tokens

    def total_tokens(self) -> int:
        """Context tokens plus output tokens."""
        return self.context_tokens() + self.output_tokens

    def reasoning_within_output(self) -> bool:
        """Whether the reasoning count is consistent with the output count."""
        return self.reasoning_tokens <= self.output_tokens


# --------------------------------------------------------------------------
# Messages
# --------------------------------------------------------------------------

Role = Literal["user", "assistant", "tool"]


class UserMessage(_Value):
    """A user's input; a turn starts with exactly one."""

    role: Literal["user"] = "user"
    blocks: tuple[Block, ...] = ()


class AIMessage(_Value):
    """One model response: exactly one per step."""

    role: Literal["assistant"] = "assistant"
    blocks: tuple[Block, ...] = ()
    usage: Usage | None = None

    def tool_uses(self) -> tuple[ToolUseBlock, ...]:
        """The tool calls this response asks for, in order."""
        return tuple(b for b in self.blocks if isinstance(b, ToolUseBlock))


class ToolResultMessage(_Value):
    """The result of one tool call, paired with its ``tool_use_id``."""

    role: Literal["tool"] = "tool"
    tool_use_id: str
    is_error: bool = False
    blocks: tuple[Block, ...] = ()


Conversation = Annotated[
    UserMessage | AIMessage | ToolResultMessage, Field(discriminator="role")
]
Message = UserMessage | AIMessage | ToolResultMessage


def text_of(blocks: tuple[Block, ...] | tuple[ToolResultContent, ...]) -> str:
    """Concatenate the text of ``blocks``; other blocks render as a marker."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, TextBlock | RefusalBlock):
            parts.append(block.text)
        elif isinstance(block, ToolResultBlock):
            parts.append(text_of(block.content))
        else:
            parts.append(f"[unsupported {block.type}]")
    return "".join(parts)
