"""Helpers of the secured lane (no tests here): the broker handle, child processes.

:class:`SecureKafka` is what the ``secure_kafka`` fixture (tests/secure/conftest.py)
yields: where the SASL_SSL broker listens and how each SCRAM user reaches it, as
flags, as environment or as :class:`~turnstream.kafka.security.KafkaSecurity`.
:func:`child` and :func:`run` start ``turnstream`` commands as processes,
:class:`ChildLog` reads a child's output as it comes, :func:`exit_within`
waits for a child to end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka.protocol.admin import DeleteAclsRequest
from tests.support.eventually import assert_eventually
from typer.testing import CliRunner

from turnstream.cli.main import app
from turnstream.devbroker.secure import SCRAM_MECHANISM
from turnstream.kafka.admin.acls import Acl
from turnstream.kafka.admin.probe import admin_session, bounded
from turnstream.kafka.connection import KafkaConnection
from turnstream.kafka.security import (
    KafkaSecurity,
    SaslMechanism,
    Secret,
    SecurityProtocol,
)

__all__ = [
    "PROJECT_DIR",
    "TIMEOUT",
    "TURNSTREAM",
    "ChildLog",
    "SecureKafka",
    "child",
    "clean_env",
    "exit_within",
    "free_port",
    "invoke",
    "run",
]

PROJECT_DIR = Path(__file__).resolve().parents[2]
TIMEOUT = 60.0
"""Seconds a child process or a wait of the lane may take at most."""


@dataclass(frozen=True, slots=True)
class SecureKafka:
    """The running secured broker and how each user reaches it.

    Attributes:
        bootstrap: ``127.0.0.1:PORT`` (the certificate's only name).
        ca_file: the PEM clients verify the broker with.
        passwords: SCRAM password by user (hidden from ``repr``).
    """

    bootstrap: str
    ca_file: Path
    passwords: Mapping[str, str] = field(repr=False)

    @property
    def port(self) -> int:
        """The SASL_SSL listener's port."""
        return int(self.bootstrap.rsplit(":", 1)[1])

    def connection(self) -> KafkaConnection:
        """Where the broker is, with the lane's timeouts."""
        return KafkaConnection(
            bootstrap=self.bootstrap, request_timeout=15, connect_timeout=15
        )

    def security(self, user: str) -> KafkaSecurity:
        """SASL_SSL + SCRAM-SHA-512 as ``user``."""
        return KafkaSecurity(
            protocol=SecurityProtocol.SASL_SSL,
            sasl_mechanism=SaslMechanism.SCRAM_SHA_512,
            sasl_username=user,
            sasl_password=Secret(self.passwords[user]),
            ssl_cafile=self.ca_file,
        )

    def flags(self, user: str) -> list[str]:
        """The command-line flags for ``user`` (the password is never a flag)."""
        return [
            "--bootstrap",
            self.bootstrap,
            "--security-protocol",
            "SASL_SSL",
            "--sasl-mechanism",
            SCRAM_MECHANISM,
            "--sasl-username",
            user,
            "--ssl-cafile",
            str(self.ca_file),
        ]

    def password_env(self, user: str) -> dict[str, str]:
        """The one variable a flags-only command still needs."""
        return {"TURNSTREAM_KAFKA_SASL_PASSWORD": self.passwords[user]}

    def env(self, user: str) -> dict[str, str]:
        """Everything for ``user`` in the environment, no flags needed."""
        return {
            "KAFKA_BOOTSTRAP_SERVERS": self.bootstrap,
            "TURNSTREAM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "TURNSTREAM_KAFKA_SASL_MECHANISM": SCRAM_MECHANISM,
            "TURNSTREAM_KAFKA_SASL_USERNAME": user,
            "TURNSTREAM_KAFKA_SSL_CAFILE": str(self.ca_file),
            **self.password_env(user),
        }


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without Kafka or topic settings, plus ``extra``.

    Child processes import this checkout's sources (``services`` first).
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TURNSTREAM_", "KAFKA_"))
    }
    env["PYTHONPATH"] = os.pathsep.join(
        [str(PROJECT_DIR / "services"), env.get("PYTHONPATH", "")]
    ).rstrip(os.pathsep)
    env["PYTHONUNBUFFERED"] = "1"
    return {**env, **extra}


TURNSTREAM = [sys.executable, "-m", "turnstream.cli.main"]
"""How a test runs the ``turnstream`` console script as a child process."""


def invoke(args: list[str], env: Mapping[str, str]) -> tuple[int, str]:
    """Run a ``turnstream`` command in-process with exactly ``env`` for Kafka.

    Every other ``TURNSTREAM_*`` and ``KAFKA_*`` variable is unset meanwhile.
    """
    scoped: dict[str, str | None] = {
        k: None for k in os.environ if k.startswith(("TURNSTREAM_", "KAFKA_"))
    }
    scoped.update(env)
    result = CliRunner().invoke(app, args, env=scoped, catch_exceptions=False)
    return result.exit_code, result.output


def free_port() -> int:
    """A TCP port free on 127.0.0.1 just now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def child(
    args: list[str], env: Mapping[str, str]
) -> AsyncIterator[asyncio.subprocess.Process]:
    """A ``turnstream`` child process; SIGTERM (then SIGKILL) when done."""
    proc = await asyncio.create_subprocess_exec(
        *TURNSTREAM,
        *args,
        env=dict(env),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                async with asyncio.timeout(30):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def run(args: list[str], env: Mapping[str, str]) -> tuple[int, str]:
    """Run a ``turnstream`` command as a child process; its code and output."""
    async with child(args, env) as proc:
        async with asyncio.timeout(TIMEOUT):
            out, _ = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode()


class ChildLog:
    """A child's output read as it comes: the lines so far and when each came."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.lines: list[tuple[float, str]] = []
        self._proc = proc
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self._proc.stdout is not None
        loop = asyncio.get_running_loop()
        while line := await self._proc.stdout.readline():
            self.lines.append((loop.time(), line.decode().rstrip("\n")))

    async def first(self, text: str, timeout: float = TIMEOUT) -> float:
        """When the first line containing ``text`` came (waits ``timeout`` for it)."""

        async def seen() -> float:
            for at, line in self.lines:
                if text in line:
                    return at
            raise AssertionError(f"no line with {text!r} yet:\n{self.text[-3000:]}")

        return await assert_eventually(seen, timeout=timeout, interval=0.05)

    async def end(self) -> str:
        """The whole output once the child closed it."""
        await self._task
        return self.text

    @property
    def text(self) -> str:
        """Every line so far."""
        return "\n".join(line for _, line in self.lines)


async def exit_within(
    proc: asyncio.subprocess.Process, seconds: float, log: ChildLog | None = None
) -> float:
    """Wait (at most ``TIMEOUT``) for ``proc`` to exit; how long it took."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(TIMEOUT):
            await proc.wait()
    took = loop.time() - started
    said = "" if log is None else log.text[-3000:]
    assert proc.returncode is not None, f"still running after {took:.0f} s:\n{said}"
    assert took <= seconds, f"exited after {took:.1f} s, expected <= {seconds} s"
    return took


async def revoke(kafka: SecureKafka, acl: Acl) -> None:
    """Delete one grant, as the super user (exactly that grant must exist)."""
    admin = kafka.security("admin")
    async with admin_session(kafka.connection(), security=admin) as client:
        request = DeleteAclsRequest(
            acl.resource_type.value,
            acl.resource,
            acl.pattern.value,
            acl.principal,
            "*",
            acl.operation.value,
            3,  # ALLOW
        )
        response = await bounded(
            client._send_request(request), seconds=TIMEOUT, operation="delete ACLs"
        )
    for result in response.filter_responses:
        assert result[0] == 0, result
        assert len(result[2]) == 1, result
