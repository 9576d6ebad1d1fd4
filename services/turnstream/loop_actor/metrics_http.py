"""The loop actor's health endpoint: Prometheus ``/metrics`` plus ``/ready``.

Owns :class:`MetricsEndpoint` (where it listens, checked at start-up) and
:func:`serve_health`, which exports a service's
:class:`~turnstream.kafka.actor.metrics.ServiceMetrics` (turns started, steps,
terminals by kind, commit latency, consumer lag, delta drops …) through
:class:`~turnstream.observability.HealthServer`. ``/ready`` answers 200 once
the service has joined its group and restored every assigned partition, 503
before and during a rebalance. Port 0 turns the endpoint off. Part of the
composition root; no aiokafka.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final

from turnstream.errors import ConfigError
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.observability import HealthServer, service_registry
from turnstream.observability.http import DEFAULT_HOST

__all__ = ["DEFAULT_METRICS_PORT", "MetricsEndpoint", "serve_health"]

DEFAULT_METRICS_PORT: Final = 9464


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricsEndpoint:
    """Where the health endpoint listens.

    Attributes:
        host: the bind address (loopback by default).
        port: the TCP port; 0 turns the endpoint off.
    """

    host: str = "127.0.0.1"
    port: int = DEFAULT_METRICS_PORT

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError("--metrics-port", f"{self.port} is not a TCP port")
        if not self.host.strip():
            raise ConfigError("--metrics-host", "must not be empty")

    @property
    def enabled(self) -> bool:
        """Whether to serve at all."""
        return self.port != 0


@asynccontextmanager
async def serve_health(
    metrics: ServiceMetrics, *, host: str = DEFAULT_HOST, port: int
) -> AsyncIterator[HealthServer | None]:
    """Serve ``metrics`` on ``host:port`` while the block runs (port 0: off).

    Raises:
        ConfigError: the port cannot be bound (in use, or not allowed).
    """
    if port == 0:
        yield None
        return
    server = HealthServer(
        service_registry(metrics), lambda: metrics.ready, host=host, port=port
    )
    try:
        await server.start()
    except OSError as exc:
        raise ConfigError(
            "--metrics-port", f"cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from None
    try:
        yield server
    finally:
        await server.close()
