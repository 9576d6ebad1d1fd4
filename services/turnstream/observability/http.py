"""The health and metrics endpoint of a service: ``/metrics``, ``/ready``, ``/healthz``.

Owns :class:`HealthServer`, a deliberately small asyncio HTTP/1.1 server (one
request per connection, ``GET``/``HEAD`` only, bounded request size and read
time) so the endpoint runs on the service's own event loop, with no thread:

- ``/metrics`` -- the Prometheus text format of a registry;
- ``/ready`` -- ``200`` once the service says it is ready, ``503`` before
  (partitions assigned and restored, for the loop actor);
- ``/healthz`` -- ``200`` while the process serves requests (liveness).

It binds to 127.0.0.1 unless told otherwise. Adapters layer: imports
prometheus-client and the stdlib only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final, Self

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["DEFAULT_HOST", "HealthServer"]

DEFAULT_HOST: Final = "127.0.0.1"
_READ_TIMEOUT: Final = 5.0
_WRITE_TIMEOUT: Final = 5.0
_MAX_HEAD: Final = 8192
_TEXT: Final = "text/plain; charset=utf-8"
_REASONS: Final = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    503: "Service Unavailable",
}

logger = logging.getLogger(__name__)


class HealthServer:
    """Serves a registry and a readiness check over HTTP.

    Use it as an async context manager (or :meth:`start` / :meth:`close`).

    Args:
        registry: what ``/metrics`` exports.
        ready: whether ``/ready`` answers 200.
        host: the address to bind (loopback by default).
        port: the TCP port; 0 lets the system pick one (see :attr:`port`).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        ready: Callable[[], bool],
        *,
        host: str = DEFAULT_HOST,
        port: int = 0,
    ) -> None:
        self._registry = registry
        self._ready = ready
        self._host = host
        self._requested_port = port
        self._server: asyncio.Server | None = None
        # Requests being answered: close() lets them finish, since a handler
        # task cancelled by asyncio.run's teardown makes asyncio log an ERROR.
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        """The bound port (after :meth:`start`)."""
        if self._server is None or not self._server.sockets:
            return self._requested_port
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        """``http://host:port`` of the running server."""
        return f"http://{self._host}:{self.port}"

    async def start(self) -> None:
        """Bind and start serving.

        Raises:
            OSError: the address is in use or cannot be bound.
        """
        self._server = await asyncio.start_server(
            self._handle, self._host, self._requested_port
        )
        logger.info(
            "health endpoint listening", extra={"host": self._host, "port": self.port}
        )

    async def close(self) -> None:
        """Stop serving; idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        if self._handlers:
            await asyncio.wait(set(self._handlers), timeout=_WRITE_TIMEOUT)
        async with asyncio.timeout(_WRITE_TIMEOUT):
            await server.wait_closed()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # -- one request --------------------------------------------------------

    async def _handle(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        try:
            try:
                async with asyncio.timeout(_READ_TIMEOUT):
                    head = await reader.readuntil(b"\r\n\r\n")
            except (
                TimeoutError,
                asyncio.IncompleteReadError,
                asyncio.LimitOverrunError,
            ):
                await self._send(writer, 400, b"bad request\n", _TEXT)
                return
            if len(head) > _MAX_HEAD:
                await self._send(writer, 400, b"request too large\n", _TEXT)
                return
            method, path = _request_line(head)
            status, body, content_type = self._route(method, path)
            await self._send(
                writer, status, b"" if method == "HEAD" else body, content_type
            )
        except (ConnectionError, TimeoutError):
            return  # the client went away; nothing to answer
        finally:
            writer.close()

    def _route(self, method: str, path: str) -> tuple[int, bytes, str]:
        if method not in ("GET", "HEAD"):
            if not method:
                return 400, b"bad request\n", _TEXT
            return 405, b"method not allowed\n", _TEXT
        match path:
            case "/metrics":
                return 200, generate_latest(self._registry), CONTENT_TYPE_LATEST
            case "/ready":
                ready = self._ready()
                return (
                    (200, b"ready\n", _TEXT) if ready else (503, b"not ready\n", _TEXT)
                )
            case "/healthz":
                return 200, b"ok\n", _TEXT
            case _:
                return 404, b"not found\n", _TEXT

    @staticmethod
    async def _send(
        writer: asyncio.StreamWriter, status: int, body: bytes, content_type: str
    ) -> None:
        head = (
            f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
            f"Content-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        writer.write(head.encode("ascii") + body)
        async with asyncio.timeout(_WRITE_TIMEOUT):
            await writer.drain()


def _request_line(head: bytes) -> tuple[str, str]:
    """``(method, path)`` of a request head; the query string is dropped."""
    first = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = first.split(" ")
    if len(parts) != 3:  # METHOD SP target SP version
        return "", ""
    method, target, _version = parts
    return method.upper(), target.split("?", 1)[0]
