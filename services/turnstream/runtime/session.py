"""The Session API: the client's view of a set of loops (contract §3.1).

Owns the :class:`Session` protocol -- what every session offers: the embedded
:class:`~turnstream.runtime.local_session.LocalSession` and the Kafka client --
plus :data:`Content` (what a submit accepts, and :func:`as_message`) and
:class:`LoopSetup` (what a restored loop runs with).

Commands are fire-and-forget: :meth:`Session.submit` returns the command id
once the command is handed to the loop, and the outcome arrives as an event
whose ``reply_to()`` is that id. Loop creation is not part of the protocol: it
belongs to whoever composes loops (a Kafka client cannot ship tool objects).
There are no session-level activity events; ``LoopIdle`` is the quiescence
signal. Imports runtime modules and value types; never an adapter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from turnstream.content import Block, TextBlock, UserMessage
from turnstream.events import Agency
from turnstream.ids import CommandId, GateId, LoopId, SessionId, TurnId
from turnstream.runtime.config import LoopConfig
from turnstream.runtime.hooks import HookRunner
from turnstream.runtime.model_client import ModelClient
from turnstream.runtime.ports import AccessPolicy
from turnstream.runtime.subscription import EventFilter, Subscription

__all__ = ["Content", "LoopSetup", "Session", "as_message"]

Content = str | Sequence[Block] | UserMessage
"""What a submit accepts: text, blocks, or a ready user message."""


class Session(Protocol):
    """The data plane every session offers."""

    @property
    def session_id(self) -> SessionId:
        """Stable across restore."""
        ...

    @property
    def active_loop(self) -> LoopId | None:
        """The loop :meth:`submit` targets."""
        ...

    async def submit(
        self, content: Content, *, no_fold: bool = False, agency: Agency = Agency.USER
    ) -> CommandId:
        """Send input to the active loop; return its command id at once."""
        ...

    async def submit_to_loop(
        self,
        loop_id: LoopId,
        content: Content,
        *,
        no_fold: bool = False,
        agency: Agency = Agency.USER,
    ) -> CommandId:
        """Send input to ``loop_id``; return its command id at once."""
        ...

    def subscribe_events(
        self, event_filter: EventFilter, *, capacity: int | None = None
    ) -> Subscription:
        """Watch later events (no replay); subscribe before submitting."""
        ...

    async def interrupt(
        self, loop_id: LoopId | None = None, *, turn_id: TurnId | None = None
    ) -> bool:
        """Cancel the running turn of one loop (or all); true iff one was.

        With ``turn_id``, only that turn: if it no longer runs, nothing is
        cancelled and the loop answers ``TurnRejected{turn_ended}``.
        """
        ...

    async def respond_gate(self, gate_id: GateId, action: str) -> None:
        """Answer an open gate (``"approve"`` or ``"deny"``)."""
        ...

    async def retract(self, command_id: CommandId) -> None:
        """Withdraw a queued input (a no-op if it already started or folded)."""
        ...

    async def wait_idle(self, loop_id: LoopId | None = None) -> None:
        """Return once the loop (or every loop) is parked."""
        ...

    async def shutdown(self) -> None:
        """Stop every loop, in order; idempotent."""
        ...


@dataclass(frozen=True, slots=True)
class LoopSetup:
    """What a loop runs with (tools and clients are code, not data).

    Attributes:
        config: the loop configuration.
        model: the model client.
        hooks: the compiled hooks (``None``: none).
        access_policy: decides each tool call (``None``: every call is
            denied, ``PermissionDecided{deny, access_gate_missing}``).
    """

    config: LoopConfig
    model: ModelClient
    hooks: HookRunner | None = None
    access_policy: AccessPolicy | None = None


def as_message(content: Content) -> UserMessage:
    """The user message a submit of ``content`` carries."""
    if isinstance(content, UserMessage):
        return content
    if isinstance(content, str):
        return UserMessage(blocks=(TextBlock(text=content),))
    return UserMessage(blocks=tuple(content))
