"""A scripted model: the Python ``fakeLLM``.

Owns :class:`ScriptedModel` and its script items: model events (chunks and
:class:`~turnstream.runtime.model_client.StreamEnd`) plus control items --
:class:`Pause` (stop until the test releases), :class:`Fail` (raise),
:class:`Hang` (wait forever, cancellable), :class:`Stubborn` (ignore
cancellation until released: a misbehaving client) and :class:`Yield` (give
the event loop a few turns). Builders make common steps. The model records
every request it was asked to stream. Imports value types and the model port.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field

from turnstream.content import TextChunk, ToolUseChunk, Usage
from turnstream.errors import ProviderError
from turnstream.runtime.model_client import ModelEvent, ModelRequest, StreamEnd

__all__ = [
    "Fail",
    "Hang",
    "Pause",
    "Script",
    "ScriptItem",
    "ScriptedModel",
    "Stubborn",
    "ToolCallScript",
    "Yield",
    "call",
    "empty_step",
    "failing_step",
    "text_step",
    "tool_step",
]


@dataclass(eq=False)
class Pause:
    """Stop the stream here until :meth:`release` (``reached`` is set on arrival)."""

    reached: asyncio.Event = field(default_factory=asyncio.Event)
    released: asyncio.Event = field(default_factory=asyncio.Event)

    async def hit(self) -> None:
        """Called by the model when the script gets here."""
        self.reached.set()
        await self.released.wait()

    def release(self) -> None:
        """Let the stream go on."""
        self.released.set()

    async def wait_reached(self, within: float = 5.0) -> None:
        """Wait until the stream has arrived here."""
        async with asyncio.timeout(within):
            await self.reached.wait()


@dataclass(frozen=True)
class Fail:
    """Raise ``error`` here (a mid-stream failure if chunks came before)."""

    error: BaseException


@dataclass(frozen=True)
class Hang:
    """Wait here forever (until cancelled)."""


@dataclass(eq=False)
class Stubborn:
    """Ignore cancellation here until :meth:`release` (a misbehaving client)."""

    release_event: asyncio.Event = field(default_factory=asyncio.Event)
    reached: asyncio.Event = field(default_factory=asyncio.Event)
    resisted: int = 0

    async def resist(self) -> None:
        """Called by the model: swallow cancellations until released."""
        self.reached.set()
        while not self.release_event.is_set():
            try:
                await self.release_event.wait()
            except asyncio.CancelledError:
                self.resisted += 1  # deliberately ignored: that is the point
        if self.resisted:
            raise asyncio.CancelledError

    def release(self) -> None:
        """Stop resisting (a pending cancellation is then honoured)."""
        self.release_event.set()


@dataclass(frozen=True)
class Yield:
    """Give the event loop ``times`` turns before going on."""

    times: int = 1


ScriptItem = ModelEvent | Pause | Fail | Hang | Stubborn | Yield
Script = Sequence[ScriptItem]


class ScriptedModel:
    """Plays one script per request, in order.

    Args:
        steps: one script per model call.
        fail_with: after the scripts run out, every call raises this.
        hang: after the scripts run out, every call hangs (cancellable).
        then: after the scripts run out, every call plays this script.
        name: the provider label.

    With none of the three, a call past the scripts fails with a
    :class:`~turnstream.errors.ProviderError` ("script exhausted").
    """

    def __init__(
        self,
        steps: Iterable[Script] = (),
        *,
        fail_with: BaseException | None = None,
        hang: bool = False,
        then: Script | None = None,
        name: str = "scripted",
    ) -> None:
        self._steps: deque[list[ScriptItem]] = deque(list(s) for s in steps)
        self._fail_with = fail_with
        self._hang = hang
        self._then = list(then) if then is not None else None
        self._name = name
        self.requests: list[ModelRequest] = []

    @property
    def name(self) -> str:
        """The provider label."""
        return self._name

    def push(self, *steps: Script) -> None:
        """Append more scripts."""
        self._steps.extend(list(s) for s in steps)

    @property
    def remaining(self) -> int:
        """Scripts not played yet."""
        return len(self._steps)

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Record ``request`` and play the next script."""
        self.requests.append(request)
        return self._play(self._next_script())

    def _next_script(self) -> list[ScriptItem]:
        if self._steps:
            return self._steps.popleft()
        if self._fail_with is not None:
            return [Fail(self._fail_with)]
        if self._hang:
            return [Hang()]
        if self._then is not None:
            return list(self._then)
        return [Fail(ProviderError(self._name, "script exhausted"))]

    async def _play(self, script: list[ScriptItem]) -> AsyncIterator[ModelEvent]:
        for item in script:
            match item:
                case Pause():
                    await item.hit()
                case Fail():
                    raise item.error
                case Hang():
                    await asyncio.Event().wait()
                case Stubborn():
                    await item.resist()
                case Yield():
                    for _ in range(item.times):
                        await asyncio.sleep(0)
                case _:
                    yield item


@dataclass(frozen=True)
class ToolCallScript:
    """One tool call a scripted step asks for."""

    name: str
    input_json: str = "{}"
    id: str = ""


def call(name: str, input_json: str = "{}", *, id: str = "") -> ToolCallScript:
    """A tool call for :func:`tool_step`."""
    return ToolCallScript(name=name, input_json=input_json, id=id)


def text_step(*parts: str, usage: Usage | None = None) -> list[ScriptItem]:
    """A text answer streamed in ``parts``."""
    items: list[ScriptItem] = [TextChunk(text=p) for p in parts]
    items.append(StreamEnd(usage=usage, stop_reason="end_turn"))
    return items


def tool_step(
    *calls: ToolCallScript, usage: Usage | None = None, text: str = ""
) -> list[ScriptItem]:
    """A step asking for ``calls`` (each streamed as id/name, then its input)."""
    items: list[ScriptItem] = [TextChunk(text=text)] if text else []
    for index, tool_call in enumerate(calls):
        tool_id = tool_call.id or f"toolu_{index}_{tool_call.name}"
        items.append(ToolUseChunk(index=index, id=tool_id, name=tool_call.name))
        items.append(ToolUseChunk(index=index, input_json=tool_call.input_json))
    items.append(StreamEnd(usage=usage, stop_reason="tool_use"))
    return items


def empty_step() -> list[ScriptItem]:
    """A response with no content at all."""
    return [StreamEnd()]


def failing_step(error: BaseException | None = None, *before: str) -> list[ScriptItem]:
    """Stream ``before`` as text, then fail (a provider error by default)."""
    items: list[ScriptItem] = [TextChunk(text=p) for p in before]
    items.append(Fail(error or ProviderError("scripted", "boom")))
    return items
