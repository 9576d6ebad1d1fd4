"""Recording what a subscription sees, and describing events compactly.

Owns :class:`EventRecorder` (collects a subscription's events; waits for one
without sleeping) and :func:`describe` (an event as ``(type, key fields…)``,
the currency of sequence assertions). Imports runtime and value types.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TypeVar, assert_never

from turnstream import events as ev
from turnstream.content import (
    AIMessage,
    Conversation,
    RefusalBlock,
    TextBlock,
    ToolUseBlock,
)
from turnstream.runtime.subscription import Subscription

__all__ = ["Described", "EventRecorder", "describe", "describe_message"]

E = TypeVar("E")

Described = tuple[object, ...]


def describe_message(message: Conversation) -> str:
    """``AI:<text>|tool_use:<id>``, ``Tool:<id>:<text>`` or ``User:<text>``."""
    parts: list[str] = []
    for block in message.blocks:
        if isinstance(block, TextBlock | RefusalBlock):
            parts.append(block.text)
        elif isinstance(block, ToolUseBlock):
            parts.append(f"tool_use:{block.id}")
        else:
            parts.append(block.type)
    body = "|".join(parts)
    if isinstance(message, AIMessage):
        return f"AI:{body}"
    if message.role == "tool":
        return f"Tool:{message.tool_use_id}:{body}"
    return f"User:{body}"


def describe(event: ev.AnyEvent) -> Described:  # noqa: PLR0911, PLR0912 - one case per type
    """The event's type name and its key fields."""
    name = event.type_name
    match event:
        case ev.LoopStarted():
            return (name, event.model)
        case ev.LoopIdle() | ev.LoopStopped():
            return (name,)
        case ev.LoopDeleted():
            return (name, event.reply_to())
        case ev.InputQueued():
            return (name, event.reply_to())
        case ev.TurnRejected():
            return (name, event.reply_to(), event.reason)
        case ev.TurnStarted() | ev.TurnFoldedInto():
            return (
                name,
                event.turn_index,
                event.reply_to(),
                describe_message(event.message),
            )
        case ev.InputCancelled():
            return (name, event.reply_to(), event.reason)
        case ev.TokenDelta():
            chunk = event.chunk
            text = getattr(chunk, "text", None)
            return (name, text if text is not None else chunk.type)
        case ev.StepDone():
            return (name, tuple(describe_message(m) for m in event.messages))
        case ev.TurnDone():
            return (name, event.turn_index, describe_message(event.message))
        case ev.TurnFailed():
            return (name, event.turn_index, event.error.kind)
        case ev.TurnInterrupted():
            return (name, event.turn_index)
        case ev.TurnResumed():
            return (name, event.turn_index, event.steps, event.resumes)
        case ev.ToolCallStarted():
            return (name, event.tool_use_id)
        case ev.ToolCallCompleted():
            return (name, event.tool_use_id, event.is_error)
        case ev.PermissionDecided():
            return (name, event.subject, event.effect, event.reason)
        case ev.PermissionRequested():
            return (name, event.tool_name)
        case ev.GateOpened():
            return (name, event.kind)
        case ev.GateResolved():
            return (name, event.reason, event.action)
        case _:
            assert_never(event)


class EventRecorder:
    """Collects everything a subscription delivers."""

    def __init__(self, subscription: Subscription) -> None:
        self.subscription = subscription
        self._events: list[ev.AnyEvent] = []

    def _pull(self) -> None:
        self._events.extend(self.subscription.poll())

    @property
    def events(self) -> list[ev.AnyEvent]:
        """Every event delivered so far, in delivery order."""
        self._pull()
        return list(self._events)

    def described(self, *, skip: Sequence[type] = (ev.TokenDelta,)) -> list[Described]:
        """Every event so far as :func:`describe` tuples, minus ``skip`` types."""
        return [describe(e) for e in self.events if not isinstance(e, tuple(skip))]

    def of_type(self, kind: type[E]) -> list[E]:
        """The events of one type, in order."""
        return [e for e in self.events if isinstance(e, kind)]

    async def wait_for(
        self,
        predicate: Callable[[ev.AnyEvent], bool],
        *,
        within: float = 5.0,
    ) -> ev.AnyEvent:
        """Return the first event (so far or later) that satisfies ``predicate``."""
        async with asyncio.timeout(within):
            while True:
                for event in self.events:
                    if predicate(event):
                        return event
                self._events.append(await self.subscription.__anext__())

    async def wait_for_type(
        self, kind: type[E], *, count: int = 1, within: float = 5.0
    ) -> E:
        """Return the ``count``-th event of type ``kind``."""
        async with asyncio.timeout(within):
            while True:
                found = self.of_type(kind)
                if len(found) >= count:
                    return found[count - 1]
                self._events.append(await self.subscription.__anext__())
