"""Errors that only the loop runtime raises.

Owns :class:`CommitError`, :class:`RestoreError`, :class:`LoopClosedError` and
:class:`EffectError`, all under :class:`turnstream.errors.TurnstreamError`.
Turn failures use the shared tree in :mod:`turnstream.errors`. Imports only
:mod:`turnstream.errors`.
"""

from __future__ import annotations

from turnstream.errors import TurnstreamError

__all__ = ["CommitError", "EffectError", "LoopClosedError", "RestoreError"]


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


class EffectError(TurnstreamError):
    """A tool call's staged record was refused (the call gets an error result).

    ``reason`` is one of ``"invalid_topic"`` (not a legal Kafka topic name),
    ``"reserved_topic"`` (one of the journal's own topics), ``"invalid_record"``
    (a key, value or header of the wrong type), ``"too_many"``, ``"closed"``
    (the call is over) or ``"unsupported"`` (the call has no stage).
    """

    kind = "effect"

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"record not staged: {reason}")
