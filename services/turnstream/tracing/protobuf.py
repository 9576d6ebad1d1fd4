"""OTLP trace requests encoded by hand from span records (protobuf wire format).

Owns :func:`encode_spans`: the bytes of an ``ExportTraceServiceRequest``
holding span records under one resource and scope, and its two halves,
:func:`encode_span` (one span, as its field of the request) and
:func:`encode_request` (the request around spans encoded already). Building
protobuf message objects costs about 11 us per span here (each attribute is
two messages); writing the wire format directly, with the encoding of each
repeated attribute (operation names, models, tool names, indexes) kept, a
fraction of it. The output is the SDK encoder's, byte for byte
(tests/unit/tracing).

Pure: imports only the span record; the resource and scope arrive encoded.
"""

from __future__ import annotations

import struct

from turnstream.tracing.spans import AttributeValue, SpanRecord

__all__ = ["encode_request", "encode_span", "encode_spans"]

_FIXED64 = struct.Struct("<Q")
_DOUBLE = struct.Struct("<d")
_INT64 = 1 << 64

# Span field tags: (field number << 3) | wire type.
_TRACE_ID = b"\x0a\x10"  # 1, bytes, always 16 long
_SPAN_ID = b"\x12\x08"  # 2, bytes, always 8 long
_PARENT_ID = b"\x22\x08"  # 4, bytes, 8 long
_NAME = 0x2A  # 5, string
_KIND_INTERNAL = b"\x30\x01"  # 6, SPAN_KIND_INTERNAL
_KIND_CLIENT = b"\x30\x03"  # 6, SPAN_KIND_CLIENT
_START = b"\x39"  # 7, fixed64
_END = b"\x41"  # 8, fixed64
_ATTRIBUTE = 0x4A  # 9, KeyValue
_STATUS_UNSET = b"\x7a\x00"  # 15, an empty Status
_STATUS = 0x7A  # 15, Status{message = 2, code = 3: ERROR}
# 16, fixed32: SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK (the parent is local).
_FLAGS = b"\x85\x01\x00\x01\x00\x00"


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return bytes((tag,)) + _varint(len(payload)) + payload


# The encoded attributes kept, keyed by (key, value, the value's type tag): a
# plain dict of strings, numbers and bytes, none of which the garbage collector
# tracks. An lru_cache's entries are objects it tracks, and they live long
# enough to reach the oldest generation: each one brings the next full pass
# over the actor's whole heap closer. Cleared when full: most keys repeat
# every turn and come back at once.
_ATTRIBUTES_KEPT = 4096
_attributes: dict[tuple[str, AttributeValue, int], bytes] = {}
# The type tag tells apart values that compare equal: True, 1 and 1.0.
_TAGS: dict[type, int] = {bool: 0, int: 1, float: 2, str: 3}


def _attribute(key: str, value: AttributeValue) -> bytes:
    """One ``KeyValue`` as a span's field 9, encoded once per distinct value."""
    tag = _TAGS.get(type(value))
    if tag is None:  # a subclass (an enum member): encoded afresh
        return _encode_attribute(key, value)
    memo = (key, value, tag)
    encoded = _attributes.get(memo)
    if encoded is None:
        encoded = _encode_attribute(key, value)
        if len(_attributes) >= _ATTRIBUTES_KEPT:
            _attributes.clear()
        _attributes[memo] = encoded
    return encoded


def _encode_attribute(key: str, value: AttributeValue) -> bytes:
    # AnyValue's fields are a oneof: written even when zero or empty.
    # bool before int: a bool is an int.
    if isinstance(value, bool):
        any_value = b"\x10\x01" if value else b"\x10\x00"
    elif isinstance(value, str):
        any_value = _field(0x0A, value.encode())
    elif isinstance(value, int):
        any_value = b"\x18" + _varint(value % _INT64)
    else:
        any_value = b"\x21" + _DOUBLE.pack(value)
    key_value = _field(0x0A, key.encode()) if key else b""
    return _field(_ATTRIBUTE, key_value + _field(0x12, any_value))


def encode_span(span: SpanRecord) -> bytes:
    """``span`` as its field of a ``ScopeSpans`` (for :func:`encode_request`)."""
    parts = [
        _TRACE_ID,
        span.trace_id.to_bytes(16, "big"),
        _SPAN_ID,
        span.span_id.to_bytes(8, "big"),
    ]
    if span.parent_id:
        parts += (_PARENT_ID, span.parent_id.to_bytes(8, "big"))
    if span.name:
        parts.append(_field(_NAME, span.name.encode()))
    parts.append(_KIND_CLIENT if span.client else _KIND_INTERNAL)
    if span.start_ns:
        parts += (_START, _FIXED64.pack(span.start_ns))
    if span.end_ns:
        parts += (_END, _FIXED64.pack(span.end_ns))
    parts += [_attribute(k, v) for k, v in span.attributes.items()]
    if span.error_type is None:
        parts.append(_STATUS_UNSET)
    else:
        message = _field(0x12, span.error_type.encode()) if span.error_type else b""
        parts.append(_field(_STATUS, message + b"\x18\x02"))
    parts.append(_FLAGS)
    return _field(0x12, b"".join(parts))


def encode_spans(
    spans: list[SpanRecord],
    *,
    resource: bytes,
    scope: bytes,
    resource_schema_url: str = "",
    scope_schema_url: str = "",
) -> bytes:
    """The ``ExportTraceServiceRequest`` of ``spans``.

    Args:
        spans: the spans, in this order.
        resource: the encoded ``Resource`` message.
        scope: the encoded ``InstrumentationScope`` message.
        resource_schema_url: the resource's schema, omitted when empty.
        scope_schema_url: the scope's schema, omitted when empty.
    """
    return encode_request(
        [encode_span(s) for s in spans],
        resource=resource,
        scope=scope,
        resource_schema_url=resource_schema_url,
        scope_schema_url=scope_schema_url,
    )


def encode_request(
    spans: list[bytes],
    *,
    resource: bytes,
    scope: bytes,
    resource_schema_url: str = "",
    scope_schema_url: str = "",
) -> bytes:
    """The ``ExportTraceServiceRequest`` of spans from :func:`encode_span`.

    Args as :func:`encode_spans`.
    """
    scope_spans = [_field(0x0A, scope), *spans]
    if scope_schema_url:
        scope_spans.append(_field(0x1A, scope_schema_url.encode()))
    resource_spans = [_field(0x0A, resource), _field(0x12, b"".join(scope_spans))]
    if resource_schema_url:
        resource_spans.append(_field(0x1A, resource_schema_url.encode()))
    return _field(0x0A, b"".join(resource_spans))
