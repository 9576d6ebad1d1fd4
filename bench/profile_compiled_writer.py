"""Prototype: a schema-compiled Avro writer vs fastavro's ``schemaless_writer``.

fastavro's C writer walks the *schema* for every datum (dict lookups of
``type``/``fields``/``logicalType`` and, for an untagged union value, a
validation pass per branch), which costs about 1 µs per plain field and 2-3 µs
per optional or logical-typed field on this box. This prototype compiles the
parsed schema once into nested closures, so writing a datum does only the
work its values need. It takes the same input as fastavro (the dicts
``turnstream.wire.to_record`` builds: tuple notation for union branches,
``None`` or a plain value for ``["null", T]``) and must produce the same
bytes: the script checks that for every golden fixture value in
``tests/unit/wire/golden.py`` and for the benchmark records before timing.

What the prototype does not do that fastavro's ``strict=True`` does: reject
*extra* record keys (``to_record`` builds exactly the schema's fields, and the
golden tests pin that) and name a missing field in its error (here a
``KeyError``). Out-of-range integers and unencodable text raise, as in
fastavro. Not used by turnstream; a measured proposal for
``turnstream.wire``. Usage::

    python bench/profile_compiled_writer.py
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import struct
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastavro import schemaless_writer

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.unit.wire

from tests.unit.wire.golden import BUILDERS

from profile_codec import pair_us
from profile_codec import values as bench_values
from turnstream.commands import CommandBase
from turnstream.events import EventBase
from turnstream.state import LoopState
from turnstream.wire import Codec, SchemaSet, Topic, to_record
from turnstream.wire.framing import frame

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


def _topic_of(value: Any) -> Topic:
    if isinstance(value, LoopState):
        return Topic.LOOPS
    if isinstance(value, CommandBase):
        return Topic.COMMANDS
    assert isinstance(value, EventBase)
    return Topic.EVENTS if value.is_enduring() else Topic.DELTAS


def _record_of(value: Any) -> Any:
    if isinstance(value, LoopState):
        return to_record.loop_state_record(value)
    if isinstance(value, CommandBase):
        return to_record.command_record(value)  # type: ignore[arg-type]
    return to_record.event_record(value)


def _fastavro(schema: Any, record: Any) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, schema, record, strict=True)
    return out.getvalue()


def _compiled(writer: Writer, record: Any) -> bytes:
    buf = bytearray()
    writer(buf, record)
    return bytes(buf)


class CompiledCodec(Codec):
    """The codec with proposal 3 applied: its writer swapped for the compiled one.

    Same mapping, validation, framing and size check as :class:`Codec`; only
    ``schemaless_writer`` is replaced.
    """

    def __init__(self, schemas: SchemaSet) -> None:
        super().__init__(schemas)
        self._writers = {
            t: compile_schema(schemas.writer_schema(t).parsed) for t in Topic
        }

    def _write(self, topic: Topic, what: str, value: Any) -> bytes:
        schema = self.schemas.writer_schema(topic)
        out = bytearray(frame(schema.fingerprint, b""))
        self._writers[topic](out, _record_of(value))
        data = bytes(out)
        if len(data) > self.max_payload_bytes:
            raise ValueError(what)
        return data


def _encoder(codec: Codec, value: Any) -> Callable[[], bytes]:
    if isinstance(value, LoopState):
        return functools.partial(codec.marshal_state, value)
    if value.is_enduring():
        return functools.partial(codec.marshal_event, value)
    return functools.partial(codec.marshal_ephemeral, value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    codec = Codec(SchemaSet.load())
    writers = {
        topic: compile_schema(codec.schemas.writer_schema(topic).parsed)
        for topic in Topic
    }
    checked = 0
    for name, build in BUILDERS.items():
        value = build()
        topic = _topic_of(value)
        record = _record_of(value)
        expected = _fastavro(codec.schemas.writer_schema(topic).parsed, record)
        got = _compiled(writers[topic], record)
        assert got == expected, f"{name}: bytes differ"
        checked += 1
    compiled_codec = CompiledCodec(codec.schemas)
    rows = []
    for name, value in bench_values().items():
        topic = _topic_of(value)
        schema = codec.schemas.writer_schema(topic).parsed
        record = _record_of(value)
        writer = writers[topic]
        assert _compiled(writer, record) == _fastavro(schema, record), name
        before, after = _encoder(codec, value), _encoder(compiled_codec, value)
        assert before() == after(), name
        n = max(args.number // max(1, len(_fastavro(schema, record)) // 2000), 50)
        fa, cw = pair_us(
            functools.partial(_fastavro, schema, record),
            functools.partial(_compiled, writer, record),
            n,
            args.reps,
        )
        ca, cb = pair_us(before, after, n, args.reps)
        rows.append(
            {
                "value": name,
                "body_fastavro_us": fa,
                "body_compiled_us": cw,
                "body_speedup": round(fa / cw, 2),
                "codec_now_us": ca,
                "codec_compiled_us": cb,
                "codec_speedup": round(ca / cb, 2),
            }
        )
        print(
            f"{name:<20} body: fastavro {fa:7.1f}, compiled {cw:7.1f} µs;"
            f"  codec: now {ca:7.1f}, compiled {cb:7.1f} µs ({ca / cb:.1f}x)"
        )
    print(f"byte-identical on {checked} golden fixture values")
    if args.out is not None:
        doc = {"golden_values_checked": checked, "rows": rows}
        args.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
