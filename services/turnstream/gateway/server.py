"""Run the gateway: a uvicorn server around :func:`~turnstream.gateway.app.create_app`.

Owns :func:`serve` (what ``turnstream gateway`` calls) and :func:`start_server`
(the same on a port the OS picks, for tests and the benchmark, touching no
signal handler). :func:`serve` handles SIGINT and SIGTERM while it serves: a
signal stops accepting, ends the open streams within 5 seconds, stops the hub
and the producer, and :func:`serve` returns (the process exits 0, where plain
uvicorn would re-raise the signal). Imports uvicorn (only this subpackage
does).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import uvicorn

from turnstream.gateway.app import GatewaySettings, create_app
from turnstream.gateway.backend import Backend

__all__ = ["serve", "start_server"]

_GRACEFUL = 5.0


class _Server(uvicorn.Server):
    """uvicorn's server, with the signal handling this process wants."""

    def __init__(self, config: uvicorn.Config, *, signals: bool) -> None:
        super().__init__(config)
        self._signals = signals

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Stop on SIGINT/SIGTERM (if asked), and never re-raise the signal."""
        if not self._signals:
            yield
            return
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.handle_exit, sig, None)
        try:
            yield
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)


def _config(
    settings: GatewaySettings,
    connect: Callable[[], Awaitable[Backend]],
    host: str,
    port: int,
) -> uvicorn.Config:
    return uvicorn.Config(
        create_app(settings, connect),
        host=host,
        port=port,
        lifespan="on",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=int(_GRACEFUL),
    )


async def serve(
    settings: GatewaySettings,
    connect: Callable[[], Awaitable[Backend]],
    *,
    host: str,
    port: int,
) -> None:
    """Serve until SIGINT/SIGTERM."""
    await _Server(_config(settings, connect, host, port), signals=True).serve()


@contextlib.asynccontextmanager
async def start_server(
    settings: GatewaySettings,
    connect: Callable[[], Awaitable[Backend]],
    *,
    host: str = "127.0.0.1",
) -> AsyncIterator[str]:
    """Serve on a free port in the background; yield its base URL; stop after."""
    server = _Server(_config(settings, connect, host, 0), signals=False)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(60):
            while not server.started:
                if task.done():
                    await task  # raises what stopped it
                    raise RuntimeError("the gateway stopped while starting")
                await asyncio.sleep(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        await task
