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


class HttpServerProcess:
    """The test server over streamable HTTP, as a process a test may kill."""

    def __init__(self, pid_dir: Path) -> None:
        self.pid_dir = pid_dir
        self.port = 0
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        """Start it (on the port it had before, once it had one)."""
        process = subprocess.Popen(  # noqa: S603 - our own test server
            [
                sys.executable,
                str(SERVER_SCRIPT),
                "http",
                "--port",
                str(self.port),
                "--pid-dir",
                str(self.pid_dir),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.process = process
        assert process.stdout is not None
        line = process.stdout.readline()  # printed once the socket listens
        assert line.startswith("PORT "), line
        self.port = int(line.split()[1])

    def kill(self) -> None:
        """SIGKILL it and reap it."""
        process, self.process = self.process, None
        if process is not None:
            process.kill()
            process.wait(timeout=10)
            if process.stdout is not None:
                process.stdout.close()

    @property
    def server(self) -> HttpServer:
        """Where it listens."""
        return HttpServer(
            name="httpsrv", url=f"http://127.0.0.1:{self.port}/mcp", call_timeout=20.0
        )


@pytest.fixture
def http_process(tmp_path: Path) -> Iterator[HttpServerProcess]:
    """The running test server over HTTP on an ephemeral port of 127.0.0.1."""
    process = HttpServerProcess(tmp_path)
    process.start()
    try:
        yield process
    finally:
        process.kill()


@pytest.fixture
def http_server(http_process: HttpServerProcess) -> HttpServer:
    """The HTTP test server's address."""
    return http_process.server
