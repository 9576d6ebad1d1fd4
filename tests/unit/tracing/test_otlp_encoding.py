"""The OTLP request built from span records is the SDK encoder's, byte for byte.

The sink encodes records directly (no ``ReadableSpan`` per span); the SDK's
own encoder, given the same spans as SDK objects, is the reference.
"""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from turnstream.tracing import TracingSettings
from turnstream.tracing.otlp import OtlpSink
from turnstream.tracing.spans import SpanRecord

SPANS = [
    SpanRecord(
        name="invoke_agent",
        trace_id=(1 << 127) | 5,
        span_id=(1 << 63) | 7,
        parent_id=0,
        start_ns=1_700_000_000_000_000_000,
        end_ns=1_700_000_000_000_500_000,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "turnstream.turn.index": 3,
            "flag": True,
            "ratio": 0.25,
            "zero": 0,
            "negative": -3,
            "empty": "",
            "off": False,
            "big": 1 << 62,
        },
    ),
    SpanRecord(
        name="chat m1",
        trace_id=(1 << 127) | 5,
        span_id=8,
        parent_id=(1 << 63) | 7,
        start_ns=10,
        end_ns=20,
        attributes={"gen_ai.request.model": "m1", "error.type": "provider_timeout"},
        error_type="provider_timeout",
        client=True,
    ),
    SpanRecord(
        name="execute_tool lookup",
        trace_id=9,
        span_id=10,
        parent_id=11,
        start_ns=30,
        end_ns=40,
        attributes={"same": 1, "again": True, "text": "ü"},
        error_type="",
    ),
]


def test_direct_encoding_matches_the_sdk_encoder() -> None:
    sink = OtlpSink(
        TracingSettings(endpoint="http://127.0.0.1:1", service_name="svc"),
        schedule_delay_ms=60_000,
    )
    try:
        reference = encode_spans([sink._sdk(s) for s in SPANS])
        direct = sink.encode(SPANS)
    finally:
        sink.close()  # nothing queued: no request to the dead endpoint
    assert direct == reference.SerializePartialToString()


def test_equal_values_of_other_types_keep_their_own_encoding() -> None:
    # True == 1 == 1.0 and they hash alike: the kept encodings must not mix them.
    spans = [
        SpanRecord(
            name="s",
            trace_id=1,
            span_id=n + 1,
            parent_id=0,
            start_ns=1,
            end_ns=2,
            attributes={"k": value},
        )
        for n, value in enumerate([True, 1, 1.0, 1, True])
    ]
    sink = OtlpSink(
        TracingSettings(endpoint="http://127.0.0.1:1", service_name="svc"),
        schedule_delay_ms=60_000,
    )
    try:
        reference = encode_spans([sink._sdk(s) for s in spans])
        direct = sink.encode(spans)
    finally:
        sink.close()
    assert direct == reference.SerializePartialToString()
