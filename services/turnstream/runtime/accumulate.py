"""Folding a step's streamed chunks into one AIMessage.

Owns :class:`ChunkAccumulator` (chunks in, one message out), the emptiness
rule (:func:`is_empty_response`, contract §4.4 step 5), the safe prefix of a
truncated step and its two notices (contract §4.5), and :class:`ToolCall`
(what the batch runs, with the *raw* input the model sent). Pure: imports only
value types.

Materialisation order: thinking blocks (by index), text, refusal, images (by
index), tool calls (by index). Stored copies drop empty text and empty
thinking, and rewrite tool input that is not a JSON object text to ``{}``,
while execution sees the raw input.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from turnstream.content import (
    AIMessage,
    Block,
    ImageBlock,
    ImageChunk,
    RefusalBlock,
    RefusalChunk,
    TextBlock,
    TextChunk,
    ThinkingBlock,
    ThinkingChunk,
    ToolUseBlock,
    ToolUseChunk,
    Usage,
)

__all__ = [
    "INTERRUPTED_NOTICE",
    "TRUNCATED_NOTICE",
    "ChunkAccumulator",
    "StreamChunk",
    "ToolCall",
    "is_empty_response",
]

TRUNCATED_NOTICE = (
    "[truncated: the stream failed before this reply completed; "
    "the content above may be incomplete]"
)
"""Appended to the safe prefix of a step whose stream failed."""

INTERRUPTED_NOTICE = (
    "[interrupted: this reply was stopped before it completed; "
    "the content above is what had arrived]"
)
"""Appended to the safe prefix of a step whose turn was interrupted."""

StreamChunk = TextChunk | RefusalChunk | ThinkingChunk | ToolUseChunk | ImageChunk


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call of a step, as the model asked for it."""

    tool_use_id: str
    name: str
    input_json: str


@dataclass(slots=True)
class _Thinking:
    thinking: str = ""
    signature: str = ""
    signature_format: str = ""
    provider_state: str = ""
    provider_state_format: str = ""

    def block(self) -> ThinkingBlock:
        return ThinkingBlock(
            thinking=self.thinking,
            signature=self.signature,
            signature_format=self.signature_format,
            provider_state=self.provider_state,
            provider_state_format=self.provider_state_format,
        )


@dataclass(slots=True)
class _ToolUse:
    id: str = ""
    name: str = ""
    input_json: str = ""


def _stored_input(raw: str) -> str:
    """The input kept in history: the raw text if it is a JSON object, else ``{}``."""
    if not raw.strip():
        return "{}"
    try:
        value = json.loads(raw)
    except ValueError:
        return "{}"
    return raw if isinstance(value, dict) else "{}"


@dataclass(slots=True)
class ChunkAccumulator:
    """Folds chunks by kind and index; text and refusal deltas concatenate."""

    _text: list[str] = field(default_factory=list)
    _refusal: list[str] | None = None
    _thinking: dict[int, _Thinking] = field(default_factory=dict)
    _tools: dict[int, _ToolUse] = field(default_factory=dict)
    _images: dict[int, ImageChunk] = field(default_factory=dict)
    _chunks: int = 0

    @property
    def chunk_count(self) -> int:
        """How many chunks were folded."""
        return self._chunks

    def add(self, chunk: StreamChunk) -> None:
        """Fold one chunk."""
        self._chunks += 1
        match chunk:
            case TextChunk():
                self._text.append(chunk.text)
            case RefusalChunk():
                if self._refusal is None:
                    self._refusal = []
                self._refusal.append(chunk.text)
            case ThinkingChunk():
                slot = self._thinking.setdefault(chunk.index, _Thinking())
                slot.thinking += chunk.thinking
                slot.signature += chunk.signature
                slot.provider_state += chunk.provider_state
                slot.signature_format = chunk.signature_format or slot.signature_format
                slot.provider_state_format = (
                    chunk.provider_state_format or slot.provider_state_format
                )
            case ToolUseChunk():
                call = self._tools.setdefault(chunk.index, _ToolUse())
                call.id = chunk.id or call.id
                call.name = chunk.name or call.name
                call.input_json += chunk.input_json
            case ImageChunk():
                self._images[chunk.index] = chunk

    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The calls asked for, in index order, with their raw input."""
        return tuple(
            ToolCall(tool_use_id=t.id, name=t.name, input_json=t.input_json or "{}")
            for _, t in sorted(self._tools.items())
        )

    def _thinking_blocks(self, *, sealed_only: bool) -> list[Block]:
        blocks: list[Block] = []
        for _, slot in sorted(self._thinking.items()):
            block = slot.block()
            if sealed_only and not block.is_sealed():
                continue
            if block.thinking or block.is_sealed() or block.provider_state:
                blocks.append(block)
        return blocks

    def _text_and_refusal(self) -> list[Block]:
        blocks: list[Block] = []
        text = "".join(self._text)
        if text:
            blocks.append(TextBlock(text=text))
        if self._refusal is not None:
            blocks.append(RefusalBlock(text="".join(self._refusal)))
        return blocks

    def message(self, usage: Usage | None) -> AIMessage:
        """The step's AIMessage as stored in history."""
        blocks = self._thinking_blocks(sealed_only=False) + self._text_and_refusal()
        for _, image in sorted(self._images.items()):
            blocks.append(
                ImageBlock(media_type=image.media_type, url=image.url, data=image.data)
            )
        for _, call in sorted(self._tools.items()):
            blocks.append(
                ToolUseBlock(
                    id=call.id, name=call.name, input=_stored_input(call.input_json)
                )
            )
        return AIMessage(blocks=tuple(blocks), usage=usage)

    def safe_prefix(self, notice: str) -> AIMessage | None:
        """The replayable part of an unfinished step plus ``notice``, or ``None``.

        Keeps non-empty text, refusals and *sealed* thinking; drops tool calls,
        unsealed thinking and images (contract §4.5).
        """
        blocks = self._thinking_blocks(sealed_only=True) + self._text_and_refusal()
        if not blocks:
            return None
        blocks.append(TextBlock(text=notice))
        return AIMessage(blocks=tuple(blocks))


def is_empty_response(message: AIMessage) -> bool:
    """True when a response has nothing usable (contract §4.4 step 5).

    Usable: non-empty text, reasoning with text or provider state, any refusal
    (even empty), an image, or a tool call.
    """
    for block in message.blocks:
        match block:
            case TextBlock():
                if block.text:
                    return False
            case ThinkingBlock():
                if block.thinking or block.provider_state:
                    return False
            case _:
                return False
    return True
