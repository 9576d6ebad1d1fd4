"""The process edge of the command line: signal handling.

Owns :func:`stop_on_signals`, the only place the CLI installs signal handlers
(SIGTERM and SIGINT ask a long-running command such as ``actor run`` for an
ordered shutdown instead of killing it).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["stop_on_signals"]

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def stop_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """Call ``stop`` on SIGTERM or SIGINT while the block runs (in a running loop).

    The handlers are removed on exit, so a second Ctrl-C after the block falls
    back to Python's default (``KeyboardInterrupt``).
    """
    loop = asyncio.get_running_loop()
    for signum in _SIGNALS:
        loop.add_signal_handler(signum, stop)
    try:
        yield
    finally:
        for signum in _SIGNALS:
            loop.remove_signal_handler(signum)
