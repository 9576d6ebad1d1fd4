"""Supervision of an actor's turn tasks, with a bounded close.

Owns :class:`TurnTasks`. It is deliberately *not* an ``asyncio.TaskGroup``: a
TaskGroup's exit waits without bound for every child, and the contract
requires that a model which ignores cancellation cannot pin its loop (§4.8,
``DrainTimeout``). :meth:`TurnTasks.aclose` cancels every task, waits at most
the drain timeout, and then abandons the stragglers: they are logged and kept
referenced until they end on their own. Also :func:`cancel_and_wait`, the
close of background tasks that do end when cancelled. Imports only the
standard library.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Iterable
from typing import Any, Generic, TypeVar

__all__ = ["TurnTasks", "cancel_and_wait"]

_log = logging.getLogger(__name__)

T = TypeVar("T")

# Stragglers live here so they are not garbage-collected while still pending.
_ABANDONED: set[asyncio.Task[object]] = set()


class TurnTasks(Generic[T]):
    """The turn tasks of one actor."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[T]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coro: Coroutine[object, object, T], name: str) -> asyncio.Task[T]:
        """Start ``coro`` as a supervised task."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def cancel_all(self) -> None:
        """Request cancellation of every task (does not wait)."""
        for task in self._tasks:
            task.cancel()

    async def aclose(self, grace: float) -> int:
        """Cancel every task and wait at most ``grace`` seconds.

        Returns:
            How many tasks were abandoned because they ignored cancellation.
        """
        if not self._tasks:
            return 0
        self.cancel_all()
        _, pending = await asyncio.wait(set(self._tasks), timeout=grace)
        for task in pending:
            _ABANDONED.add(task)
            task.add_done_callback(_ABANDONED.discard)
        if pending:
            _log.warning("abandoned turn tasks", extra={"count": len(pending)})
        return len(pending)


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel every task, then wait for each to end (without bound).

    For an owner's own background tasks, which never ignore cancellation;
    a turn task, which may, goes through :meth:`TurnTasks.aclose`.
    """
    tasks = list(tasks)
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
