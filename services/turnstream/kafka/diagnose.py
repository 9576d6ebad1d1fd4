"""Why a Kafka client could not connect, and which ACL an error names.

Owns :func:`diagnose_connection` and :func:`authorization_error`. aiokafka's
bootstrap logs the real cause of a failed connection (a refused SASL login, an
untrusted certificate, a plaintext client on a TLS port) and raises only
"Unable to bootstrap"; :func:`diagnose_connection` opens one connection itself
to find that cause and returns the typed error that says what to fix
(:class:`~turnstream.kafka.errors.KafkaAuthenticationError`,
:class:`~turnstream.kafka.errors.KafkaTlsError`), or ``None`` when the broker
simply does not answer. :func:`authorization_error` turns aiokafka's
``*AuthorizationFailed`` errors into
:class:`~turnstream.kafka.errors.KafkaAuthorizationError` with the principal,
the permission and the resource.

Part of ``turnstream.kafka`` (the only aiokafka importer); must not import the
runtime or the wire codec. Never puts a password into a message.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import struct
from typing import Final

from aiokafka.conn import create_conn
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    KafkaError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
    UnsupportedSaslMechanismError,
)
from aiokafka.protocol.metadata import MetadataRequest

from turnstream.errors import TransportError
from turnstream.kafka.connection import KafkaConnection
from turnstream.kafka.errors import (
    KafkaAuthenticationError,
    KafkaAuthorizationError,
    KafkaTlsError,
)
from turnstream.kafka.security import KafkaSecurity

__all__ = [
    "AUTHORIZATION_ERRORS",
    "CLUSTER",
    "authorization_error",
    "diagnose_connection",
    "principal",
]

CLUSTER: Final = "kafka-cluster"
"""The name of Kafka's one Cluster resource."""

AUTHORIZATION_ERRORS: Final = (
    TopicAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
    ClusterAuthorizationFailedError,
)
# Per refusal: the resource type it names, the permission it needs there and the
# resource's fixed name (``None``: the permission the call asks for, the name the
# error carries).
_REFUSALS: Final[dict[type[KafkaError], tuple[str, str | None, str | None]]] = {
    TopicAuthorizationFailedError: ("Topic", None, None),
    GroupAuthorizationFailedError: ("Group", "Read", None),
    TransactionalIdAuthorizationFailed: ("TransactionalId", "Write", None),
    ClusterAuthorizationFailedError: ("Cluster", None, CLUSTER),
}

_SECURITY_FLAGS: Final = "--security-protocol / TURNSTREAM_KAFKA_SECURITY_PROTOCOL"
# Seconds a probe waits for the broker's TLS alert after the handshake.
_ALERT_WAIT_S: Final = 1.0
# OpenSSL's X509_V_ERR_CERT_HAS_EXPIRED and X509_V_ERR_CERT_NOT_YET_VALID.
_EXPIRED: Final = frozenset({9, 10})
# TLS alerts a server sends about the client's certificate (mutual TLS).
_CLIENT_CERTIFICATE_ALERTS: Final = frozenset(
    {
        "TLSV13_ALERT_CERTIFICATE_REQUIRED",
        "SSLV3_ALERT_BAD_CERTIFICATE",
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
        "SSLV3_ALERT_CERTIFICATE_EXPIRED",
        "SSLV3_ALERT_CERTIFICATE_REVOKED",
        "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE",
        "TLSV1_ALERT_UNKNOWN_CA",
        "TLSV1_ALERT_ACCESS_DENIED",
    }
)
_CREDENTIALS: Final = (
    "check --sasl-username / TURNSTREAM_KAFKA_SASL_USERNAME and "
    "TURNSTREAM_KAFKA_SASL_PASSWORD"
)


def principal(security: KafkaSecurity | None) -> str:
    """The Kafka principal these settings log in as (``User:NAME``)."""
    if security is None:
        return "this client's principal"
    if security.sasl_username:
        return f"User:{security.sasl_username}"
    if security.ssl_certfile is not None:
        return "the client certificate's principal"
    return "User:ANONYMOUS"


def authorization_error(
    exc: BaseException,
    *,
    security: KafkaSecurity | None,
    operation: str,
    permission: str,
    resource: str | None = None,
) -> KafkaAuthorizationError | None:
    """The typed authorisation error for an aiokafka ``*AuthorizationFailed``.

    Args:
        exc: what aiokafka raised.
        security: whose principal was refused (``None``: not known here).
        operation: what was being done (``write the loop state``).
        permission: the ACL operation the call needs on that resource
            (``Write``, ``Read``, ``Describe``; the cluster and transactional-id
            cases name their own).
        resource: the topic, group or transactional id when aiokafka's error
            does not carry it.

    Returns:
        ``None`` if ``exc`` is no authorisation failure.
    """
    if isinstance(exc, KafkaAuthorizationError):
        return exc
    for refusal, (resource_type, needed, fixed) in _REFUSALS.items():
        if isinstance(exc, refusal):
            return KafkaAuthorizationError(
                principal=principal(security),
                permission=needed or permission,
                resource_type=resource_type,
                resource=fixed or _named(exc) or resource or "?",
                operation=operation,
            )
    return None


def _named(exc: BaseException) -> str | None:
    # aiokafka passes the topic set, group or transactional id as the argument.
    if not exc.args:
        return None
    first = exc.args[0]
    if isinstance(first, set | frozenset | list | tuple):
        return ", ".join(sorted(str(x) for x in first)) or None
    text = str(first)
    return text if text and not text.startswith("<") else None


async def diagnose_connection(  # noqa: PLR0911 - one answer per failure class
    conn: KafkaConnection, security: KafkaSecurity
) -> TransportError | None:
    """Connect to the first bootstrap server once and classify what fails.

    Returns:
        The authentication or TLS error that explains a failed bootstrap, or
        ``None`` (the broker does not answer, or nothing wrong was found).
    """
    server = conn.bootstrap.split(",")[0].strip()
    host, _, port_text = server.rpartition(":")
    host, port = host.strip("[]"), int(port_text)
    kwargs = security.client_kwargs()
    connection = None
    try:
        async with asyncio.timeout(conn.connect_timeout):
            connection = await create_conn(
                host, port, request_timeout_ms=conn.request_timeout_ms, **kwargs
            )
            # A listener that wants SASL answers ApiVersions, then hangs up.
            await connection.send(MetadataRequest([]))
    except SaslAuthenticationFailed as exc:
        return _login_refused(conn, security, str(exc))
    except UnsupportedSaslMechanismError:
        mechanism = security.sasl_mechanism.value if security.sasl_mechanism else "?"
        return KafkaAuthenticationError(
            conn.bootstrap,
            username=security.sasl_username or "?",
            mechanism=mechanism,
            detail=f"the listener does not enable {mechanism}",
            fix="use the mechanism the listener enables "
            "(--sasl-mechanism / TURNSTREAM_KAFKA_SASL_MECHANISM)",
        )
    except ssl.SSLCertVerificationError as exc:
        return _untrusted(conn, security, exc)
    except ssl.SSLError as exc:
        if exc.reason in _CLIENT_CERTIFICATE_ALERTS:
            return _client_certificate_refused(conn, security, exc)
        return KafkaTlsError(
            conn.bootstrap,
            problem="listener_not_tls",
            detail=f"the handshake failed ({exc.reason or type(exc).__name__})",
            fix="this listener may not speak TLS; check " + _SECURITY_FLAGS,
        )
    except ConnectionRefusedError:
        return None
    except (KafkaConnectionError, ConnectionError) as exc:
        if isinstance(exc.__cause__, ssl.SSLError):
            return await diagnose_connection_error(conn, security, exc.__cause__)
        return await _closed(conn, security, host, port)
    except (TimeoutError, OSError, KafkaError):
        return None
    finally:
        if connection is not None:
            connection.close()
    return None


async def diagnose_connection_error(
    conn: KafkaConnection, security: KafkaSecurity, exc: ssl.SSLError
) -> TransportError:
    """The TLS error for an ``ssl`` exception raised under a connection error."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return _untrusted(conn, security, exc)
    if exc.reason in _CLIENT_CERTIFICATE_ALERTS:
        return _client_certificate_refused(conn, security, exc)
    return KafkaTlsError(
        conn.bootstrap,
        problem="handshake_failed",
        detail=exc.reason or type(exc).__name__,
        fix="check " + _SECURITY_FLAGS,
    )


def _login_refused(
    conn: KafkaConnection, security: KafkaSecurity, detail: str
) -> KafkaAuthenticationError:
    mechanism = security.sasl_mechanism.value if security.sasl_mechanism else "?"
    reason = "invalid credentials" if "credentials" in detail else "login refused"
    return KafkaAuthenticationError(
        conn.bootstrap,
        username=security.sasl_username or "?",
        mechanism=mechanism,
        detail=f"{reason} (a wrong password or an unknown user)",
        fix=_CREDENTIALS,
    )


def _untrusted(
    conn: KafkaConnection, security: KafkaSecurity, exc: ssl.SSLCertVerificationError
) -> KafkaTlsError:
    message = str(exc.verify_message or exc.reason or exc)
    if exc.verify_code in _EXPIRED:
        # The CA verified the signature; the dates are what fails.
        return KafkaTlsError(
            conn.bootstrap,
            problem="certificate_expired",
            detail=f"the broker's certificate has expired or is not valid yet "
            f"({message})",
            fix="renew the broker's certificate (or check this machine's clock)",
        )
    if "hostname" in message.lower() or "ip address mismatch" in message.lower():
        return KafkaTlsError(
            conn.bootstrap,
            problem="hostname_mismatch",
            detail=f"the broker's certificate does not name the host ({message})",
            fix="connect by a host name or address the certificate lists "
            "(--bootstrap), or reissue the certificate",
        )
    where = (
        f"the CA file {security.ssl_cafile} does not"
        if security.ssl_cafile
        else "no CA file is set and the system CAs do not"
    )
    return KafkaTlsError(
        conn.bootstrap,
        problem="untrusted_certificate",
        detail=f"{where} verify the broker's certificate ({message})",
        fix="point --ssl-cafile / TURNSTREAM_KAFKA_SSL_CAFILE at the CA that "
        "signed the broker's certificate",
    )


def _client_certificate_refused(
    conn: KafkaConnection, security: KafkaSecurity, exc: ssl.SSLError
) -> KafkaTlsError:
    """The broker's TLS alert was about this client's certificate (mutual TLS)."""
    reason = str(exc.reason or type(exc).__name__)
    if security.ssl_certfile is None:
        return KafkaTlsError(
            conn.bootstrap,
            problem="client_certificate_required",
            detail=f"the broker requires a client certificate and none is set "
            f"({reason})",
            fix="set --ssl-certfile and --ssl-keyfile (TURNSTREAM_KAFKA_SSL_CERTFILE, "
            "TURNSTREAM_KAFKA_SSL_KEYFILE) to a certificate the broker trusts",
        )
    return KafkaTlsError(
        conn.bootstrap,
        problem="client_certificate_refused",
        detail=f"the broker refused this client's certificate "
        f"{security.ssl_certfile} ({reason})",
        fix="give --ssl-certfile a certificate signed by a CA the broker trusts "
        "(its ssl.truststore), not expired, with --ssl-keyfile its key",
    )


async def _closed(
    conn: KafkaConnection, security: KafkaSecurity, host: str, port: int
) -> TransportError | None:
    """The broker hung up: tell a TLS listener from one that wants SASL."""
    if security.uses_tls:
        alert = await _tls_alert(host, port, security, conn.connect_timeout)
        if alert is not None and alert.reason in _CLIENT_CERTIFICATE_ALERTS:
            return _client_certificate_refused(conn, security, alert)
    if not security.uses_tls:
        if await _answers_with_tls_alert(host, port, conn.connect_timeout):
            return KafkaTlsError(
                conn.bootstrap,
                problem="listener_is_tls",
                detail=f"the listener speaks TLS and this client {security.protocol}",
                fix="use SSL or SASL_SSL (" + _SECURITY_FLAGS + ")",
            )
        return None
    if not await _speaks_tls(host, port, conn.connect_timeout):
        return None
    if security.sasl_mechanism is None:
        return KafkaTlsError(
            conn.bootstrap,
            problem="listener_needs_sasl",
            detail="the TLS handshake worked, then the broker closed the connection "
            "(the listener expects a SASL login)",
            fix="use SASL_SSL with --sasl-mechanism and --sasl-username (password "
            "in TURNSTREAM_KAFKA_SASL_PASSWORD)",
        )
    return None


# A plaintext ApiVersions v0 request (correlation id 1, client id "turnstream").
_CLIENT_ID: Final = b"turnstream"
_API_VERSIONS: Final = struct.pack(">hhih", 18, 0, 1, len(_CLIENT_ID)) + _CLIENT_ID
_TLS_ALERT: Final = b"\x15\x03"


async def _answers_with_tls_alert(host: str, port: int, seconds: float) -> bool:
    """Whether a plaintext request to ``host:port`` is answered by a TLS alert.

    A TLS listener answers bytes that are no TLS record with an alert record
    (content type 21, version 3.x); a plaintext Kafka listener with a response.
    """
    try:
        async with asyncio.timeout(seconds):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(struct.pack(">i", len(_API_VERSIONS)) + _API_VERSIONS)
                await writer.drain()
                first = await reader.read(len(_TLS_ALERT))
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except (TimeoutError, OSError):
        return False
    return first == _TLS_ALERT


async def _tls_alert(
    host: str, port: int, security: KafkaSecurity, seconds: float
) -> ssl.SSLError | None:
    """The TLS error a request over this client's TLS settings ends with, if any.

    With TLS 1.3 a broker checks the client's certificate after the client
    considers the handshake done, so its alert only arrives with the first
    read; aiokafka reports that as a closed connection and drops the alert.
    """
    context = security.ssl_context()
    try:
        async with asyncio.timeout(seconds):
            reader, writer = await asyncio.open_connection(
                host, port, ssl=context, server_hostname=host
            )
        try:
            # A Kafka listener never speaks first: anything read is the alert
            # (sending first could hit the closed socket before it arrives).
            async with asyncio.timeout(min(seconds, _ALERT_WAIT_S)):
                await reader.read(1)
        finally:
            writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await writer.wait_closed()
    except ssl.SSLError as exc:
        return exc
    except (TimeoutError, OSError):
        return None
    return None


async def _speaks_tls(host: str, port: int, seconds: float) -> bool:
    """Whether ``host:port`` completes a TLS handshake (certificate not checked)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        async with asyncio.timeout(seconds):
            _, writer = await asyncio.open_connection(host, port, ssl=context)
    except (TimeoutError, OSError):
        return False
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError):
        await writer.wait_closed()
    return True
