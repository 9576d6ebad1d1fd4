"""Where an MCP server is: a command to run (stdio) or a URL (streamable HTTP).

Owns :class:`StdioServer` and :class:`HttpServer`, frozen settings validated
at construction. They say nothing about a live session: that is
:class:`~turnstream.mcp.connection.McpConnection`. Imports the error tree only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from turnstream.errors import ConfigError

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_CONNECT_TIMEOUT",
    "HttpServer",
    "McpServer",
    "StdioServer",
]

DEFAULT_CALL_TIMEOUT = 60.0
"""Seconds one tool call may take (keep it below the agent's ``tool_timeout``)."""
DEFAULT_CONNECT_TIMEOUT = 15.0
"""Seconds starting or connecting to a server and its handshake may take."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")


def _check(name: str, call_timeout: float, connect_timeout: float) -> None:
    if not _NAME.fullmatch(name):
        raise ConfigError("mcp.name", "1-64 chars of [A-Za-z0-9_.-]")
    for setting, value in (
        ("call_timeout", call_timeout),
        ("connect_timeout", connect_timeout),
    ):
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(f"mcp {name}.{setting}", "must be a positive number")


@dataclass(frozen=True, slots=True, kw_only=True)
class StdioServer:
    """An MCP server run as a child process, spoken to over stdin/stdout.

    Attributes:
        name: the server's label in logs and errors.
        command: the executable.
        args: its arguments.
        env: variables set for it on top of the SDK's safe default set
            (``PATH``, ``HOME``…; the actor's own environment is not passed).
        cwd: its working directory (default: the actor's).
        stderr: a file the server's stderr is appended to (default: it is
            discarded, so what a server prints -- arguments, perhaps --
            never joins the actor's structured log).
        call_timeout: seconds one tool call may take.
        connect_timeout: seconds the start and handshake may take.
    """

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    stderr: str | None = None
    call_timeout: float = DEFAULT_CALL_TIMEOUT
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT

    def __post_init__(self) -> None:
        _check(self.name, self.call_timeout, self.connect_timeout)
        if not self.command.strip():
            raise ConfigError(f"mcp {self.name}.command", "must not be blank")
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "env", dict(self.env))


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpServer:
    """An MCP server spoken to over streamable HTTP.

    Attributes:
        name: the server's label in logs and errors.
        url: the endpoint (``http://host:port/mcp``).
        headers: sent with every request (``Authorization``, for example);
            kept out of the server's ``repr``.
        call_timeout: seconds one tool call may take.
        connect_timeout: seconds the connection and handshake may take.
    """

    name: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    call_timeout: float = DEFAULT_CALL_TIMEOUT
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT

    def __post_init__(self) -> None:
        _check(self.name, self.call_timeout, self.connect_timeout)
        if not self.url.startswith(("http://", "https://")):
            raise ConfigError(f"mcp {self.name}.url", "must be an http(s) URL")
        object.__setattr__(self, "headers", dict(self.headers))


McpServer = StdioServer | HttpServer
"""Either kind of server."""
