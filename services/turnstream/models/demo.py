"""A deterministic, offline model for the CLI demo that uses tools.

Owns :class:`DemoModel`. It reads the last user message and the tools on
offer, and answers the way a tool-using model would: a short preamble and a
tool call per step, then a final answer quoting the tool results. With
``add`` offered, a question holding numbers is summed one ``add`` call per
step (three numbers: two steps); otherwise ``word_count`` counts the
question's words. Every reply is a pure function of the request, so a replay
streams the same chunks.

Imports value types, the model port and :mod:`turnstream.models.demo_tools`;
must not import httpx, aiokafka, fastavro or faust.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import assert_never

from turnstream.content import (
    AIMessage,
    Block,
    ImageBlock,
    Message,
    RefusalBlock,
    TextBlock,
    TextChunk,
    ThinkingBlock,
    ToolResultBlock,
    ToolResultMessage,
    ToolUseBlock,
    ToolUseChunk,
    Usage,
    UserMessage,
    text_of,
)
from turnstream.errors import ConfigError
from turnstream.models.demo_tools import ADD_TOOL, WORD_COUNT_TOOL, format_number
from turnstream.runtime.model_client import (
    ModelEvent,
    ModelRequest,
    StopReason,
    StreamEnd,
)

__all__ = ["DEMO_PREAMBLE", "DemoModel"]

DEMO_PREAMBLE = "Let me work that out."
"""The text streamed before the first tool call of a turn."""

_HELP = (
    "I am the turnstream demo model. Offer me the add and word_count tools, "
    "then ask me to add some numbers or to count the words of a sentence."
)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_WORD = re.compile(r"\S+\s*")
# Tool arguments stream in pieces this long, as a real model's JSON deltas do.
_ARGUMENT_PIECE = 8


class DemoModel:
    """A :class:`~turnstream.runtime.model_client.ModelClient` that needs no network.

    Args:
        chunk_delay: seconds to wait before each chunk (0: no waiting), so an
            interrupt can land mid-stream in a demo.
        sleep: how to wait; :func:`asyncio.sleep` (cancellable) unless a test
            injects a clock.

    Raises:
        ConfigError: a negative or non-finite ``chunk_delay``.
    """

    def __init__(
        self,
        *,
        chunk_delay: float = 0.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if not math.isfinite(chunk_delay) or chunk_delay < 0:
            raise ConfigError("chunk_delay", "must be a finite number >= 0")
        self._chunk_delay = chunk_delay
        self._sleep = sleep

    @property
    def name(self) -> str:
        """The provider label."""
        return "demo"

    def __repr__(self) -> str:
        return f"DemoModel(chunk_delay={self._chunk_delay!r})"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream the deterministic reply to ``request``, then a StreamEnd."""
        reply = _plan(request)
        for chunk in reply.chunks():
            if self._chunk_delay:
                await self._sleep(self._chunk_delay)
            yield chunk
        yield StreamEnd(
            usage=Usage(
                input_tokens=_request_tokens(request),
                output_tokens=reply.output_tokens(),
            ),
            stop_reason=reply.stop_reason,
        )


# --------------------------------------------------------------------------
# Planning: a pure function of the request
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Call:
    id: str
    name: str
    input_json: str


@dataclass(frozen=True, slots=True)
class _Reply:
    text: str
    calls: tuple[_Call, ...] = ()

    @property
    def stop_reason(self) -> StopReason:
        return "tool_use" if self.calls else "end_turn"

    def chunks(self) -> list[TextChunk | ToolUseChunk]:
        out: list[TextChunk | ToolUseChunk] = [
            TextChunk(text=word) for word in _WORD.findall(self.text)
        ]
        for index, call in enumerate(self.calls):
            out.append(ToolUseChunk(index=index, id=call.id, name=call.name))
            arguments = call.input_json
            out.extend(
                ToolUseChunk(index=index, input_json=arguments[i : i + _ARGUMENT_PIECE])
                for i in range(0, len(arguments), _ARGUMENT_PIECE)
            )
        return out

    def output_tokens(self) -> int:
        return _words(self.text) + sum(_words(call.input_json) for call in self.calls)


@dataclass(frozen=True, slots=True)
class _Result:
    name: str
    text: str
    is_error: bool


def _plan(request: ModelRequest) -> _Reply:
    messages = request.messages
    asked = [(i, m) for i, m in enumerate(messages) if isinstance(m, UserMessage)]
    if not asked:
        return _Reply(_HELP)
    question_at, question = asked[-1]
    text = " ".join(b.text for b in question.blocks if isinstance(b, TextBlock))
    # Call ids only need to be unique within the conversation: number them by
    # question and step.
    call_prefix = f"demo-{len(asked)}"
    results = _results(messages[question_at + 1 :])
    offered = {tool.name for tool in request.tools}
    numbers = [_number(token) for token in _NUMBER.findall(text)]
    if ADD_TOOL.name in offered and len(numbers) >= 2:
        adds = [r for r in results if r.name == ADD_TOOL.name]
        return _add_step(numbers, adds, call_prefix)
    if WORD_COUNT_TOOL.name in offered and text.strip():
        counts = [r for r in results if r.name == WORD_COUNT_TOOL.name]
        return _word_count_step(text, counts, call_prefix)
    return _Reply(_HELP)


def _results(after_question: Sequence[Message]) -> list[_Result]:
    """The results the turn has so far, in order, named by their tool."""
    names: dict[str, str] = {}
    results: list[_Result] = []
    for message in after_question:
        if isinstance(message, AIMessage):
            names.update((use.id, use.name) for use in message.tool_uses())
        elif isinstance(message, ToolResultMessage) and message.tool_use_id in names:
            results.append(
                _Result(
                    name=names[message.tool_use_id],
                    text=text_of(message.blocks).strip(),
                    is_error=message.is_error,
                )
            )
    return results


def _add_step(
    numbers: list[int | float], results: list[_Result], call_prefix: str
) -> _Reply:
    quotes: list[str] = []
    total = numbers[0]
    for step, result in enumerate(results[: len(numbers) - 1]):
        addend = numbers[step + 1]
        parsed = None if result.is_error else _parse_result(result.text)
        if parsed is None:
            return _Reply(f"The add tool failed ({result.text or 'no output'}).")
        quotes.append(
            f"add({format_number(total)}, {format_number(addend)}) "
            f"returned {result.text}."
        )
        total = parsed
    step = len(quotes)
    if step < len(numbers) - 1:
        addend = numbers[step + 1]
        preamble = (
            DEMO_PREAMBLE
            if step == 0
            else f"Now I'll add {format_number(addend)} to the running total."
        )
        arguments = json.dumps({"a": total, "b": addend})
        call = _Call(f"{call_prefix}-{step + 1}", ADD_TOOL.name, arguments)
        return _Reply(preamble, (call,))
    return _Reply(" ".join([*quotes, f"The total is {format_number(total)}."]))


def _word_count_step(text: str, results: list[_Result], call_prefix: str) -> _Reply:
    if not results:
        call = _Call(
            f"{call_prefix}-1", WORD_COUNT_TOOL.name, json.dumps({"text": text})
        )
        return _Reply(DEMO_PREAMBLE, (call,))
    result = results[0]
    if result.is_error:
        return _Reply(f"The word_count tool failed ({result.text or 'no output'}).")
    noun = "word" if result.text.strip() == "1" else "words"
    return _Reply(
        f"word_count returned {result.text}, so your message has {result.text} {noun}."
    )


def _number(token: str) -> int | float:
    return float(token) if "." in token else int(token)


def _parse_result(text: str) -> int | float | None:
    if _NUMBER.fullmatch(text) is None:
        return None
    return _number(text)


# --------------------------------------------------------------------------
# Usage: deterministic counts, one token per whitespace-separated word
# --------------------------------------------------------------------------


def _words(text: str) -> int:
    return len(text.split())


def _request_tokens(request: ModelRequest) -> int:
    return _words(request.system) + sum(
        _block_tokens(block) for message in request.messages for block in message.blocks
    )


def _block_tokens(block: Block) -> int:
    match block:
        case TextBlock() | RefusalBlock():
            return _words(block.text)
        case ThinkingBlock():
            return _words(block.thinking)
        case ToolUseBlock():
            return _words(block.input)
        case ToolResultBlock():
            return _words(text_of(block.content))
        case ImageBlock():
            return 0
        case _:
            assert_never(block)
