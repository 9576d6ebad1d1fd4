"""The process edge of a long-running deployable: signal handling.

Owns :func:`stop_on_signals`, the only place signal handlers are installed
(SIGTERM and SIGINT ask a long-running process such as the loop actor or the
analytics worker for an ordered shutdown instead of killing it; SIGUSR1 logs
where each of its asyncio tasks waits, for an operator looking at a process
that seems stuck).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["log_task_stacks", "stop_on_signals"]

_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_DUMP = signal.SIGUSR1
_FRAMES = 12
"""Innermost frames logged per task: enough to see which await it is in."""

_log = logging.getLogger(__name__)


def log_task_stacks() -> None:
    """Log every task of the running loop with the frames it waits in.

    Only code locations (file, line, function) are logged: never a local's
    value, so no prompt text or secret can reach the log.
    """
    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    lines: list[str] = []
    for task in tasks:
        lines.append(f"task {task.get_name()}:")
        for frame in task.get_stack(limit=_FRAMES):
            code = frame.f_code
            lines.append(f"  {code.co_filename}:{frame.f_lineno} in {code.co_name}")
    _log.warning("asyncio tasks (%d):\n%s", len(tasks), "\n".join(lines))


@contextmanager
def stop_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """Call ``stop`` on SIGTERM or SIGINT while the block runs (in a running loop).

    SIGUSR1 meanwhile logs the tasks' stacks (:func:`log_task_stacks`). The
    handlers are removed on exit, so a second Ctrl-C after the block falls
    back to Python's default (``KeyboardInterrupt``).
    """
    loop = asyncio.get_running_loop()
    for signum in _SIGNALS:
        loop.add_signal_handler(signum, stop)
    loop.add_signal_handler(_DUMP, log_task_stacks)
    try:
        yield
    finally:
        for signum in (*_SIGNALS, _DUMP):
            loop.remove_signal_handler(signum)
