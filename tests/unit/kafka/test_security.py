"""Kafka security settings: validated once, secrets never shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnstream.errors import ConfigError
from turnstream.kafka.clients import KafkaClients
from turnstream.kafka.connection import KafkaConnection
from turnstream.kafka.security import (
    KafkaSecurity,
    SaslMechanism,
    Secret,
    SecurityProtocol,
)


def test_security_secret_is_masked_everywhere() -> None:
    """A secret's value never appears in repr, str or a settings repr."""
    secret = Secret("hunter2")
    settings = KafkaSecurity(
        protocol=SecurityProtocol.SASL_PLAINTEXT,
        sasl_mechanism=SaslMechanism.SCRAM_SHA_512,
        sasl_username="svc",
        sasl_password=secret,
    )
    assert "hunter2" not in repr(secret)
    assert "hunter2" not in str(secret)
    assert "hunter2" not in repr(settings)
    assert secret.reveal() == "hunter2"


def test_security_sasl_settings_reach_every_client() -> None:
    """Producer, consumer and admin are all built from the same settings."""
    security = KafkaSecurity(
        protocol=SecurityProtocol.SASL_PLAINTEXT,
        sasl_mechanism=SaslMechanism.PLAIN,
        sasl_username="svc",
        sasl_password=Secret("pw"),
    )
    clients = KafkaClients(
        connection=KafkaConnection(bootstrap="127.0.0.1:1"), security=security
    )
    common = clients.common("x")
    assert common["security_protocol"] == "SASL_PLAINTEXT"
    assert common["sasl_mechanism"] == "PLAIN"
    assert common["sasl_plain_username"] == "svc"
    assert common["sasl_plain_password"] == "pw"
    assert "ssl_context" not in common


def test_security_tls_builds_one_ssl_context() -> None:
    """SSL gives every client an SSLContext (system CAs without a cafile)."""
    kwargs = KafkaSecurity(protocol=SecurityProtocol.SSL).client_kwargs()
    assert kwargs["security_protocol"] == "SSL"
    assert kwargs["ssl_context"] is not None


@pytest.mark.parametrize(
    ("settings", "setting"),
    [
        pytest.param(
            {"protocol": SecurityProtocol.SASL_SSL}, "sasl_mechanism", id="no-mechanism"
        ),
        pytest.param(
            {
                "protocol": SecurityProtocol.SASL_SSL,
                "sasl_mechanism": SaslMechanism.PLAIN,
                "sasl_username": "u",
            },
            "sasl_password",
            id="no-password",
        ),
        pytest.param(
            {"sasl_username": "u"}, "security_protocol", id="sasl-without-sasl-protocol"
        ),
        pytest.param(
            {"ssl_cafile": Path("/nonexistent/ca.pem")},
            "security_protocol",
            id="tls-file-without-tls",
        ),
        pytest.param(
            {"protocol": SecurityProtocol.SSL, "ssl_cafile": Path("/nonexistent/ca")},
            "ssl_cafile",
            id="missing-ca-file",
        ),
        pytest.param(
            {"protocol": SecurityProtocol.SSL, "ssl_keyfile": Path(__file__)},
            "ssl_certfile",
            id="key-without-cert",
        ),
    ],
)
def test_security_rejects_incomplete_settings(
    settings: dict[str, object], setting: str
) -> None:
    """Bad combinations fail at construction with the setting named."""
    with pytest.raises(ConfigError) as caught:
        KafkaSecurity(**settings)  # type: ignore[arg-type]
    assert caught.value.setting == setting


def test_security_unreadable_certificate_is_a_config_error(tmp_path: Path) -> None:
    """A certificate that does not load names the setting, not the password."""
    bad = tmp_path / "cert.pem"
    bad.write_text("not a certificate")
    settings = KafkaSecurity(
        protocol=SecurityProtocol.SSL,
        ssl_certfile=bad,
        ssl_key_password=Secret("topsecret"),
    )
    with pytest.raises(ConfigError) as caught:
        settings.client_kwargs()
    assert caught.value.setting == "ssl_certfile"
    assert "topsecret" not in str(caught.value)
