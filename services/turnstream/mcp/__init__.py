"""MCP servers' tools for turnstream agents (the optional ``turnstream[mcp]``).

Table of contents:

- ``servers`` -- :class:`StdioServer` (a command, over stdin/stdout) and
  :class:`HttpServer` (streamable HTTP): where a server is, its timeouts;
- ``tools`` -- :func:`mcp_tools` (a server's tools as turnstream tools, for
  ``Agent(tools=[..., *mcp_tools(server)])``) and :class:`McpTool`;
- ``connection`` -- :class:`McpConnection`: the live session the tools of
  one server share, opened and closed with the agent host, restarted on the
  next call after the server died;
- ``errors`` -- :class:`McpToolError` and its stable :class:`McpErrorKind`.

The only package that imports the ``mcp`` SDK (an import-linter contract
says so). It is an adapter: it imports the runtime's ports, never the
reverse.
"""

from turnstream.mcp.connection import McpConnection
from turnstream.mcp.errors import McpErrorKind, McpToolError
from turnstream.mcp.servers import (
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_CONNECT_TIMEOUT,
    HttpServer,
    McpServer,
    StdioServer,
)
from turnstream.mcp.tools import McpTool, mcp_tools, result_text

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_CONNECT_TIMEOUT",
    "HttpServer",
    "McpConnection",
    "McpErrorKind",
    "McpServer",
    "McpTool",
    "McpToolError",
    "StdioServer",
    "mcp_tools",
    "result_text",
]
