"""A scripted HTTP/1.1 server for testing streaming clients byte-for-byte.

Binds 127.0.0.1 on an ephemeral port, answers each request with the next
:class:`ScriptedResponse` (status, headers, raw body steps, framing), and
records every request it got. Body steps are raw ``bytes`` (each written and
flushed on its own), :class:`Pause` (a timed wait) or :class:`Gate` (wait for
an ``asyncio.Event`` the test sets, or forever, watching for the client to
hang up). ``cut=True`` drops the connection mid-body.

Usage::

    async with HttpStreamServer() as server:
        server.add(ScriptedResponse(body=(b"data: [DONE]\\n\\n",)))
        ... point a client at server.base_url ...
        assert server.requests[0].json()["stream"] is True

Pure asyncio and stdlib; imports nothing from turnstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Literal

__all__ = [
    "Gate",
    "HttpStreamServer",
    "Pause",
    "RecordedRequest",
    "ScriptedResponse",
    "sse",
]

_MAX_HEADER_BYTES = 64 * 1024


@dataclass(frozen=True)
class Pause:
    """Wait ``seconds`` before the next body step."""

    seconds: float


@dataclass(frozen=True)
class Gate:
    """Hold the body until ``release`` is set (never, if None).

    While held, the server watches the connection: if the client hangs up,
    the response is abandoned and :attr:`HttpStreamServer.disconnected` is set.
    """

    release: asyncio.Event | None = None


BodyStep = bytes | Pause | Gate


@dataclass(frozen=True)
class ScriptedResponse:
    """One scripted answer.

    Attributes:
        status: the HTTP status code.
        headers: extra headers, after the framing ones.
        body: the body steps, in order.
        framing: ``chunked`` (Transfer-Encoding: chunked), ``length``
            (Content-Length, summed over the byte steps) or ``close`` (the end
            of the body is the end of the connection).
        cut: drop the connection after the body steps, without finishing the
            framing (no terminating chunk, fewer bytes than announced).
    """

    status: int = 200
    headers: tuple[tuple[str, str], ...] = (
        ("content-type", "text/event-stream; charset=utf-8"),
        ("cache-control", "no-cache"),
    )
    body: tuple[BodyStep, ...] = ()
    framing: Literal["chunked", "length", "close"] = "chunked"
    cut: bool = False


@dataclass(frozen=True)
class RecordedRequest:
    """A request as the server received it; header names are lower-cased."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


def sse(data: str | dict[str, Any], event: str | None = None) -> bytes:
    """One server-sent event, encoded as a server writes it."""
    text = data if isinstance(data, str) else json.dumps(data)
    prefix = f"event: {event}\n" if event is not None else ""
    return f"{prefix}data: {text}\n\n".encode()


@dataclass
class HttpStreamServer:
    """The server; use it as an async context manager."""

    responses: deque[ScriptedResponse] = field(default_factory=deque)
    requests: list[RecordedRequest] = field(default_factory=list)
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when a client hangs up while a response is held at a Gate."""
    connections: int = 0
    """How many connections were accepted (keep-alive reuse shows here)."""
    _server: asyncio.Server | None = None
    _handlers: set[asyncio.Task[None]] = field(default_factory=set)

    def add(self, *responses: ScriptedResponse) -> None:
        """Queue responses; each request takes the next one."""
        self.responses.extend(responses)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        assert self._server is not None, "server not started"
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def start(self) -> None:
        """Bind and start accepting connections."""
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)

    async def close(self) -> None:
        """Stop accepting, end every open connection and wait for the handlers."""
        if self._server is not None:
            self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> HttpStreamServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _handle(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self.connections += 1
        try:
            while await self._serve_one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away; nothing to answer
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _serve_one(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Answer one request; return whether the connection stays open."""
        request = await _read_request(reader)
        if request is None:
            return False
        self.requests.append(request)
        if self.responses:
            response = self.responses.popleft()
        else:
            response = ScriptedResponse(
                status=500,
                headers=(("content-type", "text/plain"),),
                body=(b"no scripted response left",),
                framing="length",
            )
        writer.write(_head(response))
        await writer.drain()
        for step in response.body:
            if isinstance(step, Pause):
                await asyncio.sleep(step.seconds)
            elif isinstance(step, Gate):
                if not await self._hold(step, reader):
                    self.disconnected.set()
                    return False
            else:
                writer.write(_frame(step) if response.framing == "chunked" else step)
                await writer.drain()
        if response.cut or response.framing == "close":
            return False
        if response.framing == "chunked":
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        return True

    async def _hold(self, gate: Gate, reader: asyncio.StreamReader) -> bool:
        """Wait at ``gate``; False if the client hung up first."""
        # The client sends nothing while it awaits this response, so any
        # read completing here is the end of the connection.
        hangup = asyncio.ensure_future(reader.read(1))
        waiters: set[asyncio.Future[Any]] = {hangup}
        if gate.release is not None:
            waiters.add(asyncio.ensure_future(gate.release.wait()))
        try:
            done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)
        return hangup not in done


async def _read_request(reader: asyncio.StreamReader) -> RecordedRequest | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise
        return None  # a clean close between requests
    if len(head) > _MAX_HEADER_BYTES:
        raise ConnectionError("request head too large")
    request_line, *header_lines = head.decode("latin-1").split("\r\n")
    method, path, _version = request_line.split(" ", 2)
    headers: dict[str, str] = {}
    for line in header_lines:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = await _read_chunked(reader)
    else:
        body = await reader.readexactly(int(headers.get("content-length", "0")))
    return RecordedRequest(method=method, path=path, headers=headers, body=body)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


def _head(response: ScriptedResponse) -> bytes:
    try:
        phrase = HTTPStatus(response.status).phrase
    except ValueError:
        phrase = ""  # e.g. 529, which some providers use
    lines = [f"HTTP/1.1 {response.status} {phrase}"]
    if response.framing == "chunked":
        lines.append("Transfer-Encoding: chunked")
    elif response.framing == "length":
        size = sum(len(step) for step in response.body if isinstance(step, bytes))
        lines.append(f"Content-Length: {size + (1 if response.cut else 0)}")
    else:
        lines.append("Connection: close")
    lines.extend(f"{name}: {value}" for name, value in response.headers)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _frame(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"
