"""What ``chat`` says when TLS with the broker fails for a certificate's sake.

A TLS listener of our own (a thread, certificates made here with
``cryptography``) stands in for the broker: every case fails in the TLS layer,
before Kafka's protocol starts. Pins: an expired broker certificate is named as
such, not blamed on the CA file; a broker that wants a client certificate, or
refuses the one given, says so and names the certificate settings, not
``--security-protocol``; a key password that does not decrypt the key is a
clear settings error (exit 2), not a bare ``SSLError``.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tests.support.secure import invoke

from turnstream.cli.settings import ExitCode
from turnstream.errors import ConfigError
from turnstream.kafka.security import KafkaSecurity, Secret, SecurityProtocol

NOW = dt.datetime.now(dt.UTC)


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _issue(
    where: Path,
    name: str,
    *,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None = None,
    expired: bool = False,
    password: bytes | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey, Pair]:
    key = ec.generate_private_key(ec.SECP256R1())
    not_after = NOW - dt.timedelta(days=1) if expired else NOW + dt.timedelta(days=1)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(issuer[0].subject if issuer else _name(name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(days=2))
        .not_valid_after(not_after)
    )
    if issuer is None:
        builder = builder.add_extension(
            x509.BasicConstraints(ca=True, path_length=None), critical=True
        )
    else:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    cert = builder.sign(issuer[1] if issuer else key, hashes.SHA256())
    pair = Pair(where / f"{name}.pem", where / f"{name}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password)
        if password
        else serialization.NoEncryption()
    )
    pair.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            encryption,
        )
    )
    return cert, key, pair


@dataclass(frozen=True)
class Pki:
    ca: Pair
    broker: Pair
    expired_broker: Pair
    client: Pair
    stranger: Pair  # a client certificate of a CA the broker does not trust
    locked_client: Pair  # the client's key, encrypted with "right-password"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    where = tmp_path_factory.mktemp("pki")
    ca_cert, ca_key, ca = _issue(where, "ca")
    _, _, broker = _issue(where, "broker", issuer=(ca_cert, ca_key))
    _, _, expired = _issue(where, "expired", issuer=(ca_cert, ca_key), expired=True)
    _, _, client = _issue(where, "client", issuer=(ca_cert, ca_key))
    other_cert, other_key, _ = _issue(where, "other-ca")
    _, _, stranger = _issue(where, "stranger", issuer=(other_cert, other_key))
    _, _, locked = _issue(
        where, "locked", issuer=(ca_cert, ca_key), password=b"right-password"
    )
    return Pki(ca, broker, expired, client, stranger, locked)


@dataclass
class Listener:
    port: int
    stop: threading.Event


@pytest.fixture
def listener(request: pytest.FixtureRequest, pki: Pki) -> Iterator[Listener]:
    """A TLS listener with ``request.param``'s certificate and client-cert rule."""
    server_pair, require_client = request.param
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    pair = getattr(pki, server_pair)
    context.load_cert_chain(pair.cert, pair.key)
    if require_client:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(pki.ca.cert)
    sock = socket.create_server(("127.0.0.1", 0))
    sock.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            conn.settimeout(5)
            try:
                with context.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(4096)  # a client's first request; never answered
            except (OSError, ssl.SSLError):
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield Listener(sock.getsockname()[1], stop)
    stop.set()
    thread.join(timeout=5)
    sock.close()


def _chat(port: int, *flags: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    code, output = invoke(
        [
            "chat",
            "hi",
            "--timeout",
            "3",
            "--bootstrap",
            f"127.0.0.1:{port}",
            "--security-protocol",
            "SSL",
            *flags,
        ],
        env or {},
    )
    return code, " ".join(output.split())


@pytest.mark.parametrize("listener", [("expired_broker", False)], indirect=True)
def test_an_expired_broker_certificate_is_not_blamed_on_the_ca_file(
    listener: Listener, pki: Pki
) -> None:
    """The CA verifies the certificate; it has expired: renew it, or fix the clock."""
    code, output = _chat(listener.port, "--ssl-cafile", str(pki.ca.cert))

    assert code == ExitCode.TLS, output
    assert "the broker's certificate has expired" in output, output
    assert "CA file" not in output, output
    assert "renew" in output, output


@pytest.mark.parametrize(
    ("listener", "flags", "said"),
    [
        pytest.param(
            ("broker", True),
            [],
            "the broker requires a client certificate and none is set",
            id="none-given",
        ),
        pytest.param(
            ("broker", True),
            ["--ssl-certfile", "stranger.pem", "--ssl-keyfile", "stranger.key"],
            "the broker refused this client's certificate",
            id="untrusted",
        ),
    ],
    indirect=["listener"],
)
def test_a_refused_client_certificate_names_the_certificate_settings(
    listener: Listener, pki: Pki, flags: list[str], said: str
) -> None:
    """Mutual TLS: the fix is the client certificate, not --security-protocol."""
    where = pki.ca.cert.parent
    paths = [str(where / f) if f.endswith((".pem", ".key")) else f for f in flags]
    code, output = _chat(listener.port, "--ssl-cafile", str(pki.ca.cert), *paths)

    assert code == ExitCode.TLS, output
    assert said in output, output
    assert "--ssl-certfile" in output, output
    assert "--security-protocol" not in output, output


@pytest.mark.parametrize("listener", [("broker", True)], indirect=True)
def test_a_wrong_key_password_is_a_settings_error_naming_it(
    listener: Listener, pki: Pki
) -> None:
    """The key does not decrypt with the password given: exit 2 naming the
    password's variable and the key file, never the password or a bare SSLError."""
    code, output = _chat(
        listener.port,
        "--ssl-cafile",
        str(pki.ca.cert),
        "--ssl-certfile",
        str(pki.locked_client.cert),
        "--ssl-keyfile",
        str(pki.locked_client.key),
        env={"TURNSTREAM_KAFKA_SSL_KEY_PASSWORD": "wrong-password"},
    )

    assert code == ExitCode.USAGE, output
    assert "TURNSTREAM_KAFKA_SSL_KEY_PASSWORD" in output, output
    assert "does not decrypt" in output, output
    assert str(pki.locked_client.key) in output, output
    assert "wrong-password" not in output, output
    assert output.rstrip().endswith("SSLError") is False, output


def test_the_right_key_password_loads_the_key(pki: Pki) -> None:
    """Control: the same certificate and key load with the right password."""
    security = KafkaSecurity(
        protocol=SecurityProtocol.SSL,
        ssl_cafile=pki.ca.cert,
        ssl_certfile=pki.locked_client.cert,
        ssl_keyfile=pki.locked_client.key,
        ssl_key_password=Secret("right-password"),
    )

    assert security.ssl_context() is not None


def test_an_encrypted_key_without_a_password_asks_for_it(pki: Pki) -> None:
    """No password for an encrypted key: named at once, no terminal prompt."""
    security = KafkaSecurity(
        protocol=SecurityProtocol.SSL,
        ssl_certfile=pki.locked_client.cert,
        ssl_keyfile=pki.locked_client.key,
    )

    with pytest.raises(ConfigError) as caught:
        security.ssl_context()
    assert caught.value.setting == "ssl_key_password"
    assert "is encrypted" in str(caught.value)
