"""An MCP server's tools as turnstream tools.

Owns :func:`mcp_tools` and :class:`McpTool`. Each server tool becomes one
:class:`~turnstream.runtime.ports.Tool` whose spec is the server's name,
description and JSON input schema, so the agent's access policy, gates,
hooks, limits and ``tool_timeout`` apply to it exactly as to a local tool.
All tools of one :func:`mcp_tools` call share one
:class:`~turnstream.mcp.connection.McpConnection` (their
:class:`~turnstream.runtime.ports.OpenedTool` resource), which the agent
host opens at start and closes on shutdown.

A failed call is an error result, never a failed turn: the server's
``isError`` answer, a timeout, an unavailable or exited server, a protocol
error -- each ``error: mcp <kind>: …`` (:class:`~turnstream.mcp.errors.McpErrorKind`)
and one log line with the server, tool and kind (never the arguments or the
server's text). Imports the connection, runtime ports and errors.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from mcp.types import (
    AudioContent,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)
from mcp.types import Tool as McpToolInfo

from turnstream.errors import ConfigError
from turnstream.mcp.connection import McpConnection
from turnstream.mcp.errors import McpErrorKind, McpToolError
from turnstream.mcp.servers import McpServer
from turnstream.runtime.model_client import ToolSpec
from turnstream.runtime.ports import ToolContext, ToolOutput

__all__ = ["McpTool", "mcp_tools", "result_text"]

_log = logging.getLogger(__name__)


class McpTool:
    """One tool of an MCP server, called through the shared connection.

    Build them with :func:`mcp_tools`.
    """

    def __init__(
        self, connection: McpConnection, info: McpToolInfo, *, prefix: str = ""
    ) -> None:
        self._connection = connection
        self.remote_name = info.name
        self._spec = ToolSpec(
            name=prefix + info.name,
            description=info.description or "",
            input_schema=json.dumps(
                info.input_schema, separators=(",", ":"), sort_keys=True
            ),
        )

    @property
    def spec(self) -> ToolSpec:
        """The server's name (with the prefix), description and input schema."""
        return self._spec

    def resource(self) -> McpConnection:
        """The server connection this tool shares with its siblings."""
        return self._connection

    async def run(self, input_json: str, ctx: ToolContext) -> ToolOutput:
        """Call the tool on the server; every failure is an error result."""
        try:
            arguments = json.loads(input_json or "{}")
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            return self._failed(
                McpToolError(
                    self._connection.name,
                    self.remote_name,
                    McpErrorKind.INVALID_ARGUMENTS,
                )
            )
        try:
            result = await self._connection.call(self.remote_name, arguments)
        except McpToolError as exc:
            return self._failed(exc)
        text = result_text(result)
        if result.is_error:
            _log.info(
                "mcp tool answered an error",
                extra=self._fields(McpErrorKind.TOOL_ERROR),
            )
            return ToolOutput.error(f"error: mcp {McpErrorKind.TOOL_ERROR}: {text}")
        return ToolOutput.text(text)

    def _failed(self, error: McpToolError) -> ToolOutput:
        _log.warning("mcp tool call failed", extra=self._fields(error.reason))
        return ToolOutput.error(error.result_text())

    def _fields(self, reason: McpErrorKind) -> dict[str, object]:
        return {
            "mcp_server": self._connection.name,
            "tool": self.remote_name,
            "kind": reason.value,
        }


def result_text(result: CallToolResult) -> str:
    """The text of a tool result (non-text content as a short marker)."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ImageContent | AudioContent):
            parts.append(f"[{block.type}: {block.mime_type}]")
        elif isinstance(block, ResourceLink):
            parts.append(f"[resource: {block.uri}]")
        elif isinstance(block, EmbeddedResource):
            inner = block.resource
            if isinstance(inner, TextResourceContents):
                parts.append(inner.text)
            else:
                parts.append(f"[resource: {inner.uri}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, default=str))
    return "\n".join(parts)


def mcp_tools(
    server: McpServer,
    *,
    include: Iterable[str] | None = None,
    prefix: str = "",
) -> tuple[McpTool, ...]:
    """The tools of an MCP server, to put in ``Agent(tools=[...])``.

    Lists the server's tools once, now (a short-lived session of its own, in
    a worker thread, so this works inside or outside an event loop); the
    tools then share one connection the agent host starts with the actor.

    Args:
        server: a :class:`~turnstream.mcp.servers.StdioServer` or
            :class:`~turnstream.mcp.servers.HttpServer`.
        include: only these server tool names (default: all).
        prefix: put before every tool name (e.g. ``"files_"``) to keep
            names of several servers apart (providers accept only
            ``[A-Za-z0-9_-]`` in tool names).

    Raises:
        ConfigError: the server could not be listed (not started, not
            reachable, or an error), or ``include`` names a tool it lacks.
    """
    infos = _discover(server)
    if include is not None:
        wanted = list(dict.fromkeys(include))
        known = {info.name for info in infos}
        missing = [name for name in wanted if name not in known]
        if missing:
            raise ConfigError(
                f"mcp {server.name}.include", f"no such tools: {', '.join(missing)}"
            )
        infos = [info for info in infos if info.name in wanted]
    connection = McpConnection(server)
    return tuple(McpTool(connection, info, prefix=prefix) for info in infos)


def _discover(server: McpServer) -> list[McpToolInfo]:
    async def listing() -> list[McpToolInfo]:
        connection = McpConnection(server)
        try:
            return await connection.list_tools()
        finally:
            await connection.aclose()

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mcp-list") as pool:
        try:
            return pool.submit(lambda: asyncio.run(listing())).result()
        except McpToolError as exc:
            raise ConfigError(
                f"mcp {server.name}", f"cannot list its tools ({exc.reason.value})"
            ) from None
