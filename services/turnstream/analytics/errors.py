"""Why the analytics worker stopped by itself.

Owns :class:`WorkerStoppedError` (faust stopped without being asked: it
crashed) and :class:`WorkerDeniedError` (the crash was an ACL denial; the
command line turns it into the Kafka layer's authorisation error, exit 6),
and :func:`stopped_error`, which sorts a faust crash reason into them. The
aiokafka error is recognised by its class name: this package must not import
aiokafka or :mod:`turnstream.kafka`. Pure: stdlib and ``turnstream.errors``.
"""

from __future__ import annotations

import re
from types import TracebackType
from typing import Final

from turnstream.errors import TurnstreamError

__all__ = ["WorkerDeniedError", "WorkerStoppedError", "stopped_error"]

# Frames of aiokafka's and faust's fetch path: a denial raised there is a
# denied Read; anywhere else (produce, transactions) a denied Write.
_READ_FRAMES = frozenset({"fetched_records", "_fetch_records", "getmany"})
# faust's topic creation names the topic it was refused in the message.
_CREATE = re.compile(r"Cannot create topic: (\S+)")


class WorkerStoppedError(TurnstreamError):
    """The faust worker stopped without being asked to (it crashed).

    Attributes:
        cause: the crash reason's type name (never its payload).
    """

    kind = "analytics_stopped"

    def __init__(self, cause: str) -> None:
        self.cause = cause
        super().__init__(f"the analytics worker stopped by itself ({cause})")


class WorkerDeniedError(WorkerStoppedError):
    """The worker crashed because an ACL denies it a topic, group or id.

    Attributes:
        permission: ``Read`` (denied while fetching, or the group), ``Create``
            (denied creating a topic) or ``Write`` (sending, or the
            transactional id).
        resource: the topic (or topics, comma-separated), group or id.
        resource_type: ``Topic``, ``Group`` or ``TransactionalId``.
    """

    kind = "analytics_denied"

    def __init__(
        self, *, permission: str, resource: str, resource_type: str = "Topic"
    ) -> None:
        self.permission = permission
        self.resource = resource
        self.resource_type = resource_type
        super().__init__(_REFUSALS.get(resource_type, "TopicAuthorizationFailedError"))


# The refusal of each resource type but topics (by class name: this package
# must not import aiokafka), with the permission a worker needs on it.
_REFUSALS: Final = {
    "Group": "GroupAuthorizationFailedError",
    "TransactionalId": "TransactionalIdAuthorizationFailed",
}
_NEEDS: Final = {"Group": "Read", "TransactionalId": "Write"}


def stopped_error(reason: BaseException | None) -> WorkerStoppedError:
    """The error for a worker that stopped by itself with ``reason``."""
    if reason is None:
        return WorkerStoppedError("no reason given")
    name = type(reason).__name__
    for resource_type, refusal in _REFUSALS.items():
        if name == refusal:
            # A grant removed while running: its transactions are refused.
            return WorkerDeniedError(
                permission=_NEEDS[resource_type],
                resource=str(reason.args[0]) if reason.args else "?",
                resource_type=resource_type,
            )
    if name != "TopicAuthorizationFailedError":
        return WorkerStoppedError(name)
    first = reason.args[0] if reason.args else "?"
    created = _CREATE.search(str(first))
    if created is not None:
        return WorkerDeniedError(permission="Create", resource=created.group(1))
    if isinstance(first, set | frozenset | list | tuple):
        topics = ", ".join(sorted(str(t) for t in first))
    else:
        topics = str(first)
    reading = _frames(reason.__traceback__) & _READ_FRAMES
    return WorkerDeniedError(permission="Read" if reading else "Write", resource=topics)


def _frames(tb: TracebackType | None) -> set[str]:
    names: set[str] = set()
    while tb is not None:
        names.add(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    return names
