"""The OTLP exporter: span records out over OTLP/HTTP, in batches.

Owns :class:`OtlpSink`, the one module that imports the OpenTelemetry SDK
(``opentelemetry-sdk`` and ``opentelemetry-exporter-otlp-proto-http``, the
``otel`` extra). Spans are built with the ids turnstream derives (so the
actor and the journal exporter name the same spans) and exported by the SDK's
OTLP/HTTP exporter from a thread of their own: ``emit`` never waits on the
network.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from opentelemetry.exporter.otlp.proto.common._internal import (
    _encode_instrumentation_scope,
    _encode_resource,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import (
    ResourceSpans,
    ScopeSpans,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.proto.trace.v1.trace_pb2 import SpanFlags as PbSpanFlags
from opentelemetry.proto.trace.v1.trace_pb2 import Status as PbStatus
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from turnstream.tracing.settings import TracingSettings
from turnstream.tracing.spans import AttributeValue, SpanRecord

__all__ = ["OtlpSink", "encode_request"]

_log = logging.getLogger(__name__)
_SCOPE = InstrumentationScope("turnstream")
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_OK = Status(StatusCode.UNSET)


_FLAGS = PbSpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_CLIENT = PbSpan.SpanKind.SPAN_KIND_CLIENT
_INTERNAL = PbSpan.SpanKind.SPAN_KIND_INTERNAL
_STATUS_UNSET = PbStatus(code=PbStatus.STATUS_CODE_UNSET)


def _value(value: AttributeValue) -> AnyValue:
    # bool before int: a bool is an int.
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    return AnyValue(double_value=value)


def _pb_span(span: SpanRecord) -> PbSpan:
    return PbSpan(
        trace_id=span.trace_id.to_bytes(16, "big"),
        span_id=span.span_id.to_bytes(8, "big"),
        parent_span_id=span.parent_id.to_bytes(8, "big") if span.parent_id else b"",
        name=span.name,
        kind=_CLIENT if span.client else _INTERNAL,
        start_time_unix_nano=span.start_ns,
        end_time_unix_nano=span.end_ns,
        attributes=[
            KeyValue(key=k, value=_value(v)) for k, v in span.attributes.items()
        ],
        status=_STATUS_UNSET
        if span.error_type is None
        else PbStatus(code=PbStatus.STATUS_CODE_ERROR, message=span.error_type),
        flags=_FLAGS,
    )


def encode_request(
    spans: list[SpanRecord], resource: Resource
) -> ExportTraceServiceRequest:
    """The OTLP export request of ``spans`` (one resource, turnstream's scope).

    The same message the SDK's encoder makes of the same spans as SDK
    objects, built from the records directly: no ``ReadableSpan`` per span.
    """
    return ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=_encode_resource(resource),
                scope_spans=[
                    ScopeSpans(
                        scope=_encode_instrumentation_scope(_SCOPE),
                        spans=[_pb_span(s) for s in spans],
                        schema_url=_SCOPE.schema_url or "",
                    )
                ],
                schema_url=resource.schema_url,
            )
        ]
    )


class _Resource(Resource):
    """A resource that hashes once.

    The OTLP encoder hashes the resource of every span (to group spans by
    resource), each time serializing its attributes to JSON: measured, a
    third of the encoding's CPU.
    """

    def __init__(self, base: Resource) -> None:
        super().__init__(base.attributes, base.schema_url)
        self._hash = super().__hash__()

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return super().__eq__(other)


class OtlpSink:
    """Exports span records to an OTLP/HTTP endpoint (a :class:`SpanSink`).

    ``emit`` only appends to a list under a lock: the actor's event loop pays
    nothing else per span. One worker thread wakes every ``schedule_delay_ms``
    (or on :meth:`flush`), turns what gathered into SDK spans and hands them to
    the exporter in batches. A worker per span batch instead of the SDK's
    ``BatchSpanProcessor`` (which builds each span on the caller's thread and
    signals its worker per batch of 512): measured, half the per-span CPU on
    the actor's side (``bench/tracing_bench.py``).

    Args:
        settings: the endpoint and the ``service.name``.
        exporter: the SDK exporter to use instead (tests, other protocols).
        schedule_delay_ms: how long spans gather before an export.
        max_queue: spans kept waiting at most; beyond it new ones are dropped
            (and counted in :attr:`dropped`).
        max_batch: spans per export call.
    """

    def __init__(
        self,
        settings: TracingSettings,
        *,
        exporter: SpanExporter | None = None,
        schedule_delay_ms: float = 1000,
        max_queue: int = 65_536,
        max_batch: int = 512,
    ) -> None:
        self._resource = _Resource(
            Resource.create({"service.name": settings.service_name})
        )
        self._exporter = exporter or OTLPSpanExporter(
            endpoint=settings.traces_url, timeout=10
        )
        # Our own exporter's HTTP client takes the encoded request, so the
        # worker encodes the records directly (measured: the SDK objects per
        # span were most of the worker's CPU). A given exporter gets SDK spans.
        client = getattr(self._exporter, "_client", None) if exporter is None else None
        self._post = getattr(client, "export", None)
        self._delay = schedule_delay_ms / 1000
        self._max_queue = max_queue
        self._max_batch = max_batch
        self._pending: list[SpanRecord] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._done = threading.Condition()
        self._requested = 0
        self._served = 0
        self._failed = False
        self._closing = False
        self.dropped = 0
        self._worker = threading.Thread(
            target=self._run, name="turnstream-otlp", daemon=True
        )
        self._worker.start()

    def emit(self, span: SpanRecord) -> None:
        """Queue ``span`` for export (dropped if the queue is full)."""
        with self._lock:
            if len(self._pending) < self._max_queue:
                self._pending.append(span)
            else:
                self.dropped += 1

    def flush(self, timeout_ms: int = 10_000) -> bool:
        """Export what is queued now; ``False`` if not confirmed in time.

        ``False`` also when an export since the previous flush failed.
        """
        with self._done:
            self._requested += 1
            wanted = self._requested
            self._wake.set()
            served = self._done.wait_for(
                lambda: self._served >= wanted, timeout_ms / 1000
            )
            failed, self._failed = self._failed, False
        return served and not failed

    def close(self) -> None:
        """Export what is queued, then stop the worker and the exporter."""
        self.flush()
        self._closing = True
        self._wake.set()
        self._worker.join(timeout=10)
        self._exporter.shutdown()

    def _run(self) -> None:
        while not self._closing:
            self._wake.wait(self._delay)
            self._wake.clear()
            with self._done:
                wanted = self._requested
            ok = self._export()
            with self._done:
                self._failed = self._failed or not ok
                self._served = wanted
                self._done.notify_all()

    def _export(self) -> bool:
        with self._lock:
            batch, self._pending = self._pending, []
        ok = True
        for first in range(0, len(batch), self._max_batch):
            chunk = batch[first : first + self._max_batch]
            if self._post is not None:
                ok = self._send(self._post, chunk) and ok
                continue
            spans = [self._sdk(s) for s in chunk]
            try:
                result = self._exporter.export(spans)
            except Exception:  # noqa: BLE001 - the exporter logs why; spans are lost, the actor is not
                ok = False
                continue
            ok = ok and result is SpanExportResult.SUCCESS
        return ok

    def _send(self, post: Callable[[bytes], Any], spans: list[SpanRecord]) -> bool:
        try:
            data = encode_request(spans, self._resource).SerializePartialToString()
            return bool(post(data).success)
        except Exception as exc:  # noqa: BLE001 - spans are lost, the actor is not
            _log.warning("span export failed", extra={"error": type(exc).__name__})
            return False

    def _sdk(self, span: SpanRecord) -> ReadableSpan:
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
        return ReadableSpan(
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
