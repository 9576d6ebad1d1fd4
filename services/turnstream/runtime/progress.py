"""How far a loop has applied its log of commands.

Owns :class:`CommandProgress` (the durable value, stored in every loop state
snapshot) and :class:`ProgressTracker` (the actor's live copy). A command's
*position* is its place in the loop's command log -- on Kafka, its offset in
the commands partition; in memory there is none (``None``) and nothing here is
used.

The rule that makes redelivery harmless, however far back it starts: when the
actor takes a command at position ``p``, every command of the loop before ``p``
has already taken effect, so ``applied`` only grows. A command at or before
``applied`` must never run again -- except an admitted input that has no
durable answer yet (queued behind a turn, say): its effect lived in memory
only, so its position is *pending* and it runs again after a restore. Both
values travel with every commit that writes a snapshot, atomically with the
events that made them true. Pending entries are removed when an event that
answers the input (``reply_to()``) commits.

Pure and synchronous; the loop's actor is its only user. Imports only ids.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from uuid import UUID

from turnstream.ids import CommandId

__all__ = ["CommandProgress", "ProgressTracker"]


@dataclass(frozen=True, slots=True)
class CommandProgress:
    """The durable mark of a loop's command log.

    Attributes:
        applied: position of the last command the loop has taken (-1: none).
        pending: positions at or before ``applied`` of admitted inputs that
            have no durable answer yet, ascending.
    """

    applied: int = -1
    pending: tuple[int, ...] = ()

    def covers(self, position: int) -> bool:
        """Whether the command at ``position`` has already taken effect."""
        return position <= self.applied and position not in self.pending


class ProgressTracker:
    """The actor's live :class:`CommandProgress` (see the module docstring)."""

    def __init__(self, start: CommandProgress | None = None) -> None:
        start = start or CommandProgress()
        self._applied = start.applied
        # Restored entries have no known id until their command is read again.
        self._pending: dict[int, CommandId | None] = dict.fromkeys(start.pending)

    def take(self, position: int) -> None:
        """The actor takes the command at ``position`` (log order)."""
        # A restored pending entry below ``position`` whose command was not read
        # again had been answered before the committed offset moved past it.
        for stale in [
            p for p, c in self._pending.items() if c is None and p < position
        ]:
            del self._pending[stale]
        self._applied = max(self._applied, position)

    def admit(self, position: int, command_id: CommandId) -> None:
        """The input at ``position`` was admitted and waits for its answer."""
        self._pending[position] = command_id

    def after(self, answered: Iterable[UUID]) -> CommandProgress:
        """The progress once the inputs ``answered`` are durably answered."""
        done = set(answered)
        return CommandProgress(
            applied=self._applied,
            pending=tuple(
                sorted(
                    p for p, c in self._pending.items() if c is None or c not in done
                )
            ),
        )

    def settle(self, answered: Iterable[UUID]) -> None:
        """Forget the inputs ``answered`` (their answers are committed)."""
        done = set(answered)
        for position in [p for p, c in self._pending.items() if c in done]:
            del self._pending[position]
