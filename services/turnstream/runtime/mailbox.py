"""The actor's mailbox: three lanes and the messages that travel on them.

Owns :class:`Mailbox`, :class:`Posted` (a client command with its place in the
loop's command log) and the actor's private request messages. Lanes, served in
this order on every receive:

1. *priority*: stops the host itself asks for (a partition handover, the
   session closing, a drain's suspension of a continuing turn), which are no
   command of the loop's log;
2. *internal*: hand-offs from the running turn task (commits, drains, gate
   openings, the turn's end) and timer expiries, so a turn is never starved by
   a burst of submits;
3. *ordinary*: every client command -- ``SubmitInput``, ``Retract``,
   ``RespondGate``, ``Interrupt``, ``Shutdown`` and their acked forms -- and
   queries, FIFO, so commands take effect in their log order. An ``Interrupt``
   behind a ``SubmitInput`` cancels the turn that submit started; it still cuts
   into a running stream or tool call at once, because the actor is idle on its
   mailbox while a turn runs. (The contract's Go loop serves interrupts on a
   priority lane; on a log, taking effect in log order is the promise.)

Putting never blocks: admission limits are the actor's decision (a full inbox
answers ``TurnRejected{queue_full}``), not the mailbox's. After
:meth:`Mailbox.close` puts are refused (they return ``False``). Imports only
value types and handshake types.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from turnstream.commands import AnyCommand, Interrupt, RespondGate, Shutdown
from turnstream.content import Conversation
from turnstream.events import EnduringEvent
from turnstream.ids import CommandId
from turnstream.runtime.effects import StagedRecord
from turnstream.runtime.gates import GateAnswer
from turnstream.runtime.handshake import ApprovalRequest, TurnOutcome
from turnstream.runtime.input_queue import QueuedInput
from turnstream.state import LoopState

__all__ = [
    "ActorMessage",
    "CommitRequest",
    "DrainExpired",
    "DrainRequest",
    "GateRequest",
    "IdleWaiter",
    "InterruptRequest",
    "Mailbox",
    "OpenGateRequest",
    "Posted",
    "ShutdownRequest",
    "StateQuery",
    "SuspendRequest",
    "TurnEnded",
    "settle",
]

M = TypeVar("M")
T = TypeVar("T")


class Mailbox(Generic[M]):
    """Three FIFO lanes with one waiting receiver (the actor)."""

    def __init__(self) -> None:
        self._priority: deque[M] = deque()
        self._internal: deque[M] = deque()
        self._ordinary: deque[M] = deque()
        self._ready = asyncio.Event()
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether puts are refused."""
        return self._closed

    def __len__(self) -> int:
        """Messages queued, on every lane."""
        return len(self._priority) + len(self._internal) + len(self._ordinary)

    def _put(self, lane: deque[M], message: M) -> bool:
        if self._closed:
            return False
        lane.append(message)
        self._ready.set()
        return True

    def put_priority(self, message: M) -> bool:
        """Queue on the priority lane; ``False`` once closed."""
        return self._put(self._priority, message)

    def put_internal(self, message: M) -> bool:
        """Queue on the internal lane; ``False`` once closed."""
        return self._put(self._internal, message)

    def put(self, message: M) -> bool:
        """Queue on the ordinary lane; ``False`` once closed."""
        return self._put(self._ordinary, message)

    async def get(self) -> M:
        """The next message: priority, then internal, then ordinary."""
        while True:
            for lane in (self._priority, self._internal, self._ordinary):
                if lane:
                    return lane.popleft()
            self._ready.clear()
            await self._ready.wait()

    def close(self) -> None:
        """Refuse later puts; queued messages stay for :meth:`take_all`."""
        self._closed = True

    def take_all(self) -> list[M]:
        """Remove every queued message, in lane order."""
        taken = [*self._priority, *self._internal, *self._ordinary]
        for lane in (self._priority, self._internal, self._ordinary):
            lane.clear()
        return taken


@dataclass(frozen=True, slots=True)
class Posted:
    """A client command and its position in the loop's command log.

    ``position`` is the command's Kafka offset (``None`` in memory): the actor
    records it when it takes the command, so a redelivered command at or before
    it is recognised (see :mod:`turnstream.runtime.progress`).
    """

    command: AnyCommand
    position: int | None = None


# --------------------------------------------------------------------------
# Requests with a reply (the reply future is resolved by the actor)
# --------------------------------------------------------------------------


def settle(future: asyncio.Future[T], value: T) -> None:
    """Resolve a reply future, unless its asker gave up or it is answered already."""
    if not future.done():
        future.set_result(value)


@dataclass(frozen=True, slots=True)
class InterruptRequest:
    """Interrupt with an ack: ``True`` iff a turn was cancelled."""

    command: Interrupt
    reply: asyncio.Future[bool]


@dataclass(frozen=True, slots=True)
class ShutdownRequest:
    """Shutdown with an ack, resolved once the loop has stopped.

    ``handover``: the host stops because another owner takes the loop over;
    a continuing agent's open turn is left open for it, not interrupted.
    """

    command: Shutdown
    reply: asyncio.Future[None]
    handover: bool = False


@dataclass(frozen=True, slots=True)
class SuspendRequest:
    """A planned stop is coming: suspend a continuing turn at its next step.

    No reply: the turn stops after its current step's ``StepDone`` commits
    (its actor keeps serving), so a handover then leaves nothing uncommitted.
    """


@dataclass(frozen=True, slots=True)
class GateRequest:
    """A gate answer whose fate the sender wants to know."""

    command: RespondGate
    reply: asyncio.Future[GateAnswer]


@dataclass(frozen=True, slots=True)
class IdleWaiter:
    """Resolved when the loop is parked with nothing left to start."""

    reply: asyncio.Future[None]


@dataclass(frozen=True, slots=True)
class StateQuery:
    """A snapshot of the committed loop state."""

    reply: asyncio.Future[LoopState]


# --------------------------------------------------------------------------
# Hand-offs from the turn task (tagged with the turn's generation)
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CommitRequest:
    """Commit ``events``, then append ``messages`` to history; reply committed.

    A ``final`` request (the turn's last step) is taken, not committed: the
    actor commits it with the terminal and replies once it has taken it.
    """

    generation: int
    events: Sequence[EnduringEvent]
    messages: Sequence[Conversation]
    folded: tuple[CommandId, ...]
    reply: asyncio.Future[bool]
    final: bool = False
    effects: tuple[StagedRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class DrainRequest:
    """Hand over foldable input; ``None`` means the turn is being cancelled."""

    generation: int
    reply: asyncio.Future[tuple[QueuedInput, ...] | None]


@dataclass(frozen=True, slots=True)
class OpenGateRequest:
    """Install a gate, announce it, and later settle ``answer``."""

    generation: int
    request: ApprovalRequest
    answer: asyncio.Future[str | None]


@dataclass(frozen=True, slots=True)
class TurnEnded:
    """The turn task's one and only outcome."""

    generation: int
    outcome: TurnOutcome


@dataclass(frozen=True, slots=True)
class DrainExpired:
    """A cancelled turn did not end within the drain timeout."""

    generation: int


ActorMessage = (
    Posted
    | InterruptRequest
    | ShutdownRequest
    | SuspendRequest
    | GateRequest
    | IdleWaiter
    | StateQuery
    | CommitRequest
    | DrainRequest
    | OpenGateRequest
    | TurnEnded
    | DrainExpired
)
"""Everything a loop actor receives."""
