"""Connection settings for talking to Kafka, validated once at start-up.

Owns ``KafkaConnection`` (bootstrap servers plus the timeouts every admin and client
call runs under) and its parsing from flags and an environment mapping
(``KAFKA_BOOTSTRAP_SERVERS``; else the local broker's ``TURNSTREAM_BROKER_PORT``),
and ``ConnectStats`` (broker connection attempts, counted across clients).
Environment variables are read only from the mapping passed in.

Must not import aiokafka.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from turnstream.errors import ConfigError

__all__ = [
    "BOOTSTRAP_ENV",
    "DEFAULT_BOOTSTRAP",
    "ConnectStats",
    "KafkaConnection",
    "parse_bootstrap",
    "resolve_bootstrap",
]

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
DEFAULT_BOOTSTRAP = "127.0.0.1:19092"
_LOCAL_PORT_ENV = "TURNSTREAM_BROKER_PORT"
# host:port, where host is a name, an IPv4 address or a bracketed IPv6 address.
_SERVER = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


def parse_bootstrap(raw: str, *, setting: str = BOOTSTRAP_ENV) -> str:
    """Validate a comma-separated ``host:port`` list and return it normalised.

    Args:
        raw: e.g. ``"127.0.0.1:19092"`` or ``"kafka-1:9092, kafka-2:9092"``.
        setting: the flag or variable named in the error.

    Raises:
        ConfigError: empty, or an entry is not ``host:port`` with a valid port.
    """
    servers = [part.strip() for part in raw.split(",") if part.strip()]
    if not servers:
        raise ConfigError(setting, "no bootstrap server given (expected host:port)")
    for server in servers:
        match = _SERVER.match(server)
        if match is None or not 1 <= int(match.group(1)) <= 65535:
            raise ConfigError(setting, f"{server!r} is not host:port")
    return ",".join(servers)


def resolve_bootstrap(flag: str | None, env: Mapping[str, str]) -> str:
    """Pick the bootstrap servers: flag, else env, else the local broker.

    The order is the ``--bootstrap`` flag, then ``KAFKA_BOOTSTRAP_SERVERS``, then
    the local development broker (``127.0.0.1:$TURNSTREAM_BROKER_PORT``, port 19092
    by default).

    Raises:
        ConfigError: the chosen value is malformed.
    """
    if flag is not None and flag.strip():
        return parse_bootstrap(flag, setting="--bootstrap")
    from_env = env.get(BOOTSTRAP_ENV, "").strip()
    if from_env:
        return parse_bootstrap(from_env)
    port = env.get(_LOCAL_PORT_ENV, "").strip()
    if port:
        return parse_bootstrap(f"127.0.0.1:{port}", setting=_LOCAL_PORT_ENV)
    return DEFAULT_BOOTSTRAP


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
