"""The Kafka security options every command that talks to Kafka takes.

Owns the typer options ``--security-protocol``, ``--sasl-mechanism``,
``--sasl-username``, ``--ssl-cafile``, ``--ssl-certfile`` and ``--ssl-keyfile``
(the loop-actor deployable's flags, with the same names) and
:func:`security_flags`, which hands their values to
:meth:`~turnstream.cli.settings.KafkaTarget.resolve`. They are not parsed here:
:func:`turnstream.loop_actor.settings.parse_security` reads them, falling back
to the same ``TURNSTREAM_KAFKA_*`` variables, and the SASL and TLS key passwords
come only from the environment (``TURNSTREAM_KAFKA_SASL_PASSWORD``,
``TURNSTREAM_KAFKA_SSL_KEY_PASSWORD``), never from a flag. Must not import
aiokafka.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

import typer

from turnstream.loop_actor.settings import ENV, SECRET_ENV

__all__ = [
    "SaslMechanismOption",
    "SaslUsernameOption",
    "SecurityProtocolOption",
    "SslCafileOption",
    "SslCertfileOption",
    "SslKeyfileOption",
    "security_flags",
]

_PANEL: Final = "Kafka security"


def _option(flag: str, setting: str, text: str) -> Any:
    return typer.Option(
        flag,
        help=f"{text} (env {ENV[setting]}).",
        show_default=False,
        rich_help_panel=_PANEL,
    )


SecurityProtocolOption = Annotated[
    str | None,
    _option(
        "--security-protocol",
        "security_protocol",
        "PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL",
    ),
]
SaslMechanismOption = Annotated[
    str | None,
    _option(
        "--sasl-mechanism",
        "sasl_mechanism",
        "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; needs a SASL_* protocol",
    ),
]
SaslUsernameOption = Annotated[
    str | None,
    _option(
        "--sasl-username",
        "sasl_username",
        f"SASL user; the password is read from {SECRET_ENV['sasl_password']} only",
    ),
]
SslCafileOption = Annotated[
    str | None,
    _option(
        "--ssl-cafile",
        "ssl_cafile",
        "CA bundle (PEM) to verify the brokers with; system CAs if unset",
    ),
]
SslCertfileOption = Annotated[
    str | None,
    _option("--ssl-certfile", "ssl_certfile", "client certificate (PEM), mutual TLS"),
]
SslKeyfileOption = Annotated[
    str | None,
    _option(
        "--ssl-keyfile",
        "ssl_keyfile",
        "the client certificate's key (PEM); its password is read from "
        f"{SECRET_ENV['ssl_key_password']} only",
    ),
]


def security_flags(
    *,
    security_protocol: str | None,
    sasl_mechanism: str | None,
    sasl_username: str | None,
    ssl_cafile: str | None,
    ssl_certfile: str | None,
    ssl_keyfile: str | None,
) -> dict[str, str | None]:
    """The security flags by setting name, for ``KafkaTarget.resolve(security=…)``."""
    return {
        "security_protocol": security_protocol,
        "sasl_mechanism": sasl_mechanism,
        "sasl_username": sasl_username,
        "ssl_cafile": ssl_cafile,
        "ssl_certfile": ssl_certfile,
        "ssl_keyfile": ssl_keyfile,
    }
