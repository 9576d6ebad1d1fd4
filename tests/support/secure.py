"""Helpers of the secured lane (no tests here): the broker handle, child processes.

:class:`SecureKafka` is what the ``secure_kafka`` fixture (tests/secure/conftest.py)
yields: where the SASL_SSL broker listens and how each SCRAM user reaches it, as
flags, as environment or as :class:`~turnstream.kafka.security.KafkaSecurity`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from typer.testing import CliRunner

from turnstream.cli.main import app
from turnstream.devbroker.secure import SCRAM_MECHANISM
from turnstream.kafka.connection import KafkaConnection
from turnstream.kafka.security import (
    KafkaSecurity,
    SaslMechanism,
    Secret,
    SecurityProtocol,
)

__all__ = ["PROJECT_DIR", "TURNSTREAM", "SecureKafka", "clean_env", "invoke"]

PROJECT_DIR = Path(__file__).resolve().parents[2]


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
