"""The admin path (topics apply, readiness probe, smoke) honours KafkaSecurity."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import certifi
import pytest
from tests.support.listener import (
    TLS_HANDSHAKE,
    FirstBytesListener,
    first_bytes_listener,
)

from turnstream.kafka.admin.probe import admin_clients, admin_session, check_broker
from turnstream.kafka.admin.topics import apply_topics
from turnstream.kafka.connection import KafkaConnection
from turnstream.kafka.errors import BrokerUnreachableError
from turnstream.kafka.security import (
    KafkaSecurity,
    SaslMechanism,
    Secret,
    SecurityProtocol,
)


@pytest.fixture
def listener() -> Iterator[FirstBytesListener]:
    with first_bytes_listener() as found:
        yield found


def _conn(bootstrap: str = "127.0.0.1:1") -> KafkaConnection:
    return KafkaConnection(bootstrap=bootstrap, request_timeout=3, connect_timeout=3)


def test_admin_client_kwargs_carry_sasl_over_tls() -> None:
    """SASL_SSL: protocol, mechanism, credentials and a verifying TLS context."""
    security = KafkaSecurity(
        protocol=SecurityProtocol.SASL_SSL,
        sasl_mechanism=SaslMechanism.SCRAM_SHA_512,
        sasl_username="svc",
        sasl_password=Secret("pw"),
        ssl_cafile=Path(certifi.where()),
    )

    kwargs = admin_clients(_conn(), security).common("admin")

    assert kwargs["security_protocol"] == "SASL_SSL"
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kwargs["sasl_plain_username"] == "svc"
    assert kwargs["sasl_plain_password"] == "pw"
    assert kwargs["client_id"] == "turnstream-admin"
    context = kwargs["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode is ssl.CERT_REQUIRED
    assert context.check_hostname
    assert context.get_ca_certs()  # the given CA bundle, loaded


def test_admin_client_kwargs_default_to_plaintext() -> None:
    """No security given: plaintext, no TLS context, no SASL."""
    kwargs = admin_clients(_conn()).common("admin")

    assert kwargs["security_protocol"] == "PLAINTEXT"
    assert "ssl_context" not in kwargs
    assert "sasl_mechanism" not in kwargs


@pytest.mark.parametrize(
    ("security", "tls"),
    [
        pytest.param(None, False, id="default-plaintext"),
        pytest.param(KafkaSecurity(protocol=SecurityProtocol.SSL), True, id="ssl"),
    ],
)
async def test_admin_session_connects_with_the_given_protocol(
    listener: FirstBytesListener, security: KafkaSecurity | None, tls: bool
) -> None:
    """The admin client opens with a TLS handshake exactly when told to."""
    with pytest.raises(BrokerUnreachableError):
        async with admin_session(_conn(listener.bootstrap), security=security):
            pass

    assert listener.first_bytes() == ({TLS_HANDSHAKE} if tls else {0x00})


async def test_readiness_probe_and_topics_apply_use_tls(
    listener: FirstBytesListener,
) -> None:
    """check_broker and apply_topics pass their security on to the admin client."""
    security = KafkaSecurity(protocol=SecurityProtocol.SSL)
    conn = _conn(listener.bootstrap)

    with pytest.raises(BrokerUnreachableError):
        await check_broker(conn, security=security)
    with pytest.raises(BrokerUnreachableError):
        await apply_topics(conn, [], security=security)

    assert listener.first_bytes() == {TLS_HANDSHAKE}
