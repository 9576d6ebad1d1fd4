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
    """The worker crashed because an ACL denies it a topic.

    Attributes:
        permission: ``Read`` (denied while fetching), ``Create`` (denied
            creating a topic) or ``Write``.
        resource: the topic (or topics, comma-separated).
    """

    kind = "analytics_denied"

    def __init__(self, *, permission: str, resource: str) -> None:
        self.permission = permission
        self.resource = resource
        super().__init__("TopicAuthorizationFailedError")


def stopped_error(reason: BaseException | None) -> WorkerStoppedError:
    """The error for a worker that stopped by itself with ``reason``."""
    if reason is None:
        return WorkerStoppedError("no reason given")
    if type(reason).__name__ != "TopicAuthorizationFailedError":
        return WorkerStoppedError(type(reason).__name__)
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
