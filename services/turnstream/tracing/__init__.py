"""OpenTelemetry traces of turns: live from the actor, rebuilt from the journal.

Table of contents:

- ``settings`` -- :class:`TracingSettings` (``TURNSTREAM_OTEL_*`` and the
  standard ``OTEL_*`` variables);
- ``spans`` -- :class:`SpanRecord`, the :class:`SpanSink` port and the span
  builders (GenAI semantic-convention attributes) both sources share;
- ``live`` -- :class:`LiveTracer`, the runtime's ``Tracer`` for the actor;
- ``journal`` -- :class:`JournalSpans`, spans rebuilt from committed events
  (``turnstream traces export``);
- ``otlp`` -- ``OtlpSink``, the OTLP/HTTP exporter: the only module importing
  the OpenTelemetry SDK, loaded by :func:`otlp_sink` on demand (the ``otel``
  extra);
- :func:`current_traceparent_source` -- the caller's current span, for a
  client's submits (``None`` without ``opentelemetry-api``).

Adapters layer: the only package that imports ``opentelemetry``; it must not
import aiokafka, the wire codec or a composition root.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from turnstream.errors import ConfigError
from turnstream.runtime.tracing import TraceContext
from turnstream.tracing.journal import JournalSpans
from turnstream.tracing.live import LiveTracer, error_type_of
from turnstream.tracing.settings import TRACING_ENV, TracingSettings
from turnstream.tracing.spans import SpanRecord, SpanSink

if TYPE_CHECKING:
    from turnstream.tracing.otlp import OtlpSink

__all__ = [
    "TRACING_ENV",
    "JournalSpans",
    "LiveTracer",
    "SpanRecord",
    "SpanSink",
    "TracingSettings",
    "current_traceparent_source",
    "error_type_of",
    "otlp_sink",
]


def otlp_sink(settings: TracingSettings) -> OtlpSink:
    """The OTLP/HTTP exporter for ``settings``.

    Raises:
        ConfigError: the ``otel`` extra is not installed.
    """
    try:
        from turnstream.tracing.otlp import OtlpSink  # noqa: PLC0415 - the otel extra, on demand
    except ImportError as exc:
        raise ConfigError(
            "otel_endpoint",
            "tracing needs the otel extra: pip install 'turnstream[otel]'",
        ) from exc
    return OtlpSink(settings)


def current_traceparent_source() -> Callable[[], str | None] | None:
    """A function giving the caller's current span as ``traceparent``, if any.

    ``None`` when ``opentelemetry-api`` is not installed (no span can be
    current then).
    """
    try:
        from opentelemetry import trace  # noqa: PLC0415 - optional: the otel extra
    except ImportError:
        return None

    def current() -> str | None:
        context = trace.get_current_span().get_span_context()
        if not context.is_valid:
            return None
        return TraceContext(
            context.trace_id, context.span_id, context.trace_flags.sampled
        ).header()

    return current
