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
    lookup,
    resolve_bootstrap,
)
from turnstream.errors import ConfigError
from turnstream.kafka.clients import KafkaClients
from turnstream.kafka.connection import KafkaConnection
from turnstream.kafka.security import KafkaSecurity, parse_security
from turnstream.kafka.topology import TopicNames

__all__ = ["KAFKA", "SETTINGS", "GatewayConfig", "parse_settings"]

SETTINGS: Final[tuple[Setting, ...]] = (
    Setting(
        name="tokens",
        env="TURNSTREAM_GATEWAY_TOKENS",
        flags=("--tokens",),
        help="The token file: one 'TENANT TOKEN' pair per line (16+ chars).",
        required=True,
    ),
    Setting(
        name="host",
        env="TURNSTREAM_GATEWAY_HOST",
        flags=("--host",),
        default="127.0.0.1",
        help="Listen here.",
    ),
    Setting(
        name="port",
        env="TURNSTREAM_GATEWAY_PORT",
        flags=("--port",),
        default=8080,
        help="HTTP port.",
        kind=int,
    ),
    Setting(
        name="max_body",
        env="TURNSTREAM_GATEWAY_MAX_BODY",
        flags=("--max-body",),
        default=64 * 1024,
        help="The largest request body accepted, in bytes (413 above).",
        kind=int,
    ),
    Setting(
        name="stream_queue",
        env="TURNSTREAM_GATEWAY_STREAM_QUEUE",
        flags=("--stream-queue",),
        default=2000,
        help="Events one event stream may have waiting before it is dropped.",
        kind=int,
    ),
    Setting(
        name="keepalive",
        env="TURNSTREAM_GATEWAY_KEEPALIVE",
        flags=("--keepalive",),
        default=15.0,
        help="Seconds of silence before an event stream sends a comment.",
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

    def raw(name: str) -> object | None:
        return lookup(_BY_NAME[name], given, env)

    def number(name: str, kind: type[int] | type[float]) -> int | float | None:
        value = raw(name)
        if value is None:
            return None
        text = value if isinstance(value, (int, float)) else str(value)
        try:
            return kind(text)
        except ValueError:
            raise ConfigError(name, f"{value!r} is not a number") from None

    tokens = raw("tokens")
    if tokens is None:
        raise ConfigError("--tokens", "required (the token file)")
    timeout = number("timeout", float)
    seconds = float(TIMEOUT.default if timeout is None else timeout)  # type: ignore[arg-type]
    kwargs: dict[str, object] = {
        name: value
        for name, kind in (
            ("port", int),
            ("max_body", int),
            ("stream_queue", int),
            ("keepalive", float),
        )
        if (value := number(name, kind)) is not None
    }
    if (host := raw("host")) is not None:
        kwargs["host"] = str(host)
    return GatewayConfig(
        tokens=Path(str(tokens)),
        connection=KafkaConnection(
            bootstrap=resolve_bootstrap(_text(raw("bootstrap")), env),
            request_timeout=seconds,
            connect_timeout=seconds,
        ),
        topics=TopicNames.with_affixes(
            prefix=_text(raw("topic_prefix")) or "",
            suffix=_text(raw("topic_suffix")) or "",
        ),
        security=parse_security(given, env),
        **kwargs,  # type: ignore[arg-type]
    )


def _text(value: object | None) -> str | None:
    return None if value is None else str(value)
