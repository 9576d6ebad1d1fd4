"""Observability: structured logs, Prometheus metrics and health endpoints.

A table of contents:

- ``logs`` -- :func:`configure_logging` with :class:`JsonFormatter` (one JSON
  object per line) or :class:`TextFormatter`; extras whose names suggest
  secrets or message contents are redacted; client libraries stay at WARNING
  unless :func:`set_verbose`, their retried conditions are demoted to INFO
  (:class:`RetriableDemotion`) and their repeats rate-limited
  (:class:`RepeatFilter`); :class:`ConditionLog` logs a state change once;
- ``exporter`` -- :class:`ServiceCollector`, a Prometheus collector that reads a
  :class:`MetricsSource` (the loop-actor service's counters) at scrape time;
- ``http`` -- :class:`HealthServer`, a small asyncio HTTP server for
  ``/metrics``, ``/ready`` and ``/healthz``, bound to 127.0.0.1 by default;
- ``signals`` -- :func:`~turnstream.observability.signals.stop_on_signals`,
  the long-running deployables' SIGTERM/SIGINT (ordered stop) and SIGUSR1
  (task stacks) handlers.

Adapters layer: may import prometheus-client; must not import aiokafka, the
runtime, the wire codec or a composition root. The metrics source is a
structural protocol, so this package does not depend on ``turnstream.kafka``.
"""

from turnstream.observability.exporter import (
    HistogramSource,
    MetricsSource,
    ServiceCollector,
    service_registry,
)
from turnstream.observability.http import HealthServer
from turnstream.observability.logs import (
    ConditionLog,
    JsonFormatter,
    LogFormat,
    RepeatFilter,
    RetriableDemotion,
    TextFormatter,
    configure_logging,
    set_verbose,
)

__all__ = [
    "ConditionLog",
    "HealthServer",
    "HistogramSource",
    "JsonFormatter",
    "LogFormat",
    "MetricsSource",
    "RepeatFilter",
    "RetriableDemotion",
    "ServiceCollector",
    "TextFormatter",
    "configure_logging",
    "service_registry",
    "set_verbose",
]
