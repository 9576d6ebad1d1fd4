"""The schema set: loads ``schemas/`` once and maps fingerprints to schemas.

Owns :class:`SchemaSet` (the parsed top-level schema of every topic, current
and historical), :class:`Topic`, the CRC-64-AVRO fingerprint of a schema and
the load-time lint that keeps decoding bounded. Imports fastavro and
:mod:`turnstream.errors`; never the runtime, value types or aiokafka.

Layout of a schema directory (see ``schemas/README.md``)::

    topics.json                       {"namespace": …, "topics": {topic: full name}}
    <namespace>.<Name>.avsc           one named type per file
    history/<version>/…               earlier committed sets, same layout

A writer always uses the *current* set. A reader looks the frame's
fingerprint up among the current set and every history set of the topic, so
data written by an earlier committed set stays readable (it is resolved into
the current schema).

One module on purpose (~440 lines): loading, naming and fingerprinting the schema
set are one job, done once at start-up.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Final

from fastavro.schema import fingerprint, parse_schema, to_parsing_canonical_form
from fastavro.types import Schema

from turnstream import resources
from turnstream.errors import ConfigError

__all__ = [
    "CURRENT_VERSION",
    "HISTORY_DIR",
    "MANIFEST",
    "NAMESPACE",
    "SchemaSet",
    "Topic",
    "TopicSchema",
    "default_schema_dir",
    "expand_named",
    "fingerprint_of",
    "history_dirs",
    "load_schema_file",
    "load_topic_schemas",
    "named_types",
]

NAMESPACE: Final = "turnstream.v1"
"""Namespace of every named type the codec writes."""

MANIFEST: Final = "topics.json"
"""Per-set file naming the top-level (value) schema of each topic."""

HISTORY_DIR: Final = "history"
"""Sub-directory holding earlier committed schema sets, one per version."""

CURRENT_VERSION: Final = "current"
"""The version label of the set at the top of the schema directory."""

_SETTING = "schema_dir"


class Topic(StrEnum):
    """The topics whose values the codec reads and writes."""

    EVENTS = "turnstream.events.v1"
    DELTAS = "turnstream.deltas.v1"
    COMMANDS = "turnstream.commands.v1"
    LOOPS = "turnstream.loops.v1"


@dataclass(frozen=True, slots=True)
class TopicSchema:
    """One topic's top-level schema in one schema set.

    Attributes:
        topic: the topic it is the value schema of.
        name: its full name, e.g. ``turnstream.v1.EventEnvelope``.
        version: ``"current"`` or the history directory name.
        fingerprint: the 8-byte little-endian CRC-64-AVRO fingerprint.
        parsed: the fastavro-parsed schema, named types inlined.
    """

    topic: Topic
    name: str
    version: str
    fingerprint: bytes
    parsed: Schema

    @property
    def fingerprint_hex(self) -> str:
        """The fingerprint as lowercase hex (the ``ts-schema`` header)."""
        return self.fingerprint.hex()


def default_schema_dir() -> Path:
    """The schema directory used when none is passed.

    The one the process chose (``$TURNSTREAM_SCHEMA_DIR`` for the CLI, see
    :func:`turnstream.resources.use_schema_dir`), else the schemas packaged in the
    installed wheel, else the source checkout's ``schemas/`` (editable
    installs); see :func:`turnstream.resources.schema_dir`.
    """
    return resources.schema_dir()


def fingerprint_of(parsed: Schema) -> bytes:
    """The CRC-64-AVRO fingerprint of ``parsed``, as the 8 frame bytes.

    fastavro returns the hex of the little-endian bytes (as Java does), so
    ``bytes.fromhex`` gives exactly what single-object encoding writes.
    """
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"))


def load_topic_schemas(directory: Path, version: str) -> dict[Topic, TopicSchema]:
    """Load and fingerprint the top-level schema of every topic in one set.

    Every ``.avsc`` file of the set is read into one table of named types
    (checking each file defines the name it is called by). Each top-level
    schema is then expanded from that shared table into its self-contained
    form -- each named type defined at its first use, referenced by full name
    afterwards, as Avro's canonical form requires -- and parsed by fastavro.
    (fastavro's own ``load_schema`` recurses without end, and crashes the
    interpreter, when a file does not define the name it is looked up by.)

    Args:
        directory: a directory holding ``topics.json`` and the ``.avsc`` files.
        version: the label recorded on each :class:`TopicSchema`.

    Raises:
        ConfigError: the manifest or a schema is missing or invalid, or a
            schema could make decoding unbounded (see :func:`_check_bounded`).
    """
    names = _read_manifest(directory)
    files = _read_named_types(directory)
    loaded: dict[Topic, TopicSchema] = {}
    for topic, name in names.items():
        if name not in files:
            raise ConfigError(
                _SETTING, f"{directory / name}.avsc is missing (named in {MANIFEST})"
            )
        parsed = _parse_named(files, name)
        loaded[topic] = TopicSchema(
            topic=topic,
            name=name,
            version=version,
            fingerprint=fingerprint_of(parsed),
            parsed=parsed,
        )
    return loaded


def load_schema_file(directory: Path, full_name: str) -> Schema:
    """Load one top-level schema ``<full_name>.avsc`` from a schema directory.

    The same loading as :func:`load_topic_schemas` (every file of the
    directory read once, references expanded, bounded-decoding lint), for
    schema sets without a ``topics.json``.

    Raises:
        ConfigError: the file is missing, or any file fails to load.
    """
    files = _read_named_types(directory)
    if full_name not in files:
        raise ConfigError(_SETTING, f"{directory / full_name}.avsc is missing")
    return _parse_named(files, full_name)


def expand_named(directory: Path, full_name: str) -> Schema:
    """The self-contained JSON form of ``<full_name>.avsc`` in a schema directory.

    Every named type is defined once, at its first use (a depth-first walk,
    so each definition comes before any reference to it), docs and defaults
    kept: the form any Avro library parses from one file, and the one the
    frame fingerprint is taken over. Not parsed or linted; see
    :func:`load_schema_file` for that.

    Raises:
        ConfigError: a file is missing or does not hold one named type.
    """
    files = _read_named_types(directory)
    if full_name not in files:
        raise ConfigError(_SETTING, f"{directory / full_name}.avsc is missing")
    return _Expander(files, f"{full_name}.avsc").expand(
        full_name, full_name.rpartition(".")[0]
    )


def _parse_named(files: Mapping[str, Mapping[str, object]], name: str) -> Schema:
    where = f"{name}.avsc"
    try:
        expanded = _Expander(files, where).expand(name, name.rpartition(".")[0])
        parsed = parse_schema(expanded, named_schemas={})
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(
            _SETTING, f"{where} does not parse: {type(exc).__name__}: {exc}"
        ) from exc
    _check_bounded(parsed, where)
    return parsed


@dataclass(frozen=True, slots=True)
class SchemaSet:
    """The current schema of each topic plus every readable writer schema.

    Load it once at start-up with :meth:`load` and share it; it is immutable.
    """

    directory: Path
    current: Mapping[Topic, TopicSchema]
    readable: Mapping[Topic, Mapping[bytes, TopicSchema]]

    @classmethod
    def load(cls, directory: Path | None = None) -> SchemaSet:
        """Load the current set and every ``history/<version>/`` set.

        Args:
            directory: the schema directory; defaults to
                :func:`default_schema_dir`.

        Raises:
            ConfigError: any set fails to load, or a fingerprint is claimed by
                two topics.
        """
        root = directory if directory is not None else default_schema_dir()
        current = load_topic_schemas(root, CURRENT_VERSION)
        readable: dict[Topic, dict[bytes, TopicSchema]] = {t: {} for t in Topic}
        owner: dict[bytes, Topic] = {}
        # Current first: on a fingerprint shared with a history set (same
        # canonical form, so the same binary encoding) the current one wins.
        sets = [current, *(load_topic_schemas(d, d.name) for d in history_dirs(root))]
        for schema_set in sets:
            for topic, schema in schema_set.items():
                if owner.setdefault(schema.fingerprint, topic) is not topic:
                    raise ConfigError(
                        _SETTING,
                        f"fingerprint {schema.fingerprint_hex} is used by two topics",
                    )
                readable[topic].setdefault(schema.fingerprint, schema)
        return cls(directory=root, current=current, readable=readable)

    def writer_schema(self, topic: Topic) -> TopicSchema:
        """The schema values of ``topic`` are written with."""
        return self.current[topic]

    def reader_for(self, topic: Topic, fingerprint: bytes) -> TopicSchema | None:
        """The writer schema of a frame on ``topic``, or ``None`` if unknown."""
        return self.readable[topic].get(fingerprint)

    def versions(self) -> Iterator[str]:
        """Every version label this set can read (current first)."""
        seen: dict[str, None] = {}
        for by_fp in self.readable.values():
            for schema in by_fp.values():
                seen.setdefault(schema.version)
        return iter(seen)


_PRIMITIVES = frozenset(
    {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
)
_NAMED_KINDS = frozenset({"record", "error", "enum", "fixed"})


def _full_name(schema: Mapping[str, object], namespace: str) -> str:
    name = str(schema.get("name", ""))
    if "." in name:
        return name
    space = schema.get("namespace", namespace)
    return f"{space}.{name}" if space else name


def _read_named_types(directory: Path) -> dict[str, Mapping[str, object]]:
    """Every ``<full name>.avsc`` of a set, keyed by the name it defines."""
    files: dict[str, Mapping[str, object]] = {}
    for path in sorted(directory.glob("*.avsc")):
        try:
            schema = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(_SETTING, f"{path.name} does not parse: {exc}") from exc
        if not isinstance(schema, dict) or schema.get("type") not in _NAMED_KINDS:
            raise ConfigError(_SETTING, f"{path.name} must hold one named type")
        full = _full_name(schema, "")
        if path.name != f"{full}.avsc":
            raise ConfigError(
                _SETTING, f"{path.name} defines {full}, not its file name"
            )
        files[full] = schema
    return files


class _Expander:
    """Inline named types from the set's table at their first use."""

    def __init__(self, files: Mapping[str, Mapping[str, object]], where: str) -> None:
        self.files = files
        self.where = where
        self.defined: set[str] = set()

    def expand(self, schema: object, namespace: str) -> Schema:  # noqa: PLR0911 - one return per schema form
        if isinstance(schema, str):
            return self._reference(schema, namespace)
        if isinstance(schema, list):
            return [self.expand(branch, namespace) for branch in schema]
        if not isinstance(schema, dict):
            raise ConfigError(_SETTING, f"{self.where}: not a schema: {schema!r}")
        kind = schema.get("type")
        if kind in _NAMED_KINDS:
            return self._define(schema, namespace)
        if kind == "array":
            return {**schema, "items": self.expand(schema.get("items"), namespace)}
        if kind == "map":
            return {**schema, "values": self.expand(schema.get("values"), namespace)}
        if kind in _PRIMITIVES:
            return dict(schema)  # a primitive, possibly with a logical type
        return self.expand(kind, namespace)  # {"type": <name or nested schema>}

    def _reference(self, name: str, namespace: str) -> Schema:
        if name in _PRIMITIVES:
            return name
        full = name if "." in name or not namespace else f"{namespace}.{name}"
        if full in self.defined:
            return full
        if full not in self.files:
            raise ConfigError(_SETTING, f"{self.where}: unknown type {full}")
        return self._define(self.files[full], namespace)

    def _define(self, schema: Mapping[str, object], namespace: str) -> Schema:
        full = _full_name(schema, namespace)
        if full in self.defined:
            raise ConfigError(_SETTING, f"{self.where}: {full} is defined twice")
        self.defined.add(full)
        out = dict(schema)
        fields = schema.get("fields")
        if isinstance(fields, list):
            inner = full.rpartition(".")[0]
            out["fields"] = [
                {**f, "type": self.expand(f.get("type"), inner)}
                if isinstance(f, dict)
                else f
                for f in fields
            ]
        return out


def _read_manifest(directory: Path) -> dict[Topic, str]:
    path = directory / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(_SETTING, f"cannot read {path}: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("namespace") != NAMESPACE:
        raise ConfigError(_SETTING, f"{path} must declare namespace {NAMESPACE}")
    topics = manifest.get("topics")
    if not isinstance(topics, dict) or set(topics) != {t.value for t in Topic}:
        raise ConfigError(
            _SETTING, f"{path} must map exactly the topics {sorted(Topic)}"
        )
    names: dict[Topic, str] = {}
    for topic in Topic:
        name = topics[topic.value]
        if not isinstance(name, str) or not name.startswith(f"{NAMESPACE}."):
            raise ConfigError(_SETTING, f"{path}: bad schema name for {topic}")
        names[topic] = name
    return names


def history_dirs(root: Path) -> list[Path]:
    """The earlier committed sets under ``root/history`` that have a manifest.

    Sorted by version (directory name); empty when there is no history.
    """
    history = root / HISTORY_DIR
    if not history.is_dir():
        return []
    return sorted(d for d in history.iterdir() if (d / MANIFEST).is_file())


# Avro primitives that take no bytes on the wire.
_ZERO_WIDTH = frozenset({"null"})


def _check_bounded(parsed: Schema, where: str) -> None:
    """Refuse arrays and maps whose items can take zero bytes.

    A decoder reads an array's declared item count from the payload. If an
    item may occupy no bytes (``null``, a record with no fields …), a tiny
    payload declaring 2**62 items would spin for ever. When every item takes
    at least one byte, a count larger than the remaining bytes fails with a
    short read instead, so decoding stays linear in the payload size.
    """
    named: dict[str, Schema] = {}
    for kind, items in _containers(parsed, named):
        if _min_width(items, named, frozenset()) == 0:
            raise ConfigError(_SETTING, f"{where}: {kind} items may be zero bytes wide")


def _containers(
    schema: Schema, named: dict[str, Schema]
) -> Iterator[tuple[str, Schema]]:
    if isinstance(schema, list):
        for branch in schema:
            yield from _containers(branch, named)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error", "enum", "fixed") and "name" in schema:
            named.setdefault(str(schema["name"]), schema)
        if kind in ("record", "error"):
            for field in schema.get("fields", []):
                yield from _containers(field["type"], named)
        elif kind == "array":
            yield "array", schema["items"]
            yield from _containers(schema["items"], named)
        elif kind == "map":
            yield "map", schema["values"]
            yield from _containers(schema["values"], named)


def _min_width(
    schema: Schema, named: Mapping[str, Schema], seen: frozenset[str]
) -> int:
    """The fewest bytes a value of ``schema`` can be encoded in."""
    if isinstance(schema, list):
        return 1  # the branch index
    if isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error"):
            inner = seen | {str(schema.get("name", ""))}
            return sum(_min_width(f["type"], named, inner) for f in schema["fields"])
        if kind == "fixed":
            return int(schema["size"])
        if kind in ("array", "map", "enum"):
            return 1  # a block count, or a symbol index
        # A primitive spelled as {"type": …}, possibly with a logical type.
        schema = str(kind)
    width = 0 if schema in _ZERO_WIDTH else 1
    if schema in named and schema not in seen:
        width = _min_width(named[schema], named, seen | {schema})
    return width


def named_types(
    schema: Schema, out: dict[str, Schema] | None = None
) -> dict[str, Schema]:
    """Every named type defined inside a parsed schema, by full name.

    A parsed schema inlines a named type where it first occurs and refers to
    it by name afterwards; a reader of the schema resolves those names here.
    """
    out = {} if out is None else out
    if isinstance(schema, list):
        for branch in schema:
            named_types(branch, out)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in _NAMED_KINDS:
            out.setdefault(str(schema["name"]), schema)
        if kind in ("record", "error"):
            for f in schema["fields"]:
                named_types(f["type"], out)
        elif kind == "array":
            named_types(schema["items"], out)
        elif kind == "map":
            named_types(schema["values"], out)
    return out
