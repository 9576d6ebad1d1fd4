"""A schema-compiled Avro binary writer: the accelerated paths' encode engine.

Owns :func:`compile_schema`, which turns a fastavro-parsed schema (named
types inlined) into nested closures that write a datum -- the dicts
:mod:`turnstream.wire.to_record` builds, union branches in tuple notation --
to a ``bytearray``. The bytes are exactly fastavro's ``schemaless_writer``
output (the golden fixtures pin that); writing skips fastavro's per-datum
schema walk and branch validation. Out-of-range integers raise
``OverflowError`` and unencodable text ``UnicodeEncodeError``; a missing
field raises ``KeyError``. With ``TURNSTREAM_CODEC=generic`` the codec writes
with fastavro instead. Pure Python; imports nothing of turnstream.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

__all__ = ["Writer", "compile_schema", "write_long"]

Writer = Callable[[bytearray, Any], None]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DOUBLE = struct.Struct("<d")
_FLOAT = struct.Struct("<f")


_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1


def _long(buf: bytearray, n: int) -> None:
    if not _LONG_MIN <= n <= _LONG_MAX:  # fastavro raises too; never wrap
        raise OverflowError("value out of range for an Avro long")
    n = (n << 1) ^ (n >> 63)
    while n & ~0x7F:
        buf.append((n & 0x7F) | 0x80)
        n >>= 7
    buf.append(n)


write_long = _long
"""Append an Avro long (zig-zag varint) to a buffer."""


def _int(buf: bytearray, n: int) -> None:
    if not _INT_MIN <= n <= _INT_MAX:
        raise OverflowError("value out of range for an Avro int")
    _long(buf, n)


def _string(buf: bytearray, value: str) -> None:
    data = value.encode()
    _long(buf, len(data))
    buf += data


def _bytes(buf: bytearray, value: bytes) -> None:
    _long(buf, len(value))
    buf += value


def _boolean(buf: bytearray, value: bool) -> None:
    buf.append(1 if value else 0)


def _null(_buf: bytearray, _value: None) -> None:
    return


def _timestamp_micros(buf: bytearray, value: datetime | int) -> None:
    if isinstance(value, datetime):
        delta = value - _EPOCH
        value = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    _long(buf, value)


def _double(buf: bytearray, value: float) -> None:
    buf += _DOUBLE.pack(value)


def _float(buf: bytearray, value: float) -> None:
    buf += _FLOAT.pack(value)


_PRIMITIVES: dict[str, Writer] = {
    "null": _null,
    "boolean": _boolean,
    "int": _int,
    "long": _long,
    "string": _string,
    "bytes": _bytes,
    "double": _double,
    "float": _float,
}


def _name(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    kind = str(schema["type"])
    return str(schema["name"]) if kind in ("record", "enum", "fixed") else kind


def compile_schema(schema: Any, named: dict[str, Any] | None = None) -> Writer:  # noqa: PLR0911
    """A writer for ``schema`` (a fastavro-parsed schema, named types inlined)."""
    named = {} if named is None else named
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        # Looked up when writing: a recursive reference is compiled before
        # its record's writer exists.
        return lambda buf, value: named[schema](buf, value)  # noqa: PLW0108
    if isinstance(schema, list):
        return _compile_union(schema, named)
    kind = schema["type"]
    logical = schema.get("logicalType")
    if logical == "timestamp-micros":
        return _timestamp_micros
    if logical == "uuid":
        return lambda buf, value: _string(buf, str(value))
    if kind == "record":
        fields: list[tuple[str, Writer]] = []
        record_writer = _record_writer(fields)
        named[schema["name"]] = record_writer  # before the fields: recursion
        fields += [
            (f["name"], compile_schema(f["type"], named)) for f in schema["fields"]
        ]
        return record_writer
    if kind == "enum":
        index = {symbol: i for i, symbol in enumerate(schema["symbols"])}
        return lambda buf, value: _long(buf, index[value])
    if kind == "array":
        item = compile_schema(schema["items"], named)
        return _array_writer(item)
    if kind == "map":
        item = compile_schema(schema["values"], named)
        return _map_writer(item)
    if kind == "fixed":
        return _fixed
    return compile_schema(kind, named)


def _fixed(buf: bytearray, value: bytes) -> None:
    buf += value


def _record_writer(fields: list[tuple[str, Writer]]) -> Writer:
    def write(buf: bytearray, value: Any) -> None:
        for name, writer in fields:
            writer(buf, value[name])

    return write


def _array_writer(item: Writer) -> Writer:
    def write(buf: bytearray, value: Any) -> None:
        if value:
            _long(buf, len(value))
            for element in value:
                item(buf, element)
        buf.append(0)

    return write


def _map_writer(item: Writer) -> Writer:
    def write(buf: bytearray, value: Any) -> None:
        if value:
            _long(buf, len(value))
            for key, element in value.items():
                _string(buf, key)
                item(buf, element)
        buf.append(0)

    return write


def _compile_union(branches: list[Any], named: dict[str, Any]) -> Writer:
    by_name = {_name(b): (i, compile_schema(b, named)) for i, b in enumerate(branches)}
    nullable = len(branches) == 2 and "null" in branches
    other = next((i for i, b in enumerate(branches) if b != "null"), 0)
    other_writer = by_name[_name(branches[other])][1]
    null_index = branches.index("null") if "null" in branches else -1

    def write(buf: bytearray, value: Any) -> None:
        if type(value) is tuple:
            index, writer = by_name[value[0]]
            _long(buf, index)
            writer(buf, value[1])
        elif value is None:
            _long(buf, null_index)
        elif nullable:
            _long(buf, other)
            other_writer(buf, value)
        else:
            raise ValueError("untagged value in a union of several branches")

    return write
