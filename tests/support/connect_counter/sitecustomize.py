"""Counts this process's TCP connection attempts to given ports (tests only).

Put this directory on ``PYTHONPATH`` of a child process and set
``TURNSTREAM_TEST_CONNECTS`` to ``<file>:<port>[,<port>...]``: every
``loop.create_connection`` to one of the ports (the call aiokafka makes for
each broker connection, whether it succeeds or not) is counted, and a daemon
thread writes the count to ``<file>`` every 0.1 s. Counting below the client
library means a test sees every attempt, whichever code path made it.
"""

from __future__ import annotations

import asyncio.base_events
import os
import threading
from typing import Any

_spec = os.environ.get("TURNSTREAM_TEST_CONNECTS", "")
if _spec:
    _path, _, _ports = _spec.rpartition(":")
    _watched = {int(p) for p in _ports.split(",") if p}
    _count = [0]
    _original = asyncio.base_events.BaseEventLoop.create_connection

    async def _counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        port = args[2] if len(args) > 2 else kwargs.get("port")
        if port is not None and int(port) in _watched:
            _count[0] += 1
        return await _original(self, *args, **kwargs)

    asyncio.base_events.BaseEventLoop.create_connection = _counting  # type: ignore[method-assign]

    def _write() -> None:
        stop = threading.Event()
        while not stop.wait(0.1):
            tmp = f"{_path}.tmp"
            with open(tmp, "w") as out:
                out.write(str(_count[0]))
            os.replace(tmp, _path)

    threading.Thread(target=_write, name="connect-counter", daemon=True).start()
