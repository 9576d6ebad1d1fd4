"""The gateway deployable's settings: declared once, read once.

Owns :data:`SETTINGS` (the gateway's own settings: name, flags, variable,
default, help; ``turnstream gateway`` generates its options from them and from
the Kafka ones of :mod:`turnstream.config`, and ``docs/settings.md`` lists
them), :class:`GatewayConfig` and :func:`parse_settings`, flags over the
environment, validated once. Reads the environment only from the mapping passed
in; imports neither starlette nor uvicorn (the ``gateway`` extra), so the CLI
can list the options without it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from turnstream.config import (
    BOOTSTRAP,
    SECURITY,
    TIMEOUT,
    TOPIC_PREFIX,
    TOPIC_SUFFIX,
    Setting,
    SettingsReader,
    resolve_bootstrap,
)
from turnstream.errors import ConfigError
from turnstream.kafka.clients import KafkaClients
from turnstream.kafka.connection import KafkaConnection
from turnstream.kafka.security import KafkaSecurity, parse_security
from turnstream.kafka.topology import TopicNames

__all__ = ["KAFKA", "SETTINGS", "GatewayConfig", "parse_settings"]


def _gateway(
    name: str,
    text: str,
    *,
    default: str | int | float | None = None,
    kind: type[object] = str,
    minimum: float | None = None,
    required: bool = False,
) -> Setting:
    # Every gateway setting is named alike: --max-body, TURNSTREAM_GATEWAY_MAX_BODY.
    return Setting(
        name=name,
        env=f"TURNSTREAM_GATEWAY_{name.upper()}",
        flags=(f"--{name.replace('_', '-')}",),
        default=default,
        help=text,
        kind=kind,
        minimum=minimum,
        required=required,
    )


SETTINGS: Final[tuple[Setting, ...]] = (
    _gateway(
        "tokens",
        "The token file: one 'TENANT TOKEN' pair per line (16+ chars).",
        required=True,
    ),
    _gateway("host", "Listen here.", default="127.0.0.1"),
    _gateway("port", "HTTP port.", default=8080, kind=int),
    _gateway(
        "max_body",
        "The largest request body accepted, in bytes (413 above).",
        default=64 * 1024,
        kind=int,
    ),
    _gateway(
        "stream_queue",
        "Events one event stream may have waiting before it is dropped.",
        default=2000,
        kind=int,
    ),
    _gateway(
        "keepalive",
        "Seconds of silence before an event stream sends a comment.",
        default=15.0,
        kind=float,
        minimum=0.1,
    ),
)
"""The gateway's own settings, in ``--help`` order."""

KAFKA: Final = (
    BOOTSTRAP,
    TIMEOUT,
    # An isolated topic set is named by the environment only here.
    dataclasses.replace(TOPIC_PREFIX, flags=()),
    dataclasses.replace(TOPIC_SUFFIX, flags=()),
    *SECURITY,
)
"""The Kafka settings the gateway reads."""

_BY_NAME: Final = {s.name: s for s in (*SETTINGS, *KAFKA)}


@dataclass(frozen=True, slots=True, kw_only=True)
class GatewayConfig:
    """Everything ``turnstream gateway`` is configured with, validated.

    Attributes:
        tokens: the token file.
        host: the listen address.
        port: the HTTP port.
        max_body: the largest request body accepted, in bytes.
        stream_queue: events one stream may have waiting before it is dropped.
        keepalive: seconds of silence before a stream sends a comment.
        connection: the Kafka bootstrap servers and per-call timeout.
        topics: the topic names (with the environment's prefix and suffix).
        security: Kafka security for every client.
    """

    tokens: Path
    host: str = "127.0.0.1"
    port: int = 8080
    max_body: int = 64 * 1024
    stream_queue: int = 2000
    keepalive: float = 15.0
    connection: KafkaConnection
    topics: TopicNames = dataclasses.field(default_factory=TopicNames)
    security: KafkaSecurity = dataclasses.field(default_factory=KafkaSecurity)

    @property
    def bootstrap(self) -> str:
        """The bootstrap servers."""
        return self.connection.bootstrap

    def clients(self) -> KafkaClients:
        """The gateway's Kafka clients (all with ``security``)."""
        return KafkaClients(
            connection=self.connection,
            security=self.security,
            client_id="turnstream-gateway",
        )


def parse_settings(
    env: Mapping[str, str], flags: Mapping[str, object] | None = None
) -> GatewayConfig:
    """Read the settings: ``flags`` (by setting name) over the environment.

    Raises:
        ConfigError: an invalid setting (the message names it).
    """
    given = flags or {}
    read = SettingsReader(_BY_NAME, given, env)
    tokens = read.text("tokens")
    if tokens is None:
        raise ConfigError("--tokens", "required (the token file)")
    timeout = read.number("timeout", float)
    seconds = float(TIMEOUT.default if timeout is None else timeout)  # type: ignore[arg-type]
    kwargs: dict[str, object] = {
        name: value
        for name, kind in (
            ("port", int),
            ("max_body", int),
            ("stream_queue", int),
            ("keepalive", float),
        )
        if (value := read.number(name, kind)) is not None
    }
    if (host := read.text("host")) is not None:
        kwargs["host"] = host
    return GatewayConfig(
        tokens=Path(tokens),
        connection=KafkaConnection(
            bootstrap=resolve_bootstrap(read.text("bootstrap"), env),
            request_timeout=seconds,
            connect_timeout=seconds,
        ),
        topics=TopicNames.with_affixes(
            prefix=read.text("topic_prefix") or "",
            suffix=read.text("topic_suffix") or "",
        ),
        security=parse_security(given, env),
        **kwargs,  # type: ignore[arg-type]
    )
