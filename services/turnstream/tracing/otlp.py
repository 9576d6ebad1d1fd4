"""The OTLP exporter: span records out over OTLP/HTTP, in batches.

Owns :class:`OtlpSink`, the one module that imports the OpenTelemetry SDK
(``opentelemetry-sdk`` and ``opentelemetry-exporter-otlp-proto-http``, the
``otel`` extra). Spans carry the ids turnstream derives (so the actor and
the journal exporter name the same spans); ``emit`` encodes each one
(:mod:`turnstream.tracing.protobuf`) and a thread of their own posts them in
batches through the SDK's OTLP/HTTP exporter's client: ``emit`` never waits
on the network.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, cast

from opentelemetry.exporter.otlp.proto.common._internal import (
    _encode_instrumentation_scope,
    _encode_resource,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from turnstream.tracing.protobuf import encode_request, encode_span, encode_spans
from turnstream.tracing.settings import TracingSettings
from turnstream.tracing.spans import SpanRecord

__all__ = ["OtlpSink"]

_log = logging.getLogger(__name__)
_SCOPE = InstrumentationScope("turnstream")
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_OK = Status(StatusCode.UNSET)


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

    ``emit`` encodes the span (a few us) and appends the bytes to a list under
    a lock. One worker thread wakes every ``schedule_delay_ms`` (or on
    :meth:`flush`) and posts what gathered in batches (a given ``exporter``
    gets SDK spans instead, built by the worker). Bytes wait, not span
    records: bytes are nothing the garbage collector tracks, while a record
    waiting a second for the worker outlives two collections and lands in the
    oldest generation, bringing the next full pass over the actor's heap
    closer. A worker per span batch instead of the SDK's
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
        self._encoded_resource = _encode_resource(
            self._resource
        ).SerializePartialToString()
        self._encoded_scope = _encode_instrumentation_scope(
            _SCOPE
        ).SerializePartialToString()
        self._delay = schedule_delay_ms / 1000
        self._max_queue = max_queue
        self._max_batch = max_batch
        # Encoded spans for our own client; records for a given exporter.
        self._pending: list[bytes | SpanRecord] = []
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
        item: bytes | SpanRecord = span
        if self._post is not None:
            try:
                item = encode_span(span)
            except Exception as exc:  # noqa: BLE001 - a span is lost, the actor is not
                _log.warning(
                    "span encoding failed", extra={"error": type(exc).__name__}
                )
                self.dropped += 1
                return
        with self._lock:
            if len(self._pending) < self._max_queue:
                self._pending.append(item)
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
                ok = self._send(self._post, cast(list[bytes], chunk)) and ok
                continue
            spans = [self._sdk(cast(SpanRecord, s)) for s in chunk]
            try:
                result = self._exporter.export(spans)
            except Exception:  # noqa: BLE001 - the exporter logs why; spans are lost, the actor is not
                ok = False
                continue
            ok = ok and result is SpanExportResult.SUCCESS
        return ok

    def _send(self, post: Callable[[bytes], Any], spans: list[bytes]) -> bool:
        try:
            data = encode_request(
                spans,
                resource=self._encoded_resource,
                scope=self._encoded_scope,
                resource_schema_url=self._resource.schema_url,
                scope_schema_url=_SCOPE.schema_url or "",
            )
            return bool(post(data).success)
        except Exception as exc:  # noqa: BLE001 - spans are lost, the actor is not
            _log.warning("span export failed", extra={"error": type(exc).__name__})
            return False

    def encode(self, spans: list[SpanRecord]) -> bytes:
        """The OTLP request of ``spans`` under this sink's resource and scope."""
        return encode_spans(
            spans,
            resource=self._encoded_resource,
            scope=self._encoded_scope,
            resource_schema_url=self._resource.schema_url,
            scope_schema_url=_SCOPE.schema_url or "",
        )

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
