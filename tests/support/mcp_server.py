"""A real MCP server for the tests, written with the official SDK.

Run as ``python tests/support/mcp_server.py stdio`` (MCP over stdin/stdout) or
``python tests/support/mcp_server.py http [--port N]`` (streamable HTTP on
127.0.0.1, an ephemeral port by default; the first line on stdout is
``PORT <n>``, printed once the socket listens). With ``--pid-dir DIR``, the
``hold`` tool writes the server's pid to ``DIR/hold.pid`` and then never
returns: a test holds a call in flight with it and kills the process mid-call.

Tools: ``add`` (two integers), ``echo`` (text), ``fail`` (raises: an
``isError`` result), ``reject`` (a JSON-RPC error), ``header`` (an HTTP
request header's value), ``pid`` (the server's pid), ``hang`` (never
returns), ``hold`` (see above).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError


def build(pid_dir: Path | None) -> MCPServer:
    server = MCPServer("turnstream-test")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def echo(text: str) -> str:
        """Echo the text back."""
        return text

    @server.tool()
    def fail(reason: str) -> str:
        """Always fails."""
        raise ToolError(f"refused: {reason}")

    @server.tool()
    def reject() -> str:
        """Answers with a JSON-RPC error, not a result."""
        raise MCPError(code=-32602, message="rejected")

    @server.tool()
    def header(name: str, ctx: Context) -> str:
        """The value of one HTTP request header ("" when absent)."""
        return (ctx.headers or {}).get(name, "")

    @server.tool()
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    @server.tool()
    async def hang() -> str:
        """Never returns."""
        await asyncio.Event().wait()
        return "never"

    @server.tool()
    async def hold() -> str:
        """Write the server's pid, then never return."""
        if pid_dir is not None:
            tmp = pid_dir / "hold.pid.tmp"
            tmp.write_text(str(os.getpid()), encoding="utf-8")
            tmp.rename(pid_dir / "hold.pid")
        await asyncio.Event().wait()
        return "never"

    return server


async def serve_http(server: MCPServer, port: int) -> None:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    runner = uvicorn.Server(config)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    await runner.serve(sockets=[sock])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=("stdio", "http"))
    parser.add_argument("--pid-dir", type=Path, default=None)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = build(args.pid_dir)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        asyncio.run(serve_http(server, args.port))
    sys.exit(0)


if __name__ == "__main__":
    main()
