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

The prototype was applied as ``turnstream.wire._accel.compiled``; this script now
imports it from there. What it does not do that fastavro's ``strict=True`` does: reject
*extra* record keys (``to_record`` builds exactly the schema's fields, and the
golden tests pin that) and name a missing field in its error (here a
``KeyError``). Out-of-range integers and unencodable text raise, as in
fastavro. Usage::

    python bench/lab/profile_compiled_writer.py
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastavro import schemaless_writer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.unit.wire

from tests.unit.wire.golden import BUILDERS

from profile_codec import pair_us
from profile_codec import values as bench_values
from turnstream.commands import CommandBase
from turnstream.events import EventBase
from turnstream.state import LoopState
from turnstream.wire import Codec, SchemaSet, Topic, to_record
from turnstream.wire._accel.compiled import Writer, compile_schema
from turnstream.wire.framing import frame


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
