"""The embedded composition: a session with in-memory journal and hub.

Owns :func:`embedded_session`, the one-call way to run loops in process with
no broker. Imports the runtime and this package's adapters.
"""

from __future__ import annotations

from turnstream.ids import SessionId
from turnstream.memory.hub import InMemoryHub
from turnstream.memory.journal import InMemoryJournal
from turnstream.runtime.hooks import HookRunner
from turnstream.runtime.local_session import LocalSession
from turnstream.runtime.ports import AccessPolicy, Clock, IdSource, Journal

__all__ = ["embedded_session"]


def embedded_session(
    *,
    session_id: SessionId | None = None,
    journal: Journal | None = None,
    hub: InMemoryHub | None = None,
    clock: Clock | None = None,
    ids: IdSource | None = None,
    hooks: HookRunner | None = None,
    access_policy: AccessPolicy | None = None,
) -> LocalSession:
    """A :class:`LocalSession` over in-memory adapters (use it with ``async with``)."""
    return LocalSession(
        journal=journal or InMemoryJournal(),
        hub=hub or InMemoryHub(),
        session_id=session_id,
        clock=clock,
        ids=ids,
        hooks=hooks,
        access_policy=access_policy,
    )
