"""The secured development broker's configuration (no JVM)."""

from __future__ import annotations

from pathlib import Path

from turnstream.devbroker import BrokerSettings
from turnstream.devbroker.properties import server_properties
from turnstream.devbroker.secure import SecureBrokerFiles, secure_broker_settings


def test_secure_settings_enforce_acls_over_sasl_ssl_only(tmp_path: Path) -> None:
    """One SASL_SSL client listener, SCRAM-SHA-512, StandardAuthorizer, no ACL no
    access, admin the only super user; passwords stay out of repr."""
    base = BrokerSettings(
        project_dir=tmp_path,
        libs_dir=tmp_path,
        state_dir=tmp_path / "s",
        client_port=19492,
        controller_port=19493,
    )
    files = SecureBrokerFiles(
        keystore=tmp_path / "k.p12",
        truststore=tmp_path / "t.p12",
        ca_file=tmp_path / "ca.pem",
        store_password="store-secret",
    )

    settings = secure_broker_settings(
        base, files, users={"admin": "admin-secret", "actor": "actor-secret"}
    )
    props = server_properties(settings)

    assert props["listeners"] == (
        "SASL_SSL://127.0.0.1:19492,CONTROLLER://127.0.0.1:19493"
    )
    assert props["advertised.listeners"] == "SASL_SSL://127.0.0.1:19492"
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert props["authorizer.class.name"].endswith("StandardAuthorizer")
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["super.users"] == "User:admin"
    assert "PLAINTEXT:" not in props["listener.security.protocol.map"].replace(
        "SASL_PLAINTEXT", ""
    )
    assert [(m, n) for m, n, _ in settings.scram_users] == [
        ("SCRAM-SHA-512", "admin"),
        ("SCRAM-SHA-512", "actor"),
    ]
    for secret in ("admin-secret", "actor-secret", "store-secret"):
        assert secret not in repr(settings)
        assert secret not in repr(files)
