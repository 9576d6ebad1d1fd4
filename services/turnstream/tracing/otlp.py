"""The OTLP exporter: span records out over OTLP/HTTP, in batches.

Owns :class:`OtlpSink`, the one module that imports the OpenTelemetry SDK
(``opentelemetry-sdk`` and ``opentelemetry-exporter-otlp-proto-http``, the
``otel`` extra). Spans are built with the ids turnstream derives (so the
actor and the journal exporter name the same spans) and handed to the SDK's
``BatchSpanProcessor``, which exports from its own thread: ``emit`` never
waits on the network.
"""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from turnstream.tracing.settings import TracingSettings
from turnstream.tracing.spans import SpanRecord

__all__ = ["OtlpSink"]

_SCOPE = InstrumentationScope("turnstream")
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_OK = Status(StatusCode.UNSET)


class OtlpSink:
    """Exports span records to an OTLP/HTTP endpoint (a :class:`SpanSink`).

    Args:
        settings: the endpoint and the ``service.name``.
        exporter: the SDK exporter to use instead (tests, other protocols).
        schedule_delay_ms: how long the batch processor gathers spans.
    """

    def __init__(
        self,
        settings: TracingSettings,
        *,
        exporter: SpanExporter | None = None,
        schedule_delay_ms: float = 1000,
    ) -> None:
        self._resource = Resource.create({"service.name": settings.service_name})
        self._processor = BatchSpanProcessor(
            exporter or OTLPSpanExporter(endpoint=settings.traces_url, timeout=10),
            schedule_delay_millis=schedule_delay_ms,
        )

    def emit(self, span: SpanRecord) -> None:
        """Queue ``span`` for export (dropped if the queue is full)."""
        context = SpanContext(
            span.trace_id, span.span_id, is_remote=False, trace_flags=_SAMPLED
        )
        parent = (
            SpanContext(
                span.trace_id, span.parent_id, is_remote=False, trace_flags=_SAMPLED
            )
            if span.parent_id
            else None
        )
        status = (
            Status(StatusCode.ERROR, span.error_type)
            if span.error_type is not None
            else _OK
        )
        self._processor.on_end(
            ReadableSpan(
                name=span.name,
                context=context,
                parent=parent,
                resource=self._resource,
                attributes=span.attributes,
                kind=SpanKind.CLIENT if span.client else SpanKind.INTERNAL,
                status=status,
                start_time=span.start_ns,
                end_time=span.end_ns,
                instrumentation_scope=_SCOPE,
            )
        )

    def flush(self, timeout_ms: int = 10_000) -> bool:
        """Export what is queued; ``False`` if it did not finish in time."""
        return self._processor.force_flush(timeout_ms)

    def close(self) -> None:
        """Export what is queued, then stop the exporter's thread."""
        self._processor.shutdown()  # type: ignore[no-untyped-call]
