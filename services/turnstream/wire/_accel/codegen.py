"""Shared pieces of the generated fast paths: source building, names, varints.

Owns :class:`Source` (Python source assembled line by line, plus the
constants it refers to, compiled with ``exec``), :class:`Unsupported` (raised
at generation time for a schema/model pair the fast path does not cover),
:class:`Miss` (raised at run time when the fast path hands a value to the
generic one), the record-name → model-class table, the small varint table,
:func:`envelope_parts` (an event envelope taken apart) and
:func:`by_event_class` (one product per covered payload branch), for the
generated paths and the native plans alike. The generated functions are straight-line
code with no per-datum schema walk; the generic path (``to_record``/
``from_record`` and fastavro) stays the authority for anything unusual. Pure
Python; imports value types and the schema module's ``named_types``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Final, TypeVar, get_args, get_origin

from pydantic import BaseModel

from turnstream.content import Block, Chunk, Message, Usage
from turnstream.events import EVENT_TYPES, Cause, FailureInfo, Header, ToolTiming
from turnstream.wire.schemas import named_types

__all__ = [
    "MODEL_CLASSES",
    "PAIRS",
    "SMALL",
    "SMALL_LIMIT",
    "TAILS",
    "Miss",
    "Source",
    "Unsupported",
    "by_event_class",
    "envelope_parts",
    "model_class",
    "short_name",
    "write_int",
    "write_long",
    "zigzag_bytes",
]


_T = TypeVar("_T")


class Unsupported(Exception):
    """A schema/model pair the generator does not cover (the generic path does)."""


class Miss(Exception):
    """The fast path declines this value; the generic path handles it."""


def _members(union: object) -> tuple[type[BaseModel], ...]:
    """The model classes of a (possibly ``Annotated``) union."""
    if get_origin(union) is Annotated:
        union = get_args(union)[0]
    return tuple(
        t for t in get_args(union) if isinstance(t, type) and issubclass(t, BaseModel)
    )


# The content records are the members of content's unions (a tool result's
# content is a subset of Block), so a new block or chunk type needs no entry here.
_CONTENT: tuple[type[BaseModel], ...] = (
    *_members(Message),
    *_members(Block),
    *_members(Chunk),
    Usage,
    Header,
    Cause,
    FailureInfo,
    ToolTiming,
)

MODEL_CLASSES: Final[dict[str, type[BaseModel]]] = {
    cls.__name__: cls for cls in (*_CONTENT, *EVENT_TYPES)
}
"""Model class of each Avro record short name (the names are shared by design)."""


def short_name(full: str) -> str:
    """``turnstream.v1.TextBlock`` → ``TextBlock``."""
    return full.rpartition(".")[2]


def model_class(record_name: str) -> type[BaseModel]:
    """The model a record maps to, by short name.

    Raises:
        Unsupported: no model carries that name.
    """
    cls = MODEL_CLASSES.get(short_name(record_name))
    if cls is None:
        raise Unsupported(record_name)
    return cls


def zigzag_bytes(n: int) -> bytes:
    """The Avro varint of the long ``n``."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z & ~0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


SMALL_LIMIT: Final = 8192
"""Non-negative longs below this are written from :data:`SMALL` (1-2 bytes).

Counts, lengths and small numbers; the writers take larger ones up to 2**20
from :data:`PAIRS` and :data:`TAILS` (exact from 2**13 on, where the zigzag
value has more than 14 bits), the rest through :func:`write_long`.
"""

SMALL: Final[tuple[bytes, ...]] = tuple(zigzag_bytes(n) for n in range(SMALL_LIMIT))
"""The varint of every small non-negative long: counts, lengths, indexes."""


_LONG_MIN: Final = -(1 << 63)
_LONG_MAX: Final = (1 << 63) - 1
_INT_MIN: Final = -(1 << 31)
_INT_MAX: Final = (1 << 31) - 1

# Two varint groups at once: every 14-bit value as two bytes, both with the
# continuation bit, and every value below 2**14 as its final 1-2 bytes. A
# timestamp (~52 bits zigzagged) takes three lookups instead of eight loop
# rounds of shifting and appending.
PAIRS: Final[tuple[bytes, ...]] = tuple(
    bytes(((z & 0x7F) | 0x80, ((z >> 7) & 0x7F) | 0x80)) for z in range(1 << 14)
)
TAILS: Final[tuple[bytes, ...]] = tuple(
    bytes((z,)) if z < 0x80 else bytes(((z & 0x7F) | 0x80, z >> 7))
    for z in range(1 << 14)
)


def write_long(buf: bytearray, n: int) -> None:
    """Append the varint of the Avro long ``n``.

    Raises:
        OverflowError: ``n`` is beyond a long (as the generic writer does).
    """
    if not _LONG_MIN <= n <= _LONG_MAX:
        raise OverflowError("value out of range for an Avro long")
    z = (n << 1) ^ (n >> 63)
    while z >= 0x4000:
        buf += PAIRS[z & 0x3FFF]
        z >>= 14
    buf += TAILS[z]


def write_int(buf: bytearray, n: int) -> None:
    """Append the varint of the Avro int ``n``.

    Raises:
        OverflowError: ``n`` is beyond an int.
    """
    if not _INT_MIN <= n <= _INT_MAX:
        raise OverflowError("value out of range for an Avro int")
    write_long(buf, n)


class Source:
    """Python source for one generated module, and the constants it names."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._names: dict[str, object] = {}
        self._ids: dict[int, str] = {}
        self._counter = 0

    def line(self, depth: int, text: str) -> None:
        """Append ``text`` at indentation ``depth``."""
        self._lines.append("    " * depth + text)

    def const(self, value: object, hint: str = "k") -> str:
        """A global name bound to ``value`` in the generated module (reused)."""
        name = self._ids.get(id(value))
        if name is None:
            name = self.temp(hint)
            self._names[name] = value
            self._ids[id(value)] = name
        return name

    def temp(self, hint: str = "t") -> str:
        """A fresh identifier."""
        self._counter += 1
        return f"_{hint}{self._counter}"

    def text(self) -> str:
        """The source so far (for debugging the generator)."""
        return "\n".join(self._lines) + "\n"

    def compile(self, label: str) -> dict[str, Any]:
        """Run the source; the resulting namespace (constants and functions)."""
        namespace: dict[str, Any] = dict(self._names)
        code = compile(self.text(), f"<turnstream.wire generated: {label}>", "exec")
        exec(code, namespace)  # noqa: S102 - source generated here from the schema
        return namespace


def envelope_parts(envelope: Any) -> tuple[dict[str, Any], Any, list[Any]]:
    """An event envelope's named types, header record and payload records.

    Names are resolved: the header and every payload branch come back as
    record schemas, the branches in union order (their index is the union's).

    Raises:
        Unsupported: not a ``{header, payload}`` envelope.
    """
    named: dict[str, Any] = named_types(envelope)
    if [f["name"] for f in envelope["fields"]] != ["header", "payload"]:
        raise Unsupported(str(envelope.get("name")))
    header, payload = (
        named.get(t, t) if isinstance(t, str) else t
        for t in (f["type"] for f in envelope["fields"])
    )
    branches = [named.get(e, e) if isinstance(e, str) else e for e in payload]
    return named, header, branches


def by_event_class(
    branches: list[Any], build: Callable[[int, Any, type[BaseModel]], _T]
) -> dict[type[BaseModel], _T]:
    """``build(index, branch, cls)`` for each payload branch, keyed by event class.

    A branch the generator does not cover (``Unsupported`` from the name or
    from ``build``) is left out: the codec handles that class on the generic path.
    """
    built: dict[type[BaseModel], _T] = {}
    for index, branch in enumerate(branches):
        try:
            cls = model_class(branch["name"])
            built[cls] = build(index, branch, cls)
        except Unsupported:
            continue
    return built
