"""Errors that only the loop runtime raises.

Owns :class:`CommitError`, :class:`RestoreError` and :class:`LoopClosedError`,
all under :class:`turnstream.errors.TurnstreamError`. Turn failures use the
shared tree in :mod:`turnstream.errors`. Imports only :mod:`turnstream.errors`.
"""

from __future__ import annotations

from turnstream.errors import TurnstreamError

__all__ = ["CommitError", "LoopClosedError", "RestoreError"]


class CommitError(TurnstreamError):
    """A turn's commit handshake with its actor did not commit.

    Any commit error ends the turn ``TurnInterrupted`` (contract §10.1.7).
    """

    kind = "commit"

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"commit not done: {reason}")


class RestoreError(TurnstreamError):
    """A loop could not be rebuilt from its journal.

    ``reason`` is one of ``"empty_journal"``, ``"journal_failed"``,
    ``"append_failed"``, ``"open_turn"``, ``"loop_mismatch"``.
    """

    kind = "restore"

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"restore failed: {reason}")


class LoopClosedError(TurnstreamError):
    """A command was sent to a loop actor that has stopped."""

    kind = "loop_closed"

    def __init__(self) -> None:
        super().__init__("the loop actor has stopped")
