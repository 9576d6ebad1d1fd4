"""The native fast path: plans for the C interpreter ``_native``, from schema + models.

Owns :class:`NativePath` (a topic's plans), the plan builders
(:func:`write_plans`, :func:`read_plan`, :func:`item_plan`), the extension's
loading (:func:`native_available`, :func:`is_current`) and the calls into it
(:data:`write`, :data:`read`). The same analysis as
the generated Python fast path (:mod:`~turnstream.wire._accel.event_writer`,
:mod:`~turnstream.wire._accel.event_reader`: which schema/model pairs are covered,
which model rules a decoded value must meet), expressed as nested tuples that
``_native.write``/``_native.read`` walk, so encode and decode run without the
interpreter. The C side accepts less than the Python side, never more: any
value it does not expect is declined (``write``/``read`` return None), and the
codec runs the Python fast path and the generic path behind it, which stay the
authority for errors.

The extension is built by the package's build hook (``hatch_build.py``, or
``make native``) where a C compiler exists; without it, or with
``TURNSTREAM_CODEC`` other than ``auto`` (see
:mod:`~turnstream.wire._accel.switch`), :func:`native_available` is False and
the codec runs without it (same bytes, same values). Imports value types and
the generators' analysis; never fastavro.
"""

from __future__ import annotations

import enum
import hashlib
import importlib
import logging
import struct
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any, Final
from uuid import UUID, SafeUUID

from pydantic import BaseModel

from turnstream.errors import ConfigError
from turnstream.events import EventBase, Header
from turnstream.validation import id_rules
from turnstream.wire._accel.codegen import (
    Miss,
    Unsupported,
    by_event_class,
    envelope_parts,
    model_class,
    short_name,
    zigzag_bytes,
)
from turnstream.wire._accel.event_reader import (
    _accepts,
    _check_model,
    _leaves,
    _literal_values,
    _min_size,
    _nullable,
    constant_default,
    enum_table,
    field_bounds,
    uuid_at,
)
from turnstream.wire._accel.switch import NATIVE_ENV, codec_choice
from turnstream.wire.schemas import named_types

__all__ = ["NATIVE_ENV", "NativePath", "native_available", "read", "write"]


_SOURCE: Final = Path(__file__).with_name("_native.c")
_log = logging.getLogger(__name__)


def is_current(module: ModuleType, source: Path = _SOURCE) -> bool:
    """Whether ``module`` was built from the ``_native.c`` beside this file.

    The plans' layout is shared by that source and this module, so an
    extension built from an older source (edited or updated, not rebuilt) must
    not walk them. Without the source to compare (a stripped install), the
    build is trusted.
    """
    try:
        text = source.read_bytes()
    except OSError:
        return True
    digest = hashlib.sha256(text).hexdigest()[:16]
    return bool(getattr(module, "SOURCE_DIGEST", None) == digest)


def _load() -> ModuleType | None:
    try:
        if codec_choice() != "auto":
            return None
    except ConfigError:
        return None  # the codec raises it, where it is built
    try:
        _native = importlib.import_module("turnstream.wire._accel._native")
    except ImportError:
        return None
    if not is_current(_native):
        _log.warning(
            "the native codec extension was built from another _native.c; "
            "using the Python paths (rebuild it: make native, or reinstall)"
        )
        return None
    # The slot descriptors model_construct sets besides the fields.
    slots = ("__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")
    _native.configure(
        Miss, UUID, SafeUUID.unknown, uuid_at, *(BaseModel.__dict__[s] for s in slots)
    )
    module: ModuleType = _native
    return module


_NATIVE: Final = _load()


def native_available() -> bool:
    """Whether the codec's fast path runs in C here (built, and not switched off)."""
    return _NATIVE is not None


# Opcodes, as in _native.c.
(
    W_CONST,
    W_NULL,
    W_BOOL,
    W_LONG,
    W_INT,
    W_STRING,
    W_BYTES,
    W_UUID,
    W_TIMESTAMP,
    W_ENUM,
    W_ARRAY,
    W_OPTIONAL,
    W_UNION,
    W_RECORD,
    W_CHECK,
) = range(15)
(
    R_NULL,
    R_BOOL,
    R_LONG,
    R_STRING,
    R_BYTES,
    R_UUID,
    R_OPT_UUID,
    R_TIMESTAMP,
    R_ENUM,
    R_ARRAY,
    R_UNION,
    R_RECORD,
    R_MISS,
) = range(13)
F_GIVEN_HEADER: Final = 1
F_HEADER_CACHE: Final = 2
_MAX_FIELDS: Final = 64
# The raising comparison of each bound, as Python's rich-compare op codes.
_COMPARE: Final = {"<": 0, "<=": 1, ">": 4, ">=": 5}

Plan = tuple[Any, ...]


class _Planner:
    """Shared by both directions: named types and recursion guard."""

    def __init__(self, named: dict[str, Any]) -> None:
        self._named = named
        self._records: dict[str, Plan] = {}
        self._open: set[str] = set()

    def resolve(self, schema: Any) -> Any:
        return self._named.get(schema, schema) if isinstance(schema, str) else schema

    def record(self, schema: Any, build: Any) -> Plan:
        name = str(schema["name"])
        plan = self._records.get(name)
        if plan is None:
            if name in self._open:
                raise Unsupported(f"recursive record {name}")
            self._open.add(name)
            try:
                plan = self._records[name] = build()
            finally:
                self._open.discard(name)
        return plan


class _WritePlanner(_Planner):
    """Encode plans: the decisions of ``_event_writer._WriterSource``."""

    def value(self, schema: Any, annotation: Any) -> Plan:  # noqa: PLR0911 - per kind
        schema = self.resolve(schema)
        if isinstance(schema, str):
            return self._primitive(schema)
        if isinstance(schema, list):
            return self._union(schema)
        logical = schema.get("logicalType")
        if logical == "uuid":
            return (W_UUID,)
        if logical == "timestamp-micros":
            return (W_TIMESTAMP,)
        kind = schema["type"]
        if kind == "record":
            return self.record_plan(schema)
        if kind == "enum":
            table = {s: zigzag_bytes(i) for i, s in enumerate(schema["symbols"])}
            cls = (
                annotation
                if isinstance(annotation, type) and issubclass(annotation, enum.Enum)
                else None
            )
            return (W_ENUM, table, cls)
        if kind == "array":
            return (W_ARRAY, self.value(schema["items"], None))
        if logical is None and isinstance(kind, str):
            return self._primitive(kind)
        raise Unsupported(str(kind))

    @staticmethod
    def _primitive(kind: str) -> Plan:
        codes = {
            "null": W_NULL,
            "boolean": W_BOOL,
            "long": W_LONG,
            "int": W_INT,
            "string": W_STRING,
            "bytes": W_BYTES,
        }
        if kind not in codes:
            raise Unsupported(kind)
        return (codes[kind],)

    def _union(self, branches: list[Any]) -> Plan:
        branches = [self.resolve(b) for b in branches]
        if len(branches) == 2 and "null" in branches:
            null = branches.index("null")
            other = self.value(branches[1 - null], None)
            return (W_OPTIONAL, zigzag_bytes(null), zigzag_bytes(1 - null), other)
        if not all(isinstance(b, dict) and b.get("type") == "record" for b in branches):
            raise Unsupported("a union of several non-record branches")
        return (
            W_UNION,
            {
                model_class(b["name"]): (zigzag_bytes(i), self.record_plan(b))
                for i, b in enumerate(branches)
            },
        )

    def fields(self, schema: Any, cls: type[BaseModel]) -> tuple[Plan, ...]:
        model_fields = cls.model_fields
        out = []
        for field in schema["fields"]:
            info = model_fields.get(field["name"])
            if info is None:
                raise Unsupported(f"{cls.__name__}.{field['name']}")
            out.append((field["name"], self.value(field["type"], info.annotation)))
        return tuple(out)

    def record_plan(self, schema: Any) -> Plan:
        cls = model_class(schema["name"])
        return self.record(schema, lambda: (W_RECORD, cls, self.fields(schema, cls)))


class _ReadPlanner(_Planner):
    """Decode plans: the decisions and model rules of ``_ReaderSource``."""

    def __init__(self, named: dict[str, Any]) -> None:
        super().__init__(named)
        self._cache_headers = bool(Header.model_config.get("frozen"))

    def value(self, schema: Any, leaves: list[Any]) -> Plan:  # noqa: PLR0911 - per kind
        schema = self.resolve(schema)
        if isinstance(schema, list):
            return self._union(schema, leaves)
        kind = schema if isinstance(schema, str) else None
        if isinstance(schema, dict):
            logical = schema.get("logicalType")
            if logical == "uuid":
                _require(leaves, UUID)
                return (R_UUID,)
            if logical == "timestamp-micros":
                _require(leaves, datetime)
                return (R_TIMESTAMP,)
            if logical is None and isinstance(schema["type"], str):
                kind = schema["type"]
        if kind == "record":
            if model_class(schema["name"]) not in leaves:
                raise Unsupported(f"{schema['name']} for {leaves!r}")
            return self.record_plan(schema, given=False)
        if kind == "enum":
            return self._enum(schema, leaves)
        if kind == "array":
            if _min_size(self.resolve(schema["items"]), self._named) < 1:
                raise Unsupported("an array of values that take no bytes")
            return (R_ARRAY, self.value(schema["items"], leaves))
        return self._primitive(kind, leaves)

    @staticmethod
    def _primitive(kind: str | None, leaves: list[Any]) -> Plan:
        if kind in ("long", "int"):
            _require(leaves, int)
            return (R_LONG,)
        if kind == "boolean":
            _require(leaves, bool)
            return (R_BOOL,)
        if kind == "string":
            _require(leaves, str)
            values = _literal_values(leaves)
            return (R_STRING, None if values is None else frozenset(values))
        if kind == "bytes":
            _require(leaves, bytes)
            return (R_BYTES,)
        if kind == "null":
            _require(leaves, type(None))
            return (R_NULL,)
        raise Unsupported(str(kind))

    @staticmethod
    def _enum(schema: Any, leaves: list[Any]) -> Plan:
        return (R_ENUM, enum_table(schema, leaves))

    def _union(self, branches: list[Any], leaves: list[Any]) -> Plan:
        branches = [self.resolve(b) for b in branches]
        if len(branches) == 2 and branches[0] == "null":
            other = branches[1]
            if isinstance(other, dict) and other.get("logicalType") == "uuid":
                _require(leaves, UUID)
                _require(leaves, type(None))
                return (R_OPT_UUID,)
        if len(branches) > 64:
            raise Unsupported("a union of more than 64 branches")
        plans: list[Plan] = []
        for branch in branches:
            if branch == "null":
                _require(leaves, type(None))
                plans.append((R_NULL,))
            elif isinstance(branch, dict) and branch.get("type") == "record":
                if model_class(branch["name"]) in leaves:
                    plans.append(self.record_plan(branch, given=False))
                else:
                    plans.append((R_MISS,))
            else:
                plans.append(self.value(branch, leaves))
        return (R_UNION, tuple(plans))

    def record_plan(self, schema: Any, *, given: bool) -> Plan:
        if given:
            return self._record(schema, given=True)
        return self.record(schema, lambda: self._record(schema, given=False))

    def _record(self, schema: Any, *, given: bool) -> Plan:
        cls = model_class(schema["name"])
        _check_model(cls)
        model_fields = cls.model_fields
        index: dict[str, int] = {"header": 0} if given else {}
        fields: list[Plan] = []
        for field in schema["fields"]:
            name = field["name"]
            info = model_fields.get(name)
            if info is None:
                raise Unsupported(f"{cls.__name__}.{name}")
            node = self.value(field["type"], _leaves(info.annotation))
            bounds = [(_COMPARE[op], bound) for op, bound in field_bounds(info)]
            optional = _nullable(self.resolve(field["type"]))
            node, rest = _bounded_longs(node, bounds)
            index[name] = len(index)
            fields.append((node, rest, optional))
        if len(fields) > _MAX_FIELDS:
            raise Unsupported(f"{cls.__name__}: more than {_MAX_FIELDS} fields")
        validators = tuple(
            v.func for v in cls.__pydantic_decorators__.model_validators.values()
        )
        flags = F_GIVEN_HEADER if given else 0
        cache: object = None
        event_id = -1
        if cls is Header and self._cache_headers:
            flags |= F_HEADER_CACHE
            # Headers by their encoded bytes, the lengths seen, their first bytes.
            cache = ({}, [], set())
            event_id = index["event_id"]
        return (
            R_RECORD,
            cls,
            tuple(fields),
            # Every model field in model order: read (an index into the
            # values read, the given header first) or its constant default.
            tuple(
                (name, False, index[name])
                if name in index
                else (name, True, constant_default(cls, name, info))
                for name, info in model_fields.items()
            ),
            frozenset(index),
            validators,
            flags,
            cache,
            event_id,
        )


_LONG_MIN: Final = -(1 << 63)
_LONG_MAX: Final = (1 << 63) - 1


def _bounded_longs(node: Plan, bounds: list[tuple[int, Any]]) -> tuple[Plan, Plan]:
    """Integer bounds folded into the long reads they apply to: ``(R_LONG, lo, hi)``.

    Returns the node and the bounds left to check on the value (all of them
    when the field is not a (nullable) long or a bound is not an int).
    """
    if not bounds or not all(type(b) is int for _, b in bounds):
        return node, tuple(bounds)
    lo, hi = _LONG_MIN, _LONG_MAX
    for op, bound in bounds:
        # The comparison that fails the value, as in _event_reader._BOUNDS.
        if op == _COMPARE["<"]:  # ge
            lo = max(lo, bound)
        elif op == _COMPARE["<="]:  # gt
            lo = max(lo, bound + 1)
        elif op == _COMPARE[">"]:  # le
            hi = min(hi, bound)
        else:  # lt
            hi = min(hi, bound - 1)
    if lo > hi:
        lo, hi = 1, 0  # nothing passes
    # Two native int64, as the C side reads them.
    bounded = (R_LONG, struct.pack("=qq", lo, hi))
    if node == (R_LONG,):
        return bounded, ()
    if node[0] == R_UNION and all(b in ((R_LONG,), (R_NULL,)) for b in node[1]):
        return (R_UNION, tuple(bounded if b == (R_LONG,) else b for b in node[1])), ()
    return node, tuple(bounds)


def _require(leaves: list[Any], python_type: type) -> None:
    if not _accepts(leaves, python_type):
        raise Unsupported(f"{python_type.__name__} for {leaves!r}")


def _rules(cls: type[BaseModel]) -> Plan:
    rules = id_rules(cls) if issubclass(cls, EventBase) else None
    if rules is None:
        raise Unsupported(f"{cls.__name__}: no plain id rules")
    return tuple(tuple(rule) for rule in rules)


def item_plan(container: Any, schema: Any) -> Plan | None:
    """The encode plan of one value of ``schema`` (named types from ``container``).

    For array items written apart from their record (the loop state's history
    messages); None where the native path is not built or does not cover it.
    """
    if _NATIVE is None:
        return None
    try:
        return _WritePlanner(named_types(container)).value(schema, None)
    except Unsupported:
        return None


def write_plans(
    envelope: Any, prefix: bytes, *, validated: bool
) -> dict[type[BaseModel], Plan]:
    """One encode plan per event class the envelope's payload union carries.

    ``validated``: the plan first checks the event's ids as ``validate_event``
    does (a broken rule misses, and the Python path raises the typed error).
    """
    named, header, branches = envelope_parts(envelope)

    def plan(index: int, branch: Any, cls: type[BaseModel]) -> Plan:
        planner = _WritePlanner(named)
        check = ((None, (W_CHECK, _rules(cls))),) if validated else ()
        fields = (
            *check,
            (None, (W_CONST, prefix)),
            ("header", planner.record_plan(header)),
            (None, (W_CONST, zigzag_bytes(index))),
            *planner.fields(branch, cls),
        )
        return (W_RECORD, cls, fields)

    return by_event_class(branches, plan)


def read_plan(
    envelope: Any, prefix: bytes, allowed: frozenset[str], *, validated: bool
) -> Plan | None:
    """The decode plan of whole frames (``prefix`` + body) written with ``envelope``.

    None where no payload type is covered.

    ``validated``: a decoded event must also pass its id rules (else it
    misses, and the Python path raises the typed error).
    """
    try:
        named, header, branches = envelope_parts(envelope)
    except Unsupported:
        return None
    planner = _ReadPlanner(named)
    payloads: list[Plan | None] = []
    rules: list[Plan | None] = []
    for branch in branches:
        plan: Plan | None = None
        rule: Plan | None = None
        if short_name(branch["name"]) in allowed and len(payloads) < 64:
            try:
                plan = planner.record_plan(branch, given=True)
                if validated:
                    rule = _rules(model_class(branch["name"]))
            except Unsupported:
                plan = None
        payloads.append(plan)
        rules.append(rule)
    if not any(payloads):
        return None
    try:
        header_plan = planner.record_plan(header, given=False)
    except Unsupported:
        return None
    return (prefix, header_plan, tuple(payloads), tuple(rules))


class NativePath:
    """The native plans of one event topic (see the module doc).

    Empty (no writers, no reader) where the extension is not available or no
    class is given, so a caller needs no second branch.

    Args:
        envelope: the topic's current (writer) schema, parsed.
        prefix: the frame header its frames start with.
        classes: the event classes the topic carries.
        validated: plans also check the ids as ``validate_event`` does.
    """

    __slots__ = ("prefix", "reader", "writers")

    def __init__(
        self,
        envelope: Any,
        prefix: bytes,
        classes: frozenset[type[EventBase]],
        *,
        validated: bool,
    ) -> None:
        self.prefix = prefix
        self.writers: dict[type[BaseModel], Plan] = {}
        """Encode plan by exact event class, for :data:`write`."""
        self.reader: Plan | None = None
        """Decode plan of frames that start with ``prefix``, for :data:`read`
        (which checks the prefix)."""
        if _NATIVE is None or not classes:
            return
        self.writers = {
            cls: plan
            for cls, plan in write_plans(envelope, prefix, validated=validated).items()
            if cls in classes
        }
        self.reader = read_plan(
            envelope,
            prefix,
            frozenset(cls.__name__ for cls in classes),
            validated=validated,
        )

    @property
    def readers(self) -> frozenset[str]:
        """The event type names the decode plan covers."""
        if self.reader is None:
            return frozenset()
        return frozenset(p[1].__name__ for p in self.reader[2] if p is not None)


def _write_unavailable(plan: Plan, value: object, limit: int) -> bytes | None:
    return None


def _read_unavailable(plan: Plan, data: bytes) -> Any:
    return None


write: Final[Callable[[Plan, object, int], bytes | None]] = (
    _write_unavailable if _NATIVE is None else _NATIVE.write
)
"""``write(plan, event, limit)``: the frame, or None (declined, or longer than
``limit``): then the Python paths write it or raise the typed error."""
read: Final[Callable[[Plan, bytes], Any]] = (
    _read_unavailable if _NATIVE is None else _NATIVE.read
)
"""``read(plan, data)``: the event, or None (declined): then the Python paths
decode it or raise the typed error."""
