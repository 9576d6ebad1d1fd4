"""Connection settings for talking to Kafka, validated once at start-up.

Owns ``KafkaConnection`` (bootstrap servers plus the timeouts every admin and client
call runs under) and ``ConnectStats`` (broker connection attempts, counted across
clients). The bootstrap lookup (``KAFKA_BOOTSTRAP_SERVERS``; else the local
broker's ``TURNSTREAM_BROKER_PORT``) is :func:`turnstream.config.resolve_bootstrap`,
re-exported here for the package's users.

Must not import aiokafka.
"""

from __future__ import annotations

from dataclasses import dataclass

from turnstream.config import (
    BOOTSTRAP_ENV,
    DEFAULT_BOOTSTRAP,
    parse_bootstrap,
    resolve_bootstrap,
)
from turnstream.errors import ConfigError

__all__ = [
    "BOOTSTRAP_ENV",
    "DEFAULT_BOOTSTRAP",
    "ConnectStats",
    "KafkaConnection",
    "parse_bootstrap",
    "resolve_bootstrap",
]


@dataclass(slots=True)
class ConnectStats:
    """Broker connection attempts of one process's clients, and the refused ones.

    Counted by the reconnect gate every client gets
    (:mod:`turnstream.kafka.backoff`); attempts it holds back are not counted.
    """

    attempts: int = 0
    failures: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaConnection:
    """Where Kafka is and how long any single call may take.

    Attributes:
        bootstrap: comma-separated ``host:port`` list.
        request_timeout: seconds for one admin/client request (also the client's
            own ``request_timeout_ms``).
        connect_timeout: seconds to establish the first connection (bootstrap).
    """

    bootstrap: str
    request_timeout: float = 15.0
    connect_timeout: float = 10.0

    def __post_init__(self) -> None:
        parse_bootstrap(self.bootstrap, setting="bootstrap")
        if self.request_timeout <= 0 or self.connect_timeout <= 0:
            raise ConfigError("timeout", "timeouts must be positive")

    @property
    def request_timeout_ms(self) -> int:
        """``request_timeout`` in milliseconds, for aiokafka constructors."""
        return int(self.request_timeout * 1000)
