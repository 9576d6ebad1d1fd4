"""Fixtures for the MCP tests: the real test server, over stdio and HTTP."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from turnstream.mcp import HttpServer, StdioServer

SERVER_SCRIPT = Path(__file__).resolve().parents[2] / "support" / "mcp_server.py"


def stdio_args(pid_dir: Path) -> tuple[str, ...]:
    """The arguments that run the test server over stdio."""
    return (str(SERVER_SCRIPT), "stdio", "--pid-dir", str(pid_dir))


@pytest.fixture
def stdio_server(tmp_path: Path) -> StdioServer:
    """The test server as a child process (``hold`` writes its pid to tmp_path)."""
    return StdioServer(
        name="testsrv",
        command=sys.executable,
        args=stdio_args(tmp_path),
        call_timeout=20.0,
    )


@pytest.fixture
def http_server() -> Iterator[HttpServer]:
    """The test server over streamable HTTP on an ephemeral port of 127.0.0.1."""
    process = subprocess.Popen(  # noqa: S603 - our own test server
        [sys.executable, str(SERVER_SCRIPT), "http"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # printed once the socket listens
        assert line.startswith("PORT "), line
        port = int(line.split()[1])
        yield HttpServer(name="httpsrv", url=f"http://127.0.0.1:{port}/mcp")
    finally:
        process.kill()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
