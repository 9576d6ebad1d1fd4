"""The errors of MCP tool calls, with a stable kind each.

Owns :class:`McpErrorKind` and :class:`McpToolError`. A tool call that fails
in any of these ways becomes an error result for the model (text
``error: mcp <kind>: …``) and one log line with the server, tool and kind;
never the call's arguments. Imports only :mod:`turnstream.errors`.
"""

from __future__ import annotations

from enum import StrEnum

from turnstream.errors import TurnstreamError

__all__ = ["McpErrorKind", "McpToolError"]


class McpErrorKind(StrEnum):
    """Why an MCP tool call failed (stable: logs and results carry it)."""

    TOOL_ERROR = "tool_error"
    """The server ran the tool and answered ``isError``."""
    TIMEOUT = "timeout"
    """No answer within the server's ``call_timeout``."""
    UNAVAILABLE = "unavailable"
    """The server could not be started or connected to (or not in time)."""
    SERVER_EXITED = "server_exited"
    """The server process or session ended during the call."""
    PROTOCOL_ERROR = "protocol_error"
    """The server answered with a JSON-RPC error or a reply that is no result."""
    INVALID_ARGUMENTS = "invalid_arguments"
    """The model's arguments are not a JSON object (not sent)."""


class McpToolError(TurnstreamError):
    """One MCP tool call failed.

    Attributes:
        server: the server's name.
        tool: the tool's name on the server.
        reason: which failure (:class:`McpErrorKind`).
        code: the JSON-RPC error code of a ``protocol_error``, else ``None``.
    """

    kind = "mcp_tool"

    def __init__(
        self,
        server: str,
        tool: str,
        reason: McpErrorKind,
        *,
        code: int | None = None,
    ) -> None:
        self.server = server
        self.tool = tool
        self.reason = reason
        self.code = code
        where = f"code {code}" if code is not None else reason.value
        super().__init__(f"mcp server {server!r} tool {tool!r}: {where}")

    def result_text(self) -> str:
        """The model-visible error result (no arguments, no server output)."""
        detail = {
            McpErrorKind.TOOL_ERROR: "the tool failed",
            McpErrorKind.TIMEOUT: "no answer in time",
            McpErrorKind.UNAVAILABLE: "the tool server is unavailable",
            McpErrorKind.SERVER_EXITED: "the tool server stopped during the call",
            McpErrorKind.PROTOCOL_ERROR: "the tool server answered with an error",
            McpErrorKind.INVALID_ARGUMENTS: "arguments must be a JSON object",
        }[self.reason]
        if self.code is not None:
            detail = f"{detail} (code {self.code})"
        return f"error: mcp {self.reason.value}: {detail}"
