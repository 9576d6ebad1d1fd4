"""The fast decode path: one generated reader per envelope schema, bytes → event.

Owns :func:`compile_event_reader`. From the envelope schema a frame was
written with (the topic's *current* schema; older data goes the generic way
and is resolved by fastavro) it generates straight-line code that parses the
body in place and builds the frozen models directly (``__dict__`` and
pydantic's bookkeeping slots set as ``model_construct`` would), without an
intermediate record and without running pydantic-core.

Validation is not skipped, it is compiled: every rule the models state
(``ge``/``le`` bounds, ``Literal`` symbols, which classes a union field
accepts, ``mode="after"`` model validators) is checked on the decoded value,
and a model with any rule the generator does not know is left to the generic
path. Anything unexpected -- a malformed or truncated body, trailing bytes, a
non-canonical varint, a rule broken -- raises, and the codec then decodes the
same bytes on the generic path, which returns the same value or raises the
typed :class:`~turnstream.errors.DecodeError`. So the fast path only ever
accepts what the generic path accepts, with an equal result (tests pin it on
the golden fixtures and on fuzzed input).

Pure Python; imports value types only, never fastavro. One module on purpose
(~650 lines): the whole generated decode direction, the compiled model rules
with it, so a new kind of rule changes one place.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal
from uuid import UUID

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from turnstream.events import EventBase, Header
from turnstream.wire._accel.codegen import (
    Miss,
    Source,
    Unsupported,
    envelope_parts,
    model_class,
    short_name,
    zigzag_bytes,
)

__all__ = ["EventReader", "compile_event_reader", "read_long"]

EventReader = Callable[[bytes], EventBase]

_CACHE_LIMIT: Final = 8192
_HEADER_LENGTHS: Final = 4
"""How many distinct header lengths the header cache is tried at."""
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

# Decoded UUIDs by their encoded bytes (length byte and text, behind the
# branch byte for ["null", uuid]): the ids of a session repeat in every event.
# Shared by every reader: these bytes mean the same UUID in any schema.
_uuids: dict[bytes, UUID] = {}


# What model_construct sets on a new instance, as the slots' own setters.
_SET_DICT: Final = BaseModel.__dict__["__dict__"].__set__
_SET_FIELDS_SET: Final = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_SET_EXTRA: Final = BaseModel.__dict__["__pydantic_extra__"].__set__
_SET_PRIVATE: Final = BaseModel.__dict__["__pydantic_private__"].__set__


def _unrolled_read_long() -> Callable[[bytes, int], tuple[int, int]]:
    """:func:`read_long` as straight-line code, one step per byte.

    A timestamp takes eight bytes; unrolled, each costs a third fewer
    operations than a loop round.
    """
    lines = ["def read_long(data, p):", "    b = data[p]", "    z = b & 127"]
    for k in range(1, 10):
        lines += [
            "    if b < 128:",
            f"        return (z >> 1) ^ -(z & 1), p + {k}",
            f"    b = data[p + {k}]",
            f"    z |= (b & 127) << {7 * k}",
        ]
    # Ten bytes at most, and no more than 64 bits: else the generic path decides.
    lines += [
        "    if b > 127 or z >> 64:",
        "        raise Miss",
        "    return (z >> 1) ^ -(z & 1), p + 10",
    ]
    namespace: dict[str, Any] = {"Miss": Miss}
    exec("\n".join(lines), namespace)  # noqa: S102 - fixed source, built here
    fn: Callable[[bytes, int], tuple[int, int]] = namespace["read_long"]
    return fn


read_long: Final = _unrolled_read_long()
"""The long whose varint starts at ``data[p]``, and the position after it.

Raises ``Miss`` past ten bytes or 64 bits (the generic path decides what such
input means) and ``IndexError`` when the varint runs past the end.
"""


def uuid_at(data: bytes, p: int, optional: bool) -> tuple[UUID | None, int]:
    """The (optional) UUID encoded at ``data[p]``, parsed, and the position after.

    A canonical encoding (one branch byte, one length byte, 36 characters) is
    remembered under its bytes for the next lookup.

    Raises:
        Miss: not a well-formed value (the generic path decides).
    """
    start = p
    if optional:
        branch = data[p]
        p += 1
        if branch == 0:
            return None, p
        if branch != 2:
            raise Miss
    n, p = read_long(data, p)
    raw = data[p : p + n]
    if n < 0 or len(raw) != n:
        raise Miss
    value = UUID(raw.decode())
    p += n
    if p - start == (38 if optional else 37):
        if len(_uuids) >= _CACHE_LIMIT:
            _uuids.clear()
        _uuids[data[start:p]] = value
    return value, p


# ----------------------------------------------------------------------------
# What a model field accepts, as far as the generator needs to know
# ----------------------------------------------------------------------------


def _leaves(annotation: Any) -> list[Any]:
    """The leaf types of an annotation (unions, Optional, tuple, Annotated)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        base, *meta = typing.get_args(annotation)
        for item in meta:
            # A discriminator only picks the branch; a constraint inside a
            # nested annotation is a rule the generator does not compile.
            if not (isinstance(item, FieldInfo) and not item.metadata):
                raise Unsupported(f"nested annotation {item!r}")
        return _leaves(base)
    if origin in (typing.Union, types.UnionType):
        return [leaf for arg in typing.get_args(annotation) for leaf in _leaves(arg)]
    if origin is tuple:
        args = typing.get_args(annotation)
        if len(args) != 2 or args[1] is not Ellipsis:
            raise Unsupported(f"tuple annotation {annotation!r}")
        return _leaves(args[0])
    return [annotation]


def _literal_values(leaves: list[Any]) -> set[object] | None:
    values: set[object] = set()
    for leaf in leaves:
        if typing.get_origin(leaf) is Literal:
            values.update(typing.get_args(leaf))
        elif leaf is str:
            return None
    return values


def _accepts(leaves: list[Any], python_type: type) -> bool:
    return any(
        leaf is python_type
        or (isinstance(leaf, type) and issubclass(python_type, leaf))
        or (python_type is str and typing.get_origin(leaf) is Literal)
        for leaf in leaves
    )


_BOUNDS: Final = {
    annotated_types.Ge: ("ge", "<"),
    annotated_types.Gt: ("gt", "<="),
    annotated_types.Le: ("le", ">"),
    annotated_types.Lt: ("lt", ">="),
}


def _check_model(cls: type[BaseModel]) -> None:
    """Refuse a model with behaviour the generated constructor would skip."""
    decorators = cls.__pydantic_decorators__
    if (
        decorators.field_validators
        or decorators.validators
        or decorators.root_validators
        or cls.__pydantic_post_init__ is not None
        or cls.__private_attributes__
        or cls.model_config.get("extra") == "allow"
    ):
        raise Unsupported(cls.__name__)
    for validator in decorators.model_validators.values():
        if validator.info.mode != "after":
            raise Unsupported(f"{cls.__name__}: {validator.info.mode} validator")


def enum_table(schema: Any, leaves: list[Any]) -> dict[int, object]:
    """An enum's decoded value by the (one) byte of its index, as the field accepts.

    An enum class among the field's leaves gives its members; else the field
    must take ``str`` (or ``Literal`` symbols: only those). Symbols the field
    does not accept, and indexes past one byte, are left out (they miss).

    Raises:
        Unsupported: the field takes neither an enum nor a string.
    """
    symbols: list[str] = schema["symbols"]
    classes = [
        leaf
        for leaf in leaves
        if isinstance(leaf, type) and issubclass(leaf, enum.Enum)
    ]
    if classes:
        (cls,) = classes  # one enum per field in this model set
        members: dict[object, object] = {m.value: m for m in cls}
        return {
            zigzag_bytes(i)[0]: members[s]
            for i, s in enumerate(symbols)
            if s in members and len(zigzag_bytes(i)) == 1
        }
    if not _accepts(leaves, str):
        raise Unsupported(f"str for {leaves!r}")
    allowed = _literal_values(leaves)
    return {
        zigzag_bytes(i)[0]: s
        for i, s in enumerate(symbols)
        if (allowed is None or s in allowed) and len(zigzag_bytes(i)) == 1
    }


class _ReaderSource(Source):
    """The generator: emits code that reads one schema'd value at ``data[p]``."""

    def __init__(self, named: dict[str, Any]) -> None:
        super().__init__()
        self._named = named
        self._records: dict[str, str] = {}
        # Headers by their encoded bytes, for headers without an event id:
        # every delta of a step carries the same one. Per reader, since the
        # same bytes may mean another header under another schema; only for
        # a frozen Header, so one instance can stand for all of them.
        self._headers: dict[bytes, Header] = {}
        self._header_lengths: list[int] = []
        self._header_firsts: set[int] = set()
        self._cache_headers = bool(Header.model_config.get("frozen"))
        self._pending: list[tuple[str, Any]] = []
        self.rlong = self.const(read_long, "rlong")
        self.uuids = self.const(_uuids, "UU")
        self.uuid_at = self.const(uuid_at, "uuid_at")
        self.epoch = self.const(_EPOCH, "EPOCH")
        self.td = self.const(timedelta, "td")
        self.miss = self.const(Miss, "Miss")
        self.bools = self.const({0: False, 1: True}, "BOOL")
        self.new = self.const(object.__new__, "new")
        # The slot setters themselves: half the cost of object.__setattr__,
        # which looks the name up on every call.
        self.set_dict = self.const(_SET_DICT, "set_dict")
        self.set_fields = self.const(_SET_FIELDS_SET, "set_fields")
        self.set_extra = self.const(_SET_EXTRA, "set_extra")
        self.set_private = self.const(_SET_PRIVATE, "set_private")

    def _resolve(self, schema: Any) -> Any:
        return self._named.get(schema, schema) if isinstance(schema, str) else schema

    # ------------------------------------------------------------ primitives

    def _long(self, depth: int, v: str) -> None:
        # Varints of up to three bytes (counts, lengths, token counts below
        # ~1M) inline; the rest in a loop.
        self.line(depth, f"{v} = data[p]")
        self.line(depth, f"if {v} < 128:")
        self.line(depth + 1, f"{v} = ({v} >> 1) ^ -({v} & 1)")
        self.line(depth + 1, "p += 1")
        self.line(depth, "elif data[p + 1] < 128:")
        self.line(depth + 1, f"{v} = ({v} & 127) | (data[p + 1] << 7)")
        self.line(depth + 1, f"{v} = ({v} >> 1) ^ -({v} & 1)")
        self.line(depth + 1, "p += 2")
        self.line(depth, "elif data[p + 2] < 128:")
        self.line(
            depth + 1,
            f"{v} = ({v} & 127) | ((data[p + 1] & 127) << 7) | (data[p + 2] << 14)",
        )
        self.line(depth + 1, f"{v} = ({v} >> 1) ^ -({v} & 1)")
        self.line(depth + 1, "p += 3")
        self.line(depth, "else:")
        self.line(depth + 1, f"{v}, p = {self.rlong}(data, p)")

    def _length(self, depth: int, n: str) -> None:
        self._long(depth, n)
        self.line(depth, f"if {n} < 0:")
        self.line(depth + 1, f"raise {self.miss}")

    def _raw(self, depth: int, v: str, *, decode: bool) -> None:
        # ``L`` is len(data); the length is read inline like any long.
        n, start = self.temp("n"), self.temp("s")
        self._length(depth, n)
        self.line(depth, f"{start} = p")
        self.line(depth, f"p += {n}")
        self.line(depth, "if p > L:")
        self.line(depth + 1, f"raise {self.miss}")
        self.line(depth, f"{v} = data[{start}:p]" + (".decode()" if decode else ""))

    def _uuid(self, depth: int, v: str, *, optional: bool) -> None:
        # The cache is keyed by the value's whole encoding (branch byte,
        # length byte, 36 characters): equal bytes decode to an equal UUID,
        # so a hit needs no parsing at all.
        size = 38 if optional else 37
        self.line(depth, f"{v} = {self.uuids}.get(data[p:p + {size}])")
        self.line(depth, f"if {v} is None:")
        self.line(depth + 1, f"{v}, p = {self.uuid_at}(data, p, {optional})")
        self.line(depth, "else:")
        self.line(depth + 1, f"p += {size}")

    # ------------------------------------------------------------- values

    def value(self, depth: int, schema: Any, v: str, leaves: list[Any]) -> None:
        """Emit code reading ``schema`` at ``data[p]`` into the local ``v``.

        ``leaves`` are the leaf types the model field accepts; a schema
        branch the field does not accept is refused at generation time or,
        for union branches, at run time (it misses).
        """
        schema = self._resolve(schema)
        kind = schema if isinstance(schema, str) else None
        if isinstance(schema, dict) and "logicalType" not in schema:
            kind = schema["type"] if isinstance(schema["type"], str) else None
        if isinstance(schema, list):
            self._union(depth, schema, v, leaves)
        elif isinstance(schema, dict) and schema.get("logicalType") == "uuid":
            self._require(leaves, UUID)
            self._uuid(depth, v, optional=False)
        elif (
            isinstance(schema, dict) and schema.get("logicalType") == "timestamp-micros"
        ):
            self._require(leaves, datetime)
            self._long(depth, v)
            # Exactly fastavro's conversion: the epoch plus a timedelta.
            self.line(depth, f"{v} = {self.epoch} + {self.td}(0, 0, {v})")
        elif kind == "record":
            self._record_value(depth, schema, v, leaves)
        elif kind == "enum":
            self._enum(depth, schema, v, leaves)
        elif kind == "array":
            self._array(depth, schema, v, leaves)
        else:
            self._primitive(depth, kind, v, leaves)

    def _primitive(
        self, depth: int, kind: str | None, v: str, leaves: list[Any]
    ) -> None:
        if kind in ("long", "int"):
            self._require(leaves, int)
            self._long(depth, v)
        elif kind == "boolean":
            self._require(leaves, bool)
            self.line(depth, f"{v} = {self.bools}[data[p]]")
            self.line(depth, "p += 1")
        elif kind == "string":
            self._require(leaves, str)
            self._raw(depth, v, decode=True)
            self._literal(depth, v, leaves)
        elif kind == "bytes":
            self._require(leaves, bytes)
            self._raw(depth, v, decode=False)
        elif kind == "null":
            self._require(leaves, type(None))
            self.line(depth, f"{v} = None")
        else:
            raise Unsupported(str(kind))

    @staticmethod
    def _require(leaves: list[Any], python_type: type) -> None:
        if not _accepts(leaves, python_type):
            raise Unsupported(f"{python_type.__name__} for {leaves!r}")

    def _literal(self, depth: int, v: str, leaves: list[Any]) -> None:
        values = _literal_values(leaves)
        if values is not None:
            self.line(depth, f"if {v} not in {self.const(frozenset(values), 'LIT')}:")
            self.line(depth + 1, f"raise {self.miss}")

    def _enum(self, depth: int, schema: Any, v: str, leaves: list[Any]) -> None:
        table = enum_table(schema, leaves)
        # Keyed by the index's (one) byte: any other byte misses.
        self.line(depth, f"{v} = {self.const(table, 'ENUM')}[data[p]]")
        self.line(depth, "p += 1")

    def _union(
        self, depth: int, branches: list[Any], v: str, leaves: list[Any]
    ) -> None:
        branches = [self._resolve(b) for b in branches]
        k = self.temp("k")
        first = True
        if len(branches) == 2 and branches[0] == "null":
            other = branches[1]
            if isinstance(other, dict) and other.get("logicalType") == "uuid":
                self._require(leaves, UUID)
                self._require(leaves, type(None))
                self.line(depth, "if data[p] == 0:")
                self.line(depth + 1, f"{v} = None")
                self.line(depth + 1, "p += 1")
                self.line(depth, "else:")
                self._uuid(depth + 1, v, optional=True)
                return
        self.line(depth, f"{k} = data[p]")
        self.line(depth, "p += 1")
        for index, branch in enumerate(branches):
            code = zigzag_bytes(index)
            if len(code) != 1:
                raise Unsupported("a union of more than 64 branches")
            self.line(depth, f"{'if' if first else 'elif'} {k} == {code[0]}:")
            first = False
            if branch == "null":
                self._require(leaves, type(None))
                self.line(depth + 1, f"{v} = None")
            elif isinstance(branch, dict) and branch.get("type") == "record":
                cls = model_class(branch["name"])
                if cls in leaves:
                    self.line(depth + 1, f"{v}, p = {self.reader_of(branch)}(data, p)")
                else:
                    # The schema allows it, the field does not (e.g. a
                    # UserMessage inside a StepDone): the generic path refuses.
                    self.line(depth + 1, f"raise {self.miss}")
            else:
                self.value(depth + 1, branch, v, leaves)
        self.line(depth, "else:")
        self.line(depth + 1, f"raise {self.miss}")

    def _record_value(self, depth: int, schema: Any, v: str, leaves: list[Any]) -> None:
        if model_class(schema["name"]) not in leaves:
            raise Unsupported(f"{schema['name']} for {leaves!r}")
        self.line(depth, f"{v}, p = {self.reader_of(schema)}(data, p)")

    def _array(self, depth: int, schema: Any, v: str, leaves: list[Any]) -> None:
        if _min_size(self._resolve(schema["items"]), self._named) < 1:
            raise Unsupported("an array of values that take no bytes")
        items, n, x = self.temp("items"), self.temp("n"), self.temp("x")
        self.line(depth, f"{items} = []")
        self._long(depth, n)
        self.line(depth, f"while {n}:")
        # Every item takes at least one byte, so a count beyond the bytes left
        # is malformed (and never allocates).
        self.line(depth + 1, f"if {n} < 0 or {n} > L - p:")
        self.line(depth + 2, f"raise {self.miss}")
        self.line(depth + 1, f"for _ in range({n}):")
        self.value(depth + 2, schema["items"], x, leaves)
        self.line(depth + 2, f"{items}.append({x})")
        self._long(depth + 1, n)
        self.line(depth, f"{v} = tuple({items})")

    # ------------------------------------------------------------- records

    def reader_of(self, schema: Any) -> str:
        """The name of the generated reader function of record ``schema``."""
        name = str(schema["name"])
        fn = self._records.get(name)
        if fn is None:
            fn = self._records[name] = self.temp(f"read_{short_name(name)}_")
            self._pending.append((fn, schema))
        return fn

    def record_body(
        self, depth: int, schema: Any, cls: type[BaseModel], given: dict[str, str]
    ) -> str:
        """Emit reading ``schema``'s fields and building ``cls``; the local name.

        ``given`` maps model fields that do not come from the body (an
        event's ``header``) to the locals that hold them.
        """
        _check_model(cls)
        fields = cls.model_fields
        locals_: dict[str, str] = dict(given)
        for field in schema["fields"]:
            name = field["name"]
            info = fields.get(name)
            if info is None:
                raise Unsupported(f"{cls.__name__}.{name}")
            v = self.temp("f")
            self.value(depth, field["type"], v, _leaves(info.annotation))
            self._bounds(
                depth, v, info, optional=_nullable(self._resolve(field["type"]))
            )
            locals_[name] = v
        items = []
        for name, info in fields.items():
            if name in locals_:
                items.append(f"{name!r}: {locals_[name]}")
                continue
            items.append(f"{name!r}: {constant_default(cls, name, info)!r}")
        # As the generic path sets them: the fields it passes, i.e. those
        # read from the body and the given ones.
        fields_set = (
            "{" + ", ".join(repr(n) for n in locals_) + "}" if locals_ else "set()"
        )
        o = self.temp("o")
        c = self.const(cls, "C")
        self.line(depth, f"{o} = {self.new}({c})")
        self.line(depth, f"{self.set_dict}({o}, {{{', '.join(items)}}})")
        self.line(depth, f"{self.set_fields}({o}, {fields_set})")
        self.line(depth, f"{self.set_extra}({o}, None)")
        self.line(depth, f"{self.set_private}({o}, None)")
        for validator in cls.__pydantic_decorators__.model_validators.values():
            self.line(depth, f"{self.const(validator.func, 'validate')}({o})")
        if cls is Header and self._cache_headers:
            self._header_cache_store(depth, locals_["event_id"], o)
        return o

    def _bounds(self, depth: int, v: str, info: FieldInfo, *, optional: bool) -> None:
        terms = [
            f"{v} {op} {self.const(bound, 'bound')}" for op, bound in field_bounds(info)
        ]
        if not terms:
            return
        broken = " or ".join(terms)
        guard = f"{v} is not None and ({broken})" if optional else broken
        self.line(depth, f"if {guard}:")
        self.line(depth + 1, f"raise {self.miss}")

    def flush_records(self) -> None:
        """Emit the record readers referenced so far (and those they use)."""
        while self._pending:
            fn, schema = self._pending.pop()
            cls = model_class(schema["name"])
            self.line(0, f"def {fn}(data, p):")
            if cls is Header and self._cache_headers:
                self._header_cache_lookup()
            self.line(1, "L = len(data)")
            if cls is Header:
                self.line(1, "start = p")
            o = self.record_body(1, schema, cls, {})
            self.line(1, f"return {o}, p")

    def _header_cache_lookup(self) -> None:
        # Avro encodings are self-delimiting: bytes equal to a whole encoded
        # header decode to that header and end where it ends. So the cache is
        # tried before parsing, at each header length seen so far, behind a
        # filter on the first byte of the cached encodings.
        cache, lengths, firsts = (
            self.const(self._headers, "HC"),
            self.const(self._header_lengths, "HL"),
            self.const(self._header_firsts, "HF"),
        )
        self.line(1, f"if data[p] in {firsts}:")
        self.line(2, f"for n in {lengths}:")
        self.line(3, f"h = {cache}.get(data[p:p + n])")
        self.line(3, "if h is not None:")
        self.line(4, "return h, p + n")

    def _header_cache_store(self, depth: int, event_id: str, o: str) -> None:
        cache, lengths, firsts = (
            self.const(self._headers, "HC"),
            self.const(self._header_lengths, "HL"),
            self.const(self._header_firsts, "HF"),
        )
        self.line(depth, f"if {event_id} is None:")
        self.line(depth + 1, f"if len({cache}) >= {_CACHE_LIMIT}:")
        self.line(depth + 2, f"{cache}.clear()")
        self.line(depth + 1, f"{cache}[data[start:p]] = {o}")
        self.line(depth + 1, f"{firsts}.add(data[start])")
        self.line(
            depth + 1,
            f"if p - start not in {lengths} and len({lengths}) < {_HEADER_LENGTHS}:",
        )
        self.line(depth + 2, f"{lengths}.append(p - start)")


_LONG_MIN: Final = -(1 << 63)
_LONG_MAX: Final = (1 << 63) - 1


def _implied_by_long(rule: type, bound: object) -> bool:
    """Whether every Avro long already satisfies the bound (e.g. ``le=2**63-1``)."""
    if not isinstance(bound, int):
        return False
    if rule is annotated_types.Le:
        return bound >= _LONG_MAX
    if rule is annotated_types.Lt:
        return bound > _LONG_MAX
    if rule is annotated_types.Ge:
        return bound <= _LONG_MIN
    if rule is annotated_types.Gt:
        return bound < _LONG_MIN
    return False


def field_bounds(info: FieldInfo) -> list[tuple[str, object]]:
    """A field's bounds as ``(comparison that fails the value, bound)``.

    Bounds every Avro long already meets are left out.

    Raises:
        Unsupported: a constraint other than ``ge``/``gt``/``le``/``lt``.
    """
    bounds = []
    for item in info.metadata:
        rule = _BOUNDS.get(type(item))
        if rule is None:
            raise Unsupported(f"constraint {item!r}")
        attr, op = rule
        if not _implied_by_long(type(item), getattr(item, attr)):
            bounds.append((op, getattr(item, attr)))
    return bounds


def constant_default(cls: type[BaseModel], name: str, info: FieldInfo) -> object:
    """The default of a field not in the body, if one value can stand for all.

    Raises:
        Unsupported: no default, a factory, or a mutable default.
    """
    default = info.default
    if default is PydanticUndefined or info.default_factory is not None:
        raise Unsupported(f"{cls.__name__}.{name} has no constant default")
    if not isinstance(default, str | int | bool | type(None)):
        raise Unsupported(f"{cls.__name__}.{name} default is not immutable")
    return default


def _nullable(schema: Any) -> bool:
    return isinstance(schema, list) and "null" in schema


def _min_size(schema: Any, named: dict[str, Any]) -> int:
    """A lower bound on the encoded size of a value of ``schema``."""
    schema = named.get(schema, schema) if isinstance(schema, str) else schema
    if isinstance(schema, list):
        return 1
    if isinstance(schema, str):
        return 0 if schema == "null" else 1
    if schema["type"] == "record":
        return sum(_min_size(f["type"], named) for f in schema["fields"])
    return 1


def compile_event_reader(
    envelope: Any, body_offset: int, allowed: frozenset[str]
) -> EventReader | None:
    """A reader of whole frames written with ``envelope``, or None if not covered.

    ``allowed`` are the payload type names the topic may carry; other
    branches (and those the generator does not cover) miss, so the generic
    path decodes them or raises the typed error. The frame header
    (``body_offset`` bytes) is checked by the caller.
    """
    try:
        named, header_schema, branches = envelope_parts(envelope)
    except Unsupported:
        return None
    src = _ReaderSource(named)
    table: dict[int, str] = {}
    for index, branch in enumerate(branches):
        name = short_name(branch["name"])
        code = zigzag_bytes(index)
        if name not in allowed or len(code) != 1:
            continue
        try:
            # A trial run first: a branch that fails half-way must leave no
            # lines behind in the shared source.
            _payload_reader(_ReaderSource(named), branch, name)
        except Unsupported:
            continue
        _payload_reader(src, branch, name)
        table[code[0]] = f"read_{name}"
    if not table:
        return None
    try:
        header = src.reader_of(header_schema)
        src.flush_records()
    except Unsupported:
        return None
    src.line(0, "def read(data):")
    src.line(1, f"h, p = {header}(data, {body_offset})")
    src.line(1, "read_payload = _PAYLOADS.get(data[p])")
    src.line(1, "if read_payload is None:")
    src.line(2, f"raise {src.miss}")
    src.line(1, "event, p = read_payload(data, p + 1, h)")
    src.line(1, "if p != len(data):")
    src.line(2, f"raise {src.miss}")
    src.line(1, "return event")
    # The payload branch by its index byte (every index here is one byte).
    src.line(0, f"_PAYLOADS = {{{', '.join(f'{k}: {v}' for k, v in table.items())}}}")
    reader: EventReader = src.compile("event reader")["read"]
    return reader


def _payload_reader(src: _ReaderSource, branch: Any, name: str) -> None:
    cls = model_class(branch["name"])
    src.line(0, f"def read_{name}(data, p, h):")
    src.line(1, "L = len(data)")
    o = src.record_body(1, branch, cls, {"header": "h"})
    src.line(1, f"return {o}, p")
    src.flush_records()
