"""The turn commands' error paths: exit codes and one-line messages, no broker."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from tests.support.listener import TLS_HANDSHAKE, first_bytes_listener
from typer.testing import CliRunner

from turnstream.cli.failures import explain
from turnstream.cli.main import app
from turnstream.cli.settings import ExitCode
from turnstream.errors import ConfigError, TransportError
from turnstream.kafka.errors import (
    BrokerUnreachableError,
    ConfigMismatch,
    KafkaAuthenticationError,
    KafkaAuthorizationError,
    KafkaTlsError,
    TopicAlterError,
    TopicConfigMismatchError,
    TopicCreateError,
)


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> Iterator[CliRunner]:
    for name in (
        "KAFKA_BOOTSTRAP_SERVERS",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "TURNSTREAM_MODEL",
        "TURNSTREAM_TOPIC_PREFIX",
        "TURNSTREAM_TOPIC_SUFFIX",
    ):
        monkeypatch.delenv(name, raising=False)
    for name in list(os.environ):
        if name.startswith("TURNSTREAM_KAFKA_"):
            monkeypatch.delenv(name)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield CliRunner()
    # actor run / demo configure logging for the process: put it back.
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


KAFKA_COMMANDS = [
    pytest.param(["chat", "hello"], id="chat"),
    pytest.param(["tail", "--loop", str(uuid.uuid4())], id="tail"),
    pytest.param(["actor", "run", "--metrics-port", "0"], id="actor-run"),
    pytest.param(["demo"], id="demo"),
    pytest.param(["topics", "apply"], id="topics-apply"),
    pytest.param(["smoke"], id="smoke"),
    pytest.param(["analytics", "run", "--no-web"], id="analytics-run"),
    pytest.param(
        ["respond", str(uuid.uuid4()), "--loop", str(uuid.uuid4())], id="respond"
    ),
    pytest.param(["loops", "list"], id="loops-list"),
    pytest.param(["loops", "show", str(uuid.uuid4())], id="loops-show"),
    pytest.param(["dlq", "tail"], id="dlq-tail"),
]


@pytest.mark.parametrize("args", KAFKA_COMMANDS)
def test_unreachable_broker_exits_3_with_the_hint(
    runner: CliRunner, closed_port: int, args: list[str]
) -> None:
    """Nothing listening: exit 3, the address, how to start a broker; no traceback."""
    bootstrap = f"127.0.0.1:{closed_port}"

    result = runner.invoke(app, [*args, "--bootstrap", bootstrap, "--timeout", "5"])

    assert result.exit_code == 3, result.output
    assert f"cannot reach Kafka at {bootstrap}" in result.output
    assert "start one with `turnstream broker up`" in result.output
    assert "Traceback" not in result.output
    assert len([line for line in result.output.splitlines() if "error:" in line]) == 1


@pytest.mark.parametrize("args", KAFKA_COMMANDS)
def test_every_kafka_command_connects_with_the_security_flags(
    runner: CliRunner, args: list[str]
) -> None:
    """--security-protocol SSL reaches the command's first Kafka call (a TLS
    handshake), and the failure is still the unreachable-broker exit 3."""
    with first_bytes_listener() as listener:
        result = runner.invoke(
            app,
            [
                *args,
                "--bootstrap",
                listener.bootstrap,
                "--timeout",
                "5",
                "--security-protocol",
                "SSL",
            ],
        )

    assert result.exit_code == 3, result.output
    assert listener.first_bytes() == {TLS_HANDSHAKE}


@pytest.mark.parametrize("args", KAFKA_COMMANDS)
def test_sasl_flags_with_the_password_in_the_environment_connect(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """SASL_SSL flags plus TURNSTREAM_KAFKA_SASL_PASSWORD are validated together:
    the command starts a TLS handshake instead of exiting 2, and the password
    shows nowhere in its output."""
    monkeypatch.setenv("TURNSTREAM_KAFKA_SASL_PASSWORD", "pw-only-in-env")
    with first_bytes_listener() as listener:
        result = runner.invoke(
            app,
            [
                *args,
                "--bootstrap",
                listener.bootstrap,
                "--timeout",
                "5",
                "--security-protocol",
                "SASL_SSL",
                "--sasl-mechanism",
                "SCRAM-SHA-512",
                "--sasl-username",
                "actor",
            ],
        )

    assert result.exit_code == 3, result.output
    assert listener.first_bytes() == {TLS_HANDSHAKE}
    assert "pw-only-in-env" not in result.output


def test_security_settings_also_come_from_the_environment(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TURNSTREAM_KAFKA_SECURITY_PROTOCOL (the loop actor's variable) works too."""
    monkeypatch.setenv("TURNSTREAM_KAFKA_SECURITY_PROTOCOL", "ssl")
    with first_bytes_listener() as listener:
        result = runner.invoke(
            app, ["chat", "hi", "--bootstrap", listener.bootstrap, "--timeout", "5"]
        )

    assert result.exit_code == 3, result.output
    assert listener.first_bytes() == {TLS_HANDSHAKE}


@pytest.mark.parametrize("args", KAFKA_COMMANDS)
def test_incomplete_security_settings_exit_2(
    runner: CliRunner, closed_port: int, args: list[str]
) -> None:
    """SASL without credentials is a usage error, found before Kafka is tried."""
    result = runner.invoke(
        app,
        [
            *args,
            "--bootstrap",
            f"127.0.0.1:{closed_port}",
            "--security-protocol",
            "SASL_SSL",
        ],
    )

    assert result.exit_code == 2, result.output
    assert "sasl_mechanism" in result.output
    assert "cannot reach Kafka" not in result.output


_MISMATCH = ConfigMismatch("t", "cleanup.policy", "delete", "compact")
_SAFE = ConfigMismatch("t", "max.message.bytes", "8454144", "1048588")


@pytest.mark.parametrize(
    ("error", "code", "fragment"),
    [
        pytest.param(ConfigError("--loop", "bad"), ExitCode.USAGE, "--loop", id="cfg"),
        pytest.param(
            BrokerUnreachableError("h:1", "connection failed"),
            ExitCode.UNREACHABLE,
            "cannot reach Kafka at h:1",
            id="unreachable",
        ),
        pytest.param(
            TransportError("send", "timed out", retriable=True),
            ExitCode.UNREACHABLE,
            "cannot reach Kafka at h:1",
            id="timeout",
        ),
        pytest.param(
            TopicConfigMismatchError((_MISMATCH,)),
            ExitCode.FAILED,
            "fix or recreate",
            id="mismatch",
        ),
        pytest.param(
            TopicConfigMismatchError((_SAFE,)),
            ExitCode.FAILED,
            "turnstream topics apply --alter",
            id="safe-mismatch",
        ),
        pytest.param(
            TopicCreateError(
                "t", 38, "InvalidReplicationFactorError", "", retriable=False
            ),
            ExitCode.FAILED,
            "topic_create_failed",
            id="create-refused",
        ),
        pytest.param(
            TopicAlterError("t", "not confirmed", retriable=True),
            ExitCode.FAILED,
            "topic_alter_failed",
            id="alter-failed",
        ),
        pytest.param(
            TransportError("round trip", "read back offset 2", retriable=False),
            ExitCode.FAILED,
            "round trip failed",
            id="refused",
        ),
        pytest.param(
            KafkaAuthenticationError(
                "h:1",
                username="actor",
                mechanism="SCRAM-SHA-512",
                detail="invalid credentials",
                fix="check the password",
            ),
            ExitCode.AUTHENTICATION,
            "refused the SCRAM-SHA-512 login of user 'actor'",
            id="login-refused",
        ),
        pytest.param(
            KafkaTlsError(
                "h:1", problem="hostname_mismatch", detail="not for h", fix="reissue"
            ),
            ExitCode.TLS,
            "TLS with Kafka at h:1 failed: not for h; reissue [kafka_tls]",
            id="tls",
        ),
        pytest.param(
            KafkaAuthorizationError(
                principal="User:actor",
                permission="Write",
                resource_type="Topic",
                resource="turnstream.loops.v1",
                operation="commit on partition 0",
            ),
            ExitCode.AUTHORIZATION,
            "User:actor lacks Write on Topic turnstream.loops.v1",
            id="acl-denied",
        ),
    ],
)
def test_explain_maps_errors_to_the_shared_exit_codes(
    error: Exception, code: ExitCode, fragment: str
) -> None:
    """2 usage/config, 3 unreachable, 1 mismatch or a failed operation, 4 login
    refused, 5 TLS failed, 6 ACL denied."""
    message, found = explain(error, "h:1")

    assert found is code
    assert fragment in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["chat"], "Missing argument", id="chat-no-text"),
        pytest.param(["tail"], "Missing option", id="tail-no-loop"),
        pytest.param(["chat", "--loop", "loop-1", "hi"], "--loop", id="bad-loop-id"),
        pytest.param(
            ["actor", "run", "--metrics-port", "-1"], "--metrics-port", id="bad-port"
        ),
        pytest.param(["chat", "hi", "--timeout", "0"], "--timeout", id="bad-timeout"),
        pytest.param(
            ["chat", "hi", "--bootstrap", "no-port"],
            "not host:port",
            id="bad-bootstrap",
        ),
        pytest.param(["actor", "run", "--log-format", "xml"], "--log-format", id="log"),
        pytest.param(["actor", "run", "--log-level", "LOUD"], "--log-level", id="lvl"),
        pytest.param(["demo", "--frobnicate"], "No such option", id="unknown-flag"),
        pytest.param(
            ["analytics", "run", "--log-format", "xml"], "--log-format", id="analytics"
        ),
    ],
)
def test_bad_flags_exit_2(runner: CliRunner, args: list[str], message: str) -> None:
    """Usage errors: exit 2 with a message naming the problem."""
    result = runner.invoke(app, args)

    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["actor", "run", "--model", "gpt-4"], "--model", id="bare-name"),
        pytest.param(["demo", "--model", "mistral:large"], "--model", id="provider"),
        pytest.param(
            ["demo", "--model", "openai:gpt-4o-mini"], "OPENAI_API_KEY", id="no-key"
        ),
        pytest.param(
            ["actor", "run", "--model", "anthropic:claude-x"],
            "ANTHROPIC_API_KEY",
            id="no-anthropic-key",
        ),
        pytest.param(
            ["demo", "--model", "openai:m", "--base-url", "ftp://x"],
            "--base-url",
            id="bad-url",
        ),
    ],
)
def test_bad_model_spec_exits_2_before_touching_kafka(
    runner: CliRunner, closed_port: int, args: list[str], message: str
) -> None:
    """A bad model spec is a usage error (2), found before Kafka is tried (not 3)."""
    result = runner.invoke(app, [*args, "--bootstrap", f"127.0.0.1:{closed_port}"])

    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "cannot reach Kafka" not in result.output


def _commands(group: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    # typer vendors its own click: walk the tree by shape, not by class.
    for name, command in group.commands.items():
        path = f"{prefix} {name}".strip()
        if hasattr(command, "commands"):
            yield from _commands(command, path)
        else:
            yield path, command


@pytest.mark.parametrize(
    "path",
    ["actor run", "chat", "tail", "demo", "analytics run", "topics apply", "smoke"],
)
def test_every_option_of_the_turn_commands_has_help(path: str) -> None:
    """--help explains each option (no option without help text)."""
    commands = dict(_commands(typer.main.get_group(app)))
    command = commands[path]

    undocumented = [
        p.name
        for p in command.params
        if p.param_type_name == "option" and not (p.help or "").strip()
    ]
    assert undocumented == []
    assert (command.help or "").strip()


@pytest.mark.parametrize("args", [["demo", "--help"], ["actor", "run", "--help"]])
def test_help_names_the_environment_variables(
    runner: CliRunner, args: list[str]
) -> None:
    """--help lists the options with their environment variables."""
    result = runner.invoke(app, args, env={"COLUMNS": "200"})

    assert result.exit_code == 0
    assert "TURNSTREAM_MODEL" in result.output
    assert "--bootstrap" in result.output


def test_ctrl_c_exits_130_without_an_error_line() -> None:
    """Ctrl-C stops a following command (tail, chat): exit 130, no 'error:' line."""
    import typer as _typer

    from turnstream.cli.failures import exit_on_errors

    with pytest.raises(_typer.Exit) as done, exit_on_errors():
        raise KeyboardInterrupt
    assert done.value.exit_code == 130
