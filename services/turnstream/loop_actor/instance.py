"""The actor process's static group membership: one instance id per slot.

Owns :func:`claim_instance` and :class:`InstanceClaim`. A static member (a
``group.instance.id``) that restarts within the session timeout takes its own
partitions back without a rebalance, so a crashed or restarted actor's loops
resume in about the time the process takes to start, and no other actor's
turns are disturbed. The id has to be the same for the replacement and
distinct from every live actor: ``<host>-<slot>``, where the slot is the lowest
number whose lock file this process can lock exclusively. The lock belongs to
the process (an ``flock`` on an open file), so the kernel releases it the
moment the process dies, even by ``kill -9``, and the replacement on the same
host claims the same slot. Actors on different hosts differ by host name (in
Kubernetes a StatefulSet gives each pod a stable one).

Part of the composition root: it touches the file system, never Kafka.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from turnstream.errors import ConfigError

__all__ = ["AUTO", "DYNAMIC", "InstanceClaim", "claim_instance"]

AUTO = "auto"
"""Derive a static instance id from the host name and a free local slot."""

DYNAMIC = "none"
"""Dynamic membership: no instance id (every restart is a new member)."""

_MAX_SLOTS = 1024
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(slots=True)
class InstanceClaim:
    """An instance id, and the lock that reserves it while the process lives."""

    instance_id: str | None
    _handle: IO[bytes] | None = field(default=None, repr=False)

    def release(self) -> None:
        """Give the slot up (the process exiting does the same)."""
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.close()


def claim_instance(
    setting: str,
    group_id: str,
    *,
    host: str | None = None,
    lock_dir: Path | None = None,
) -> InstanceClaim:
    """Resolve the ``instance_id`` setting to an id (and hold its slot).

    Args:
        setting: ``auto``, ``none`` or an explicit id (used as given: the
            operator keeps it unique, e.g. a pod name).
        group_id: the consumer group (slots are counted per group).
        host: the host name part (the machine's by default).
        lock_dir: where the slot locks live (a per-user temp directory).

    Raises:
        ConfigError: every slot is taken or the lock directory is unusable.
    """
    value = setting.strip()
    if value.lower() == DYNAMIC:
        return InstanceClaim(None)
    if value.lower() != AUTO:
        return InstanceClaim(value)
    name = _UNSAFE.sub("-", host or socket.gethostname()).strip("-") or "host"
    directory = lock_dir or Path(tempfile.gettempdir()) / f"turnstream-{os.getuid()}"
    group_key = hashlib.sha256(group_id.encode()).hexdigest()[:16]
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for slot in range(_MAX_SLOTS):
            path = directory / f"instance-{group_key}-{slot}.lock"
            handle = path.open("ab")
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            return InstanceClaim(f"{name}-{slot}", handle)
    except OSError as exc:
        raise ConfigError(
            "instance_id", f"cannot lock a slot in {directory}: {exc.strerror}"
        ) from None
    raise ConfigError(
        "instance_id", f"all {_MAX_SLOTS} local slots are taken; give --instance-id"
    )
