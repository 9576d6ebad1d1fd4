"""Classifying aiokafka failures, and the loop-actor service's transport errors.

Owns the errors the service raises to the runtime when a durable commit
cannot be made (:class:`PartitionFencedError`, :class:`PartitionClosedError`,
:class:`CommitFailedError`), the classification of an aiokafka exception
(:func:`classify`: fenced, retriable, permanent or denied by an ACL), and
:func:`transport_error`, which wraps any of them into
:class:`turnstream.errors.TransportError` keeping its ``retriable`` flag -- an
ACL denial always into :class:`~turnstream.kafka.errors.KafkaAuthorizationError`
(never retriable, naming the grant), so no caller mistakes it for a transient
failure and retries it.
Messages name the operation and the error type, never a payload. Part of
``turnstream.kafka`` (the only aiokafka importer); must not import the runtime
or the wire codec.
"""

from __future__ import annotations

from enum import StrEnum

from aiokafka.errors import (
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NodeNotReadyError,
    OutOfOrderSequenceNumber,
    ProducerFenced,
    RequestTimedOutError,
    TransactionalIdAuthorizationFailed,
    UnknownProducerId,
)

from turnstream.errors import TransportError
from turnstream.kafka.diagnose import AUTHORIZATION_ERRORS, authorization_error
from turnstream.kafka.errors import KafkaAuthorizationError
from turnstream.kafka.security import KafkaSecurity

__all__ = [
    "CommitFailedError",
    "Fault",
    "PartitionClosedError",
    "PartitionFencedError",
    "classify",
    "transport_error",
]


class Fault(StrEnum):
    """What an exception from a producer means for the partition's writer."""

    FENCED = "fenced"
    """Another process owns the transactional id now: stop, write nothing more."""
    RETRIABLE = "retriable"
    """Transient (broker restart, timeout, leader move): abort and retry."""
    FATAL = "fatal"
    """The producer is unusable (sequence or authorisation failure): rebuild it."""
    PERMANENT = "permanent"
    """The request itself is bad (e.g. too large): retrying cannot help."""
    DENIED = "denied"
    """An ACL forbids it: nothing helps until an operator grants the permission."""


_FENCING = (ProducerFenced, InvalidProducerEpoch)
_FATAL = (
    OutOfOrderSequenceNumber,
    TransactionalIdAuthorizationFailed,
    InvalidProducerIdMapping,
    UnknownProducerId,
)
_TRANSIENT = (
    KafkaConnectionError,
    KafkaTimeoutError,
    NodeNotReadyError,
    RequestTimedOutError,
    TimeoutError,
    ConnectionError,
)


def classify(exc: BaseException) -> Fault:  # noqa: PLR0911 - one per fault
    """Sort an exception raised by a producer or consumer call."""
    if isinstance(exc, (*AUTHORIZATION_ERRORS, KafkaAuthorizationError)):
        return Fault.DENIED
    if isinstance(exc, _FENCING):
        return Fault.FENCED
    if isinstance(exc, _FATAL):
        return Fault.FATAL
    if isinstance(exc, _TRANSIENT):
        return Fault.RETRIABLE
    if isinstance(exc, TransportError):
        return Fault.RETRIABLE if exc.is_retriable else Fault.PERMANENT
    if isinstance(exc, KafkaError) and exc.retriable:
        return Fault.RETRIABLE
    return Fault.PERMANENT


def transport_error(
    operation: str,
    exc: BaseException,
    *,
    security: KafkaSecurity | None = None,
    permission: str = "Describe",
    resource: str | None = None,
) -> TransportError:
    """Wrap ``exc`` as a :class:`TransportError` (the type name, never a payload).

    Args:
        operation: what was being done (``read turnstream.loops.v1[0]``).
        exc: what aiokafka (or the OS) raised.
        security: whose principal a denial names (``User:NAME``).
        permission: the ACL operation a denied topic call needed (``Read``
            for a fetch, ``Write`` for a produce); group and transactional-id
            denials name their own.
        resource: the topic, group or transactional id, when ``exc`` does
            not carry it.

    Returns:
        A :class:`~turnstream.kafka.errors.KafkaAuthorizationError` for an ACL
        denial; else a :class:`TransportError` as retriable as ``exc``.
    """
    if isinstance(exc, TransportError):
        return exc
    denied = authorization_error(
        exc,
        security=security,
        operation=operation,
        permission=permission,
        resource=resource,
    )
    if denied is not None:
        return denied
    if isinstance(exc, TimeoutError):
        return TransportError(operation, "timed out", retriable=True)
    return TransportError(
        operation, type(exc).__name__, retriable=classify(exc) is Fault.RETRIABLE
    )


class PartitionFencedError(TransportError):
    """This process lost a partition: a newer producer owns its transactional id.

    A fenced writer never appends again; the loops of the partition stop.
    """

    kind = "producer_fenced"

    def __init__(self, partition: int) -> None:
        self.partition = partition
        super().__init__(
            f"commit on partition {partition}",
            "producer fenced: another process owns this partition",
            retriable=False,
        )


class PartitionClosedError(TransportError):
    """A commit was requested from a partition that is stopping or stopped."""

    kind = "partition_closed"

    def __init__(self, partition: int) -> None:
        self.partition = partition
        super().__init__(
            f"commit on partition {partition}", "partition closed", retriable=False
        )


class CommitFailedError(TransportError):
    """A commit did not happen: nothing of it is visible ``read_committed``.

    Attributes:
        partition: the partition whose transaction failed.
        cause: the failure's type name.
        attempts: how many transactions were tried.
    """

    kind = "commit_failed"

    def __init__(
        self, partition: int, cause: str, attempts: int, *, retriable: bool
    ) -> None:
        self.partition = partition
        self.cause = cause
        self.attempts = attempts
        super().__init__(
            f"commit on partition {partition}",
            f"{cause} after {attempts} attempt(s)",
            retriable=retriable,
        )
