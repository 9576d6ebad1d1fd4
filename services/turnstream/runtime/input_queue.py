"""The loop's input queue: queued entries, draining entries, their resolution.

Owns :class:`QueuedInput`, :class:`Inbox` (the FIFO of inputs behind a running
turn plus the *draining* entries handed to the turn for folding, contract
§4.1 and §4.7), the queue-resolution rules applied when a turn ends (§4.6),
the bounded window of seen command ids (redelivery is a no-op), and
:func:`input_problem` (admission validation). The actor is the only owner of
an :class:`Inbox`; nothing here awaits. Imports only value types.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass

from turnstream.content import ImageBlock, TextBlock, UserMessage
from turnstream.events import Agency
from turnstream.ids import CommandId

__all__ = [
    "SEEN_WINDOW",
    "Inbox",
    "QueuedInput",
    "SeenCommands",
    "input_problem",
]

SEEN_WINDOW = 1024
"""How many resolved command ids a loop remembers to ignore redeliveries."""


@dataclass(frozen=True, slots=True, kw_only=True)
class QueuedInput:
    """An admitted input that has not become a turn or a fold yet.

    Attributes:
        queued: the input was answered with ``InputQueued`` (it waited behind a
            turn). An input started straight from idle has ``queued=False``; if
            its start fails it is rejected (``TurnRejected{internal}``) instead
            of cancelled.
        model: the model the input's turn asks (empty: the loop's default).
        max_tokens: that turn's output cap (``None``: the loop's).
    """

    command_id: CommandId
    agency: Agency
    message: UserMessage
    no_fold: bool = False
    queued: bool = False
    model: str = ""
    max_tokens: int | None = None


def input_problem(message: UserMessage) -> str | None:
    """Why ``message`` cannot start a turn, or ``None`` if it can.

    The detail names the rule, never the content.
    """
    if not message.blocks:
        return "message has no blocks"
    usable = False
    for block in message.blocks:
        if isinstance(block, TextBlock):
            usable = usable or bool(block.text.strip())
        elif isinstance(block, ImageBlock):
            usable = True
        else:
            return f"a user message cannot hold a {block.type} block"
    return None if usable else "message is empty"


class SeenCommands:
    """A bounded, insertion-ordered set of command ids."""

    def __init__(self, initial: Iterable[CommandId] = (), limit: int = SEEN_WINDOW):
        self._ids: OrderedDict[CommandId, None] = OrderedDict()
        self._limit = limit
        for command_id in initial:
            self.add(command_id)

    def __contains__(self, command_id: object) -> bool:
        return command_id in self._ids

    def add(self, command_id: CommandId) -> None:
        """Remember ``command_id``, forgetting the oldest beyond the limit."""
        self._ids[command_id] = None
        self._ids.move_to_end(command_id)
        while len(self._ids) > self._limit:
            self._ids.popitem(last=False)

    def recent(self) -> tuple[CommandId, ...]:
        """The remembered ids, oldest first."""
        return tuple(self._ids)


class Inbox:
    """Queued inputs (FIFO) and the draining entries of the running turn."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._queue: deque[QueuedInput] = deque()
        self._draining: list[QueuedInput] = []

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def full(self) -> bool:
        """Whether one more queued input would exceed the capacity."""
        return len(self._queue) >= self.capacity

    @property
    def draining(self) -> tuple[QueuedInput, ...]:
        """Entries handed to the turn for folding and not committed yet."""
        return tuple(self._draining)

    def entries(self) -> tuple[QueuedInput, ...]:
        """Queued entries, front first."""
        return tuple(self._queue)

    def push(self, entry: QueuedInput) -> None:
        """Queue ``entry`` at the back."""
        self._queue.append(entry)

    def pop(self) -> QueuedInput | None:
        """Take the front entry, if any."""
        return self._queue.popleft() if self._queue else None

    def retract(self, command_id: CommandId) -> QueuedInput | None:
        """Remove the queued entry for ``command_id`` (draining ones are not)."""
        for entry in self._queue:
            if entry.command_id == command_id:
                self._queue.remove(entry)
                return entry
        return None

    def drain_foldable(self) -> tuple[QueuedInput, ...]:
        """Move the leading run of foldable entries to *draining* (contract §4.7).

        The scan stops at the first ``no_fold`` entry.
        """
        taken: list[QueuedInput] = []
        while self._queue and not self._queue[0].no_fold:
            taken.append(self._queue.popleft())
        self._draining.extend(taken)
        return tuple(taken)

    def folded(self, command_id: CommandId) -> None:
        """Forget a draining entry whose ``TurnFoldedInto`` committed."""
        self._draining = [e for e in self._draining if e.command_id != command_id]

    def take_all(self) -> list[QueuedInput]:
        """Remove every entry: draining first (accepted earlier), then queued."""
        taken = [*self._draining, *self._queue]
        self._draining = []
        self._queue.clear()
        return taken

    def keep_user_input(self) -> list[QueuedInput]:
        """After an interrupt: keep user-agency entries, return the rest.

        Kept entries stay FIFO with draining ones first (contract §4.6).
        """
        everything = self.take_all()
        kept = [e for e in everything if e.agency is Agency.USER]
        self._queue.extend(kept)
        return [e for e in everything if e.agency is not Agency.USER]

    def requeue_draining(self) -> None:
        """Put draining entries back at the front (a turn ended without folding)."""
        self._queue.extendleft(reversed(self._draining))
        self._draining = []
