"""Kafka security settings: one object that every client is built from.

Owns :class:`KafkaSecurity` (security protocol, SASL mechanism and credentials,
TLS files); its passwords are :class:`~turnstream.config.Secret` (re-exported
here), never shown in a ``repr``, a log line or an error.
:meth:`KafkaSecurity.client_kwargs` turns the settings into the keyword
arguments every aiokafka client takes (producer, consumer and admin alike),
building the :class:`ssl.SSLContext` once.

Part of ``turnstream.kafka``; it does not import aiokafka itself (the TLS
context is built with the standard library), and it must not import the
runtime or the wire codec. :func:`parse_security` reads the settings from
flags and an environment mapping passed in (the passwords from the environment
only); nothing here reads ``os.environ``.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from turnstream.config import SECURITY, Secret, SettingsReader
from turnstream.errors import ConfigError

__all__ = [
    "KafkaSecurity",
    "SaslMechanism",
    "Secret",
    "SecurityProtocol",
    "parse_security",
]

_BY_NAME = {s.name: s for s in SECURITY}


class SecurityProtocol(StrEnum):
    """How clients talk to the brokers (Kafka's ``security.protocol``)."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"


class SaslMechanism(StrEnum):
    """The SASL mechanisms turnstream supports (username and password based)."""

    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaSecurity:
    """Security settings shared by every Kafka client of a process.

    Attributes:
        protocol: ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``.
        sasl_mechanism: required with a ``SASL_*`` protocol.
        sasl_username: required with a ``SASL_*`` protocol.
        sasl_password: required with a ``SASL_*`` protocol (masked in ``repr``).
        ssl_cafile: CA bundle to verify brokers with (system CAs if unset).
        ssl_certfile: client certificate (PEM) for mutual TLS.
        ssl_keyfile: the client certificate's private key (PEM).
        ssl_key_password: the private key's password (masked in ``repr``).

    Raises:
        ConfigError: an incomplete or inconsistent combination (checked at
            construction, so a bad setting fails at start-up).
    """

    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password: Secret | None = None
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_key_password: Secret | None = None

    def __post_init__(self) -> None:
        sasl = self.protocol in (
            SecurityProtocol.SASL_PLAINTEXT,
            SecurityProtocol.SASL_SSL,
        )
        tls = self.protocol in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)
        if sasl:
            if self.sasl_mechanism is None:
                raise ConfigError("sasl_mechanism", f"required with {self.protocol}")
            if not self.sasl_username:
                raise ConfigError("sasl_username", f"required with {self.protocol}")
            if not self.sasl_password:
                raise ConfigError("sasl_password", f"required with {self.protocol}")
        elif self.sasl_mechanism or self.sasl_username or self.sasl_password:
            raise ConfigError(
                "security_protocol", "SASL settings need SASL_PLAINTEXT or SASL_SSL"
            )
        tls_files = (self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile)
        if not tls and (any(tls_files) or self.ssl_key_password):
            raise ConfigError("security_protocol", "TLS files need SSL or SASL_SSL")
        if self.ssl_keyfile and not self.ssl_certfile:
            raise ConfigError("ssl_certfile", "required with ssl_keyfile")
        for name, path in (
            ("ssl_cafile", self.ssl_cafile),
            ("ssl_certfile", self.ssl_certfile),
            ("ssl_keyfile", self.ssl_keyfile),
        ):
            if path is not None and not path.is_file():
                raise ConfigError(name, f"no readable file at {path}")

    @property
    def uses_tls(self) -> bool:
        """Whether connections are encrypted."""
        return self.protocol in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for the brokers, or ``None`` without TLS.

        Raises:
            ConfigError: a certificate, key or CA file cannot be loaded (the
                message names the setting, never a password).
        """
        if not self.uses_tls:
            return None
        try:
            context = ssl.create_default_context(
                ssl.Purpose.SERVER_AUTH,
                cafile=str(self.ssl_cafile) if self.ssl_cafile else None,
            )
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError("ssl_cafile", type(exc).__name__) from None
        if self.ssl_certfile is not None:
            self._load_certificate(context)
        return context

    def _load_certificate(self, context: ssl.SSLContext) -> None:
        """Load the client certificate and key into ``context``.

        Raises:
            ConfigError: naming what is wrong (the key's password, a key that
                is not the certificate's, a file that is no PEM), never the
                password.
        """
        assert self.ssl_certfile is not None  # noqa: S101 - the caller checked
        keyfile = self.ssl_keyfile or self.ssl_certfile
        encrypted = _encrypted_key(keyfile)
        given = self.ssl_key_password.reveal() if self.ssl_key_password else None
        if encrypted and given is None:
            raise ConfigError(
                "ssl_key_password",
                f"the private key {keyfile} is encrypted: set "
                "TURNSTREAM_KAFKA_SSL_KEY_PASSWORD",
            )
        try:
            context.load_cert_chain(
                str(self.ssl_certfile),
                str(self.ssl_keyfile) if self.ssl_keyfile else None,
                # A callable, so OpenSSL never prompts on a terminal.
                password=lambda: given or "",
            )
        except (OSError, ssl.SSLError) as exc:
            reason = getattr(exc, "reason", None) or type(exc).__name__
            if encrypted:
                raise ConfigError(
                    "ssl_key_password",
                    f"TURNSTREAM_KAFKA_SSL_KEY_PASSWORD does not decrypt the "
                    f"private key {keyfile} ({reason})",
                ) from None
            if reason == "KEY_VALUES_MISMATCH":
                raise ConfigError(
                    "ssl_keyfile",
                    f"the private key {keyfile} is not the key of the certificate "
                    f"{self.ssl_certfile}",
                ) from None
            raise ConfigError(
                "ssl_certfile",
                f"cannot load the certificate {self.ssl_certfile} with the key "
                f"{keyfile} ({reason})",
            ) from None

    def client_kwargs(self) -> dict[str, object]:
        """Keyword arguments for any aiokafka client (producer, consumer, admin).

        Raises:
            ConfigError: the TLS files cannot be loaded.
        """
        kwargs: dict[str, object] = {"security_protocol": self.protocol.value}
        context = self.ssl_context()
        if context is not None:
            kwargs["ssl_context"] = context
        if self.sasl_mechanism is not None:
            kwargs["sasl_mechanism"] = self.sasl_mechanism.value
            kwargs["sasl_plain_username"] = self.sasl_username
            kwargs["sasl_plain_password"] = (
                self.sasl_password.reveal() if self.sasl_password else None
            )
        return kwargs


def parse_security(
    flags: Mapping[str, object], env: Mapping[str, str]
) -> KafkaSecurity:
    """Kafka security settings: each from its flag, else its variable.

    Args:
        flags: flag values by setting name (``security_protocol``,
            ``sasl_mechanism``, ``sasl_username``, ``ssl_cafile``, ``ssl_certfile``,
            ``ssl_keyfile``); see :func:`turnstream.config.lookup`.
        env: the environment (``TURNSTREAM_KAFKA_*``; the SASL and TLS key
            passwords are read from here only).

    Raises:
        ConfigError: an unknown protocol or mechanism, or an incomplete or
            inconsistent combination (the message names the setting, never a
            secret's value).
    """
    read = SettingsReader(_BY_NAME, flags, env)

    def path(name: str) -> Path | None:
        raw = read.text(name)
        return Path(raw) if raw else None

    protocol = read.text("security_protocol")
    mechanism = read.text("sasl_mechanism")
    try:
        protocol_value = (
            SecurityProtocol(protocol.upper())
            if protocol
            else SecurityProtocol.PLAINTEXT
        )
        mechanism_value = SaslMechanism(mechanism.upper()) if mechanism else None
    except ValueError as exc:
        raise ConfigError("security", f"unknown protocol or mechanism: {exc}") from None
    return KafkaSecurity(
        protocol=protocol_value,
        sasl_mechanism=mechanism_value,
        sasl_username=read.text("sasl_username"),
        sasl_password=read.secret("sasl_password"),
        ssl_cafile=path("ssl_cafile"),
        ssl_certfile=path("ssl_certfile"),
        ssl_keyfile=path("ssl_keyfile"),
        ssl_key_password=read.secret("ssl_key_password"),
    )


def _encrypted_key(path: Path) -> bool:
    """Whether the PEM file ``path`` holds an encrypted private key."""
    try:
        head = path.read_bytes()
    except OSError:
        return False
    return b"ENCRYPTED PRIVATE KEY" in head or b"Proc-Type: 4,ENCRYPTED" in head
