"""The fast encode path: one generated writer per event type, model → frame.

Owns :func:`compile_event_writers`. From an envelope schema (``{header,
payload}``, the payload a union of event records) it generates, per event
class, a function that reads the model's attributes directly and appends Avro
bytes to a ``bytearray`` that starts with the frame header: no intermediate
dicts, no per-datum schema walk, small longs and lengths from a table, union
branch indexes and enum symbols as precomputed bytes, UUID text cached by
value.

The output is byte-identical to ``to_record`` + fastavro (and
:mod:`turnstream.wire._accel.compiled`)
(tests pin it against every golden fixture). Anything the writer does not
expect -- a subclass where a union wants an exact class, an enum field
holding a plain string, a naive datetime, an out-of-range integer,
unencodable text -- raises, and the codec then runs the generic path, which
either writes the same bytes or raises the typed error. Pure Python; imports
value types only, never fastavro.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final
from uuid import UUID

from pydantic import BaseModel

from turnstream.events import EventBase
from turnstream.wire._accel.codegen import (
    PAIRS,
    SMALL,
    SMALL_LIMIT,
    TAILS,
    Miss,
    Source,
    Unsupported,
    by_event_class,
    envelope_parts,
    model_class,
    short_name,
    write_int,
    write_long,
    zigzag_bytes,
)
from turnstream.wire._accel.compiled import _string

__all__ = ["EventWriter", "compile_event_writers", "uuid_text"]

EventWriter = Callable[[EventBase], bytes]

_UUID_CACHE_LIMIT: Final = 8192
_uuid_text_cache: dict[int, bytes] = {}
_uuid_branch_cache: dict[int, bytes] = {}


def uuid_branch_text(value: UUID) -> bytes:
    """:func:`uuid_text` behind the branch index 1 of ``["null", uuid]``."""
    data = b"\x02" + uuid_text(value)
    if len(_uuid_branch_cache) >= _UUID_CACHE_LIMIT:
        _uuid_branch_cache.clear()
    _uuid_branch_cache[value.int] = data
    return data


def uuid_text(value: UUID) -> bytes:
    """The Avro string of ``value`` (length byte + canonical text), cached.

    Keyed by the UUID's integer: hashing an ``int`` is native, hashing a UUID
    is a Python call. Session, loop, turn and step ids repeat across the
    events of a turn, so most lookups hit. The cache is bounded (cleared when
    full), so unique event ids cannot grow it.
    """
    text = str(value).encode("ascii")
    data = zigzag_bytes(len(text)) + text
    if len(_uuid_text_cache) >= _UUID_CACHE_LIMIT:
        _uuid_text_cache.clear()
    _uuid_text_cache[value.int] = data
    return data


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class _WriterSource(Source):
    """The generator: emits code that writes one schema'd value to ``out``.

    Every value expression handed to the emitters is a local name, so each
    model attribute is read once.
    """

    def __init__(self, named: dict[str, Any]) -> None:
        super().__init__()
        self._named = named
        self._unions: dict[tuple[str, ...], str] = {}
        self._deferred: list[tuple[str, list[Any]]] = []
        self.small = self.const(SMALL, "SMALL")
        self.limit = self.const(SMALL_LIMIT, "LIMIT")
        self.long = self.const(write_long, "long")
        self.int = self.const(write_int, "int")
        self.string = self.const(_string, "string")
        self.zz = self.const(zigzag_bytes, "zz")
        self.pairs = self.const(PAIRS, "PAIRS")
        self.tails = self.const(TAILS, "TAILS")
        self.uuid_cache = self.const(_uuid_text_cache, "UC")
        self.uuid_null_cache = self.const(_uuid_branch_cache, "UCN")
        self.uuid_text = self.const(uuid_text, "utext")
        self.uuid_branch = self.const(uuid_branch_text, "ubranch")
        self.epoch = self.const(_EPOCH, "EPOCH")
        self.miss = self.const(Miss, "Miss")

    def _resolve(self, schema: Any) -> Any:
        return self._named.get(schema, schema) if isinstance(schema, str) else schema

    # ------------------------------------------------------------ primitives

    def _length(self, depth: int, n: str) -> None:
        # Lengths are never negative, so the table index needs no lower bound;
        # a long one falls off the table's end.
        self.line(depth, "try:")
        self.line(depth + 1, f"out += {self.small}[{n}]")
        self.line(depth, "except IndexError:")
        self.line(depth + 1, f"out += {self.zz}({n})")

    def _number(self, depth: int, v: str, writer: str) -> None:
        # bool and int index the table alike (True is 1), as the generic writer
        # encodes them alike; anything else fails the comparison and misses.
        self.line(depth, f"if 0 <= {v} < {self.limit}:")
        self.line(depth + 1, f"out += {self.small}[{v}]")
        # Up to 2**20 (token counts) in three bytes from the two-group tables,
        # without a call: from SMALL_LIMIT = 2**13 on, the zigzag value has
        # more than 14 bits, so both groups carry the continuation bit.
        self.line(depth, f"elif {self.limit} <= {v} < 1048576:")
        self.line(depth + 1, f"out += {self.pairs}[({v} << 1) & 16383]")
        self.line(depth + 1, f"out += {self.tails}[{v} >> 13]")
        self.line(depth, "else:")
        self.line(depth + 1, f"{writer}(out, {v})")

    def _text(self, depth: int, v: str, *, encode: bool) -> None:
        if encode:
            self.line(depth, f"{v} = {v}.encode()")
        self._length(depth, f"len({v})")
        self.line(depth, f"out += {v}")

    def _uuid(self, depth: int, v: str, *, branch: bool) -> None:
        # ``.int`` of anything but a UUID raises, and the generic path writes
        # what to_record writes for it (its text).
        cache, make = (
            (self.uuid_null_cache, self.uuid_branch)
            if branch
            else (self.uuid_cache, self.uuid_text)
        )
        b = self.temp("b")
        self.line(depth, f"{b} = {cache}.get({v}.int)")
        self.line(depth, f"out += {make}({v}) if {b} is None else {b}")

    def _timestamp(self, depth: int, v: str) -> None:
        # A naive datetime cannot be subtracted from the aware epoch: it raises
        # and the generic path reports it as an EncodeError.
        self.line(depth, f"{v} = {v} - {self.epoch}")
        self.line(
            depth,
            f"{v} = ({v}.days * 86400 + {v}.seconds) * 1000000 + {v}.microseconds",
        )
        self._number(depth, v, self.long)

    def _enum(self, depth: int, schema: Any, v: str, annotation: Any) -> None:
        symbols: list[str] = schema["symbols"]
        table = self.const({s: zigzag_bytes(i) for i, s in enumerate(symbols)}, "ENUM")
        if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
            # to_record writes ``member.value``: a plain string there is not
            # an enum member, so it goes to the generic path.
            self.line(depth, f"if {v}.__class__ is not {self.const(annotation, 'E')}:")
            self.line(depth + 1, f"raise {self.miss}")
        self.line(depth, f"out += {table}[{v}]")

    # ------------------------------------------------------------- structure

    def value(self, depth: int, schema: Any, v: str, annotation: Any) -> None:
        """Emit code writing the local ``v`` (a model attribute) as ``schema``."""
        schema = self._resolve(schema)
        if isinstance(schema, str):
            self._primitive(depth, schema, v)
        elif isinstance(schema, list):
            self._union(depth, schema, v)
        elif schema.get("logicalType") == "uuid":
            self._uuid(depth, v, branch=False)
        elif schema.get("logicalType") == "timestamp-micros":
            self._timestamp(depth, v)
        elif schema["type"] == "record":
            self.record_fields(depth, schema, v)
        elif schema["type"] == "enum":
            self._enum(depth, schema, v, annotation)
        elif schema["type"] == "array":
            self._array(depth, schema, v)
        elif "logicalType" not in schema and isinstance(schema["type"], str):
            self._primitive(depth, schema["type"], v)
        else:
            raise Unsupported(str(schema["type"]))

    def _primitive(self, depth: int, kind: str, v: str) -> None:
        if kind == "null":
            return
        if kind == "boolean":
            self.line(depth, f"out += b'\\x01' if {v} else b'\\x00'")
        elif kind == "long":
            self._number(depth, v, self.long)
        elif kind == "int":
            self._number(depth, v, self.int)
        elif kind == "string":
            self._text(depth, v, encode=True)
        elif kind == "bytes":
            self._text(depth, v, encode=False)
        else:
            raise Unsupported(kind)

    def record_fields(self, depth: int, schema: Any, obj: str) -> None:
        """Emit the fields of record ``schema`` read from the model ``obj``."""
        cls = model_class(schema["name"])
        fields = cls.model_fields
        names = [f["name"] for f in schema["fields"]]
        missing = [n for n in names if n not in fields]
        if missing:
            raise Unsupported(f"{cls.__name__}.{missing[0]}")
        if not names:
            return
        temps = [self.temp("f") for _ in names]
        if len(names) == 1:
            self.line(depth, f"{temps[0]} = {obj}.{names[0]}")
        else:
            # One C call reads every field (a model's fields live in its
            # __dict__); a missing one raises KeyError and misses.
            getter = self.const(operator.itemgetter(*names), "get")
            self.line(depth, f"{', '.join(temps)} = {getter}({obj}.__dict__)")
        for field, temp in zip(schema["fields"], temps, strict=True):
            self.value(depth, field["type"], temp, fields[field["name"]].annotation)

    def _union(self, depth: int, branches: list[Any], v: str) -> None:
        branches = [self._resolve(b) for b in branches]
        if len(branches) == 2 and "null" in branches:
            null = branches.index("null")
            other = branches[1 - null]
            self.line(depth, f"if {v} is None:")
            self.line(depth + 1, f"out += {zigzag_bytes(null)!r}")
            self.line(depth, "else:")
            if (
                isinstance(other, dict)
                and other.get("logicalType") == "uuid"
                and null == 0
            ):
                # The branch index is folded into the cached text.
                self._uuid(depth + 1, v, branch=True)
                return
            self.line(depth + 1, f"out += {zigzag_bytes(1 - null)!r}")
            self.value(depth + 1, other, v, None)
            return
        if not all(isinstance(b, dict) and b.get("type") == "record" for b in branches):
            raise Unsupported("a union of several non-record branches")
        self.line(depth, f"{self._dispatcher(branches)}(out, {v})")

    def _dispatcher(self, branches: list[Any]) -> str:
        key = tuple(str(b["name"]) for b in branches)
        name = self._unions.get(key)
        if name is None:
            name = self._unions[key] = self.temp("union")
            self._deferred.append((name, branches))
        return name

    def _array(self, depth: int, schema: Any, v: str) -> None:
        e = self.temp("e")
        self.line(depth, f"if {v}:")
        self._length(depth + 1, f"len({v})")
        self.line(depth + 1, f"for {e} in {v}:")
        self.value(depth + 2, schema["items"], e, None)
        self.line(depth, "out += b'\\x00'")

    def flush_dispatchers(self) -> None:
        """Emit the union dispatchers referenced so far (and those they use)."""
        while self._deferred:
            name, branches = self._deferred.pop()
            self.line(0, f"def {name}(out, v):")
            self.line(1, "c = v.__class__")
            for i, branch in enumerate(branches):
                cls = self.const(model_class(branch["name"]), "C")
                self.line(1, f"{'if' if i == 0 else 'elif'} c is {cls}:")
                self.line(2, f"out += {zigzag_bytes(i)!r}")
                self.record_fields(2, branch, "v")
            # A subclass or a foreign value: the generic path decides.
            self.line(1, "else:")
            self.line(2, f"raise {self.miss}")


def compile_event_writers(
    envelope: Any, prefix: bytes
) -> dict[type[BaseModel], EventWriter]:
    """One writer per event class the envelope's payload union carries.

    Each writer returns the whole frame: ``prefix`` (the single-object header)
    followed by the body. Event classes the generator does not cover are left
    out; the codec writes those on the generic path.
    """
    named, header_schema, branches = envelope_parts(envelope)

    def writer(index: int, branch: Any, _cls: type[BaseModel]) -> EventWriter:
        src = _WriterSource(named)
        fn = f"write_{short_name(branch['name'])}"
        src.line(0, f"def {fn}(ev):")
        src.line(1, f"out = bytearray({prefix!r})")
        src.line(1, "h = ev.header")
        src.record_fields(1, header_schema, "h")
        src.line(1, f"out += {zigzag_bytes(index)!r}")
        src.record_fields(1, branch, "ev")
        src.line(1, "return bytes(out)")
        src.flush_dispatchers()
        written: EventWriter = src.compile(fn)[fn]
        return written

    return by_event_class(branches, writer)
