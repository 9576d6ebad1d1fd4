"""One live MCP session: started, used by tool calls, restarted, closed.

Owns :class:`McpConnection`, the :class:`~turnstream.runtime.ports.ToolResource`
every tool of one server shares. The SDK's transports are anyio context
managers that must be entered and left by one task, while calls come from
many turn tasks; so one *owner task* per session enters the transport and
the ``ClientSession``, hands the session out, and leaves both when told to
stop. The connection keeps a reference to it and awaits it in
:meth:`McpConnection.aclose` (and before a restart), so it never outlives
the connection.

Life: :meth:`~McpConnection.open` when the agent host starts, a call
(re)connects on its own when there is no session (never opened, or the
server died: the next call after a crash starts a new process), and
:meth:`~McpConnection.aclose` on shutdown stops the process. Every wait is
bounded: ``connect_timeout`` for start and handshake, ``call_timeout`` per
call. Imports the SDK (only this package may), runtime ports and errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CONNECTION_CLOSED,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
)

from turnstream.mcp.errors import McpErrorKind, McpToolError
from turnstream.mcp.servers import HttpServer, McpServer

if TYPE_CHECKING:
    from mcp.types import Tool as McpToolInfo

__all__ = ["McpConnection"]

_log = logging.getLogger(__name__)
R = TypeVar("R")
_STOP_TIMEOUT = 10.0
"""Seconds a session may take to close (the SDK bounds its own process stop)."""
_LIST_TOOLS = "tools/list"
_SSE_READ_TIMEOUT = 300.0
"""Seconds an HTTP read may wait (the SDK's default for its event streams)."""


class McpConnection:
    """The session with one MCP server, shared by all of its tools.

    Args:
        server: where the server is.
    """

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self._lock = asyncio.Lock()
        self._lock_loop: asyncio.AbstractEventLoop | None = None
        self._session: ClientSession | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._ended = asyncio.Event()
        self.starts = 0
        """How many sessions were started (a restart after a crash adds one)."""

    @property
    def name(self) -> str:
        """The server's name."""
        return self.server.name

    @property
    def connected(self) -> bool:
        """Whether a session is up (as far as this side knows)."""
        owner = self._owner
        return (
            self._session is not None
            and owner is not None
            and not owner.done()
            and not self._ended.is_set()
        )

    async def open(self) -> None:
        """Start the session now; a failure is logged (the next call retries)."""
        try:
            await self._ensure(_LIST_TOOLS)
        except McpToolError as exc:
            _log.warning(
                "mcp server could not start; the next call retries",
                extra={"mcp_server": self.name, "kind": exc.reason.value},
            )

    async def aclose(self) -> None:
        """Stop the session (and a stdio server's process); wait until it has."""
        async with self._guard():
            await self._stop_owner()

    async def __aenter__(self) -> McpConnection:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def list_tools(self) -> list[McpToolInfo]:
        """Every tool the server offers (all pages).

        Raises:
            McpToolError: the server is unavailable, stopped, or answered
                with an error or not in time.
        """
        tools: list[McpToolInfo] = []
        cursor: str | None = None
        while True:
            page = await self._request(_LIST_TOOLS, _list_page(cursor))
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                return tools

    async def call(self, tool: str, arguments: dict[str, object]) -> CallToolResult:
        """Call one tool; a result with ``is_error`` is returned, not raised.

        Raises:
            McpToolError: the call failed (kind ``timeout``, ``unavailable``,
                ``server_exited`` or ``protocol_error``).
        """
        return await self._request(tool, _call_tool(tool, arguments))

    # -- internals ----------------------------------------------------------

    def _guard(self) -> asyncio.Lock:
        """The lock of the running loop (tools may outlive one event loop)."""
        loop = asyncio.get_running_loop()
        if self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
            self._session, self._owner = None, None  # the old loop's, if any
        return self._lock

    async def _request(
        self, what: str, send: Callable[[ClientSession], Awaitable[R]]
    ) -> R:
        """One request on the live session, its failures classified."""
        session = await self._ensure(what)
        try:
            async with asyncio.timeout(self.server.call_timeout):
                return await send(session)
        except TimeoutError:
            raise McpToolError(self.name, what, McpErrorKind.TIMEOUT) from None
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                raise McpToolError(
                    self.name, what, McpErrorKind.PROTOCOL_ERROR, code=exc.code
                ) from None
            await self._forget(session)
            raise McpToolError(self.name, what, McpErrorKind.SERVER_EXITED) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await self._forget(session)
            raise McpToolError(self.name, what, McpErrorKind.SERVER_EXITED) from None
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a reply the SDK cannot use
            raise McpToolError(self.name, what, McpErrorKind.PROTOCOL_ERROR) from None

    async def _forget(self, session: ClientSession) -> None:
        """Drop a session that stopped working (the next call starts another)."""
        async with self._guard():
            if self._session is session:
                _log.warning(
                    "mcp session lost; the next call restarts it",
                    extra={"mcp_server": self.name},
                )
                await self._stop_owner()

    async def _ensure(self, what: str) -> ClientSession:
        """The live session, started first if there is none."""
        async with self._guard():
            if self.connected and self._session is not None:
                return self._session
            await self._stop_owner()  # a dead session's owner, if any
            loop = asyncio.get_running_loop()
            ready: asyncio.Future[ClientSession] = loop.create_future()
            self._stop, self._ended = asyncio.Event(), asyncio.Event()
            self._owner = asyncio.create_task(
                self._own(ready, self._stop, self._ended), name=f"mcp-{self.name}"
            )
            self.starts += 1
            try:
                async with asyncio.timeout(self.server.connect_timeout):
                    session = await asyncio.shield(ready)
            except TimeoutError:
                await self._stop_owner()
                raise McpToolError(self.name, what, McpErrorKind.UNAVAILABLE) from None
            except asyncio.CancelledError:
                await self._stop_owner()
                raise
            except Exception:  # noqa: BLE001 - any start failure: unavailable
                await self._stop_owner()
                raise McpToolError(self.name, what, McpErrorKind.UNAVAILABLE) from None
            self._session = session
            return session

    async def _own(
        self,
        ready: asyncio.Future[ClientSession],
        stop: asyncio.Event,
        ended: asyncio.Event,
    ) -> None:
        """The owner task: enter the transport and session, wait, leave them.

        It leaves them when told to stop, and also when the server's stream
        ends (a stdio server that exited, even between calls): the task is
        then done, and the next call starts a new session.
        """
        lost = False
        try:
            async with self._transport() as (read, write):
                inbox_writer, inbox = anyio.create_memory_object_stream[Any](0)
                async with anyio.create_task_group() as relays:
                    relays.start_soon(_relay, read, inbox_writer, ended)
                    async with ClientSession(inbox, write) as session:
                        await session.initialize()
                        ready.set_result(session)
                        await _first_of(stop, ended)
                        lost = not stop.is_set()
                    relays.cancel_scope.cancel()
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - the task's failure is reported, not lost
            if not ready.done():
                ready.set_exception(exc)
            else:
                _log.warning(
                    "mcp session ended with an error",
                    extra={"mcp_server": self.name, "error": type(exc).__name__},
                )
        finally:
            if not ready.done():
                ready.cancel()
        if lost:
            _log.warning(
                "mcp server closed the session; the next call restarts it",
                extra={"mcp_server": self.name},
            )

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        server = self.server
        if isinstance(server, HttpServer):
            # The SDK's HTTP client (httpx2), with its headers and timeouts:
            # connect as configured; reads may wait long on a held-open
            # stream (every call is bounded by ``call_timeout`` anyway).
            client = httpx2.AsyncClient(
                headers=dict(server.headers),
                timeout=httpx2.Timeout(server.connect_timeout, read=_SSE_READ_TIMEOUT),
            )
            async with (
                client,
                streamable_http_client(server.url, http_client=client) as streams,
            ):
                yield streams
            return
        params = StdioServerParameters(
            command=server.command,
            args=list(server.args),
            env=dict(server.env) or None,
            cwd=server.cwd,
        )
        # The server's stderr never joins the actor's structured log: it is
        # discarded, or appended to the file the operator names.
        target = server.stderr or os.devnull
        with open(target, "a", encoding="utf-8") as errlog:  # noqa: ASYNC230 - opening a local file
            async with stdio_client(params, errlog=errlog) as streams:
                yield streams

    async def _stop_owner(self) -> None:
        """End the owner task (if any) and forget its session. Lock held."""
        self._session = None
        owner, self._owner = self._owner, None
        if owner is None:
            return
        self._stop.set()
        try:
            async with asyncio.timeout(_STOP_TIMEOUT):
                await asyncio.shield(owner)
        except TimeoutError:
            owner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await owner
        except asyncio.CancelledError:
            owner.cancel()
            raise
        except Exception:  # noqa: BLE001, S110 - _own reports its own failure
            pass


async def _relay(source: Any, sink: Any, ended: asyncio.Event) -> None:
    """Hand the transport's messages to the session; note when they end."""
    try:
        async with sink:
            async for message in source:
                await sink.send(message)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass  # the session closed its side first: a normal stop
    finally:
        ended.set()


async def _first_of(*events: asyncio.Event) -> None:
    """Return once any of ``events`` is set."""
    async with anyio.create_task_group() as waits:

        async def until(event: asyncio.Event) -> None:
            await event.wait()
            waits.cancel_scope.cancel()

        for event in events:
            waits.start_soon(until, event)


class _NotAResultError(Exception):
    """The server answered a call with something that is not a tool result."""


def _list_page(
    cursor: str | None,
) -> Callable[[ClientSession], Awaitable[ListToolsResult]]:
    async def send(session: ClientSession) -> ListToolsResult:
        params = PaginatedRequestParams(cursor=cursor) if cursor else None
        return await session.list_tools(params=params)

    return send


def _call_tool(
    tool: str, arguments: dict[str, object]
) -> Callable[[ClientSession], Awaitable[CallToolResult]]:
    async def send(session: ClientSession) -> CallToolResult:
        result = await session.call_tool(tool, arguments)
        if not isinstance(result, CallToolResult):
            raise _NotAResultError
        return result

    return send
