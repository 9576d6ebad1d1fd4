"""CLI behaviour that needs no broker: configuration errors and unreachable Kafka."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from turnstream.cli.main import app


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """A CLI runner that ignores any broker configured in the environment."""
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    for name in list(os.environ):
        if name.startswith("TURNSTREAM_KAFKA_"):
            monkeypatch.delenv(name)
    return CliRunner()


def test_topics_apply_unreachable_broker_exits_3(
    runner: CliRunner, closed_port: int
) -> None:
    """No broker: exit code 3 (as every command) and one clear line, no traceback."""
    result = runner.invoke(
        app,
        [
            "topics",
            "apply",
            "--bootstrap",
            f"127.0.0.1:{closed_port}",
            "--timeout",
            "5",
        ],
    )
    assert result.exit_code == 3, result.output
    assert f"cannot reach Kafka at 127.0.0.1:{closed_port}" in result.output
    assert "start one with `turnstream broker up`" in result.output
    assert "Traceback" not in result.output


def test_topics_apply_bad_bootstrap_exits_2(runner: CliRunner) -> None:
    """A malformed --bootstrap is a configuration error (exit 2)."""
    result = runner.invoke(app, ["topics", "apply", "--bootstrap", "no-port-here"])
    assert result.exit_code == 2
    assert "not host:port" in result.output


def test_topics_apply_bad_env_bootstrap_exits_2(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A malformed KAFKA_BOOTSTRAP_SERVERS names the variable."""
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "nonsense")
    result = runner.invoke(app, ["topics", "apply"])
    assert result.exit_code == 2
    assert "KAFKA_BOOTSTRAP_SERVERS" in result.output


@pytest.mark.parametrize(
    ("args", "setting"),
    [
        pytest.param(
            ["--security-protocol", "SSL", "--ssl-cafile", "/nonexistent/ca.pem"],
            "ssl_cafile",
            id="missing-ca-file",
        ),
        pytest.param(["--security-protocol", "QUIC"], "security", id="bad-protocol"),
        pytest.param(
            ["--security-protocol", "SASL_SSL", "--sasl-mechanism", "PLAIN"],
            "sasl_username",
            id="sasl-incomplete",
        ),
    ],
)
def test_topics_apply_bad_security_flags_exit_2(
    runner: CliRunner, args: list[str], setting: str
) -> None:
    """Security flags are parsed like the loop actor's: a bad one is a usage error."""
    result = runner.invoke(
        app, ["topics", "apply", "--bootstrap", "127.0.0.1:1", *args]
    )
    assert result.exit_code == 2, result.output
    assert setting in result.output
    assert "cannot reach Kafka" not in result.output


def test_topics_apply_invalid_file_exits_2(runner: CliRunner, tmp_path: Path) -> None:
    """An invalid topic file is reported before any connection attempt."""
    bad = tmp_path / "topics.yaml"
    bad.write_text("topics: [{name: 'bad name', key: k}]\n")
    result = runner.invoke(
        app, ["topics", "apply", "--file", str(bad), "--bootstrap", "127.0.0.1:1"]
    )
    assert result.exit_code == 2
    assert "legal topic name" in result.output


def test_broker_status_reports_stopped(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """status prints 'stopped' and exits 1 when no broker runs for the checkout."""
    (tmp_path / "infra" / "kafka").mkdir(parents=True)
    (tmp_path / "infra" / "kafka" / "pom.xml").write_text("<project/>")
    monkeypatch.setenv("TURNSTREAM_PROJECT_DIR", str(tmp_path))
    monkeypatch.delenv("TURNSTREAM_BROKER_PORT", raising=False)
    monkeypatch.delenv("TURNSTREAM_CONTROLLER_PORT", raising=False)
    result = runner.invoke(app, ["broker", "status"])
    assert result.exit_code == 1
    assert "stopped" in result.output
    assert "127.0.0.1:19092" in result.output
