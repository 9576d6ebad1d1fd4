"""The gateway's token file: tenants, their session ids, and what is refused."""

from __future__ import annotations

import socket
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from turnstream.cli.main import app
from turnstream.errors import ConfigError
from turnstream.gateway import Tenant, Tenants

GOOD = """# tenants
alice alice-token-0123456789
alice alice-second-token-xyz
bob bob-token-0123456789ab  # ops
"""


def test_tokens_name_their_tenant() -> None:
    tenants = Tenants.parse(GOOD)
    alice = tenants.authenticate("alice-token-0123456789")
    assert alice == Tenant.named("alice")
    assert tenants.authenticate("alice-second-token-xyz") == alice
    assert tenants.authenticate("bob-token-0123456789ab") == Tenant.named("bob")
    assert tenants.authenticate("alice-token-012345678") is None
    assert tenants.authenticate("") is None


def test_a_tenants_session_id_is_stable_and_its_own() -> None:
    """Loops are owned through the session id: derived from the name, never shared."""
    assert Tenant.named("alice").session_id == Tenant.named("alice").session_id
    assert Tenant.named("alice").session_id != Tenant.named("bob").session_id
    assert isinstance(Tenant.named("alice").session_id, uuid.UUID)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param("", "no tokens", id="empty"),
        pytest.param("alice\n", "line 1: expected", id="no-token"),
        pytest.param("alice short\n", "16+ characters", id="short-token"),
        pytest.param("a b c\n", "line 1: expected", id="three-fields"),
        pytest.param("al/ice x123456789012345678\n", "line 1", id="bad-name"),
        pytest.param(
            "a x123456789012345678\nb x123456789012345678\n", "twice", id="shared"
        ),
    ],
)
def test_bad_token_files_are_refused_without_echoing_tokens(
    text: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        Tenants.parse(text)
    assert reason in str(refused.value)
    assert "x123456789012345678" not in str(refused.value)


def test_gateway_command_exits_2_on_a_missing_token_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["gateway", "--tokens", str(tmp_path / "none.txt"), "-b", "127.0.0.1:1"]
    )
    assert result.exit_code == 2, result.output
    assert "cannot read" in result.output


def test_gateway_command_exits_3_when_kafka_is_unreachable(tmp_path: Path) -> None:
    """The token file is fine, nothing listens: the unreachable-broker exit 3."""
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("alice alice-token-0123456789\n", encoding="utf-8")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    bootstrap = f"127.0.0.1:{port}"
    result = CliRunner().invoke(
        app, ["gateway", "--tokens", str(tokens), "-b", bootstrap, "--timeout", "5"]
    )
    assert result.exit_code == 3, result.output
    assert f"cannot reach Kafka at {bootstrap}" in result.output
    assert "alice-token" not in result.output
