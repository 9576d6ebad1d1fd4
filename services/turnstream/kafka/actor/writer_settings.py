"""How a partition writer commits, and where it is in its life.

Owns :class:`WriterSettings`, :class:`WriterState` and
:func:`transactional_id`: what :class:`~turnstream.kafka.actor.writer.PartitionWriter`
(which re-exports them) and its parts read, in a module of their own so that
those parts and the service's settings need not import the writer. Part of
``turnstream.kafka``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["WriterSettings", "WriterState", "transactional_id"]


def transactional_id(prefix: str, group_id: str, topic: str, partition: int) -> str:
    """The stable transactional id of one input partition's producer."""
    return f"{prefix}-{group_id}-{topic}-{partition}"


@dataclass(frozen=True, slots=True, kw_only=True)
class WriterSettings:
    """How one partition's writer commits.

    Attributes:
        commit_deadline: seconds one commit may take, retries included. Keep
            it below the loops' ``commit_timeout`` so the writer always decides
            before the actor stops waiting.
        transaction_timeout_ms: the producer's transaction timeout.
        max_group: appends group-committed into one transaction at most.
        offset_flush_interval: seconds an advanced command offset may wait for
            a transaction to carry it before an offsets-only one is made.
        backoff_initial: first retry delay in seconds (doubles per retry).
        backoff_max: longest retry delay in seconds.
        state_max_bytes: a state record larger than this is replaced by a small
            "replay from the start" marker; keep it below the loops topic's
            ``max.message.bytes``.
        start_timeout: seconds to start (initialise) the producer.
        close_timeout: seconds to stop the producer.
    """

    commit_deadline: float = 30.0
    transaction_timeout_ms: int = 60_000
    max_group: int = 32
    offset_flush_interval: float = 1.0
    backoff_initial: float = 0.1
    backoff_max: float = 2.0
    state_max_bytes: int = 1_000_000 - 16_384
    start_timeout: float = 60.0
    close_timeout: float = 10.0


class WriterState(StrEnum):
    """The writer's life: it only moves forward."""

    NEW = "new"
    OPEN = "open"
    FENCED = "fenced"
    FAILED = "failed"
    CLOSED = "closed"
