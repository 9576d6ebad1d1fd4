"""Schema-compatibility check: can the new schema set read the old one's data?

Owns the rules of ``schemas/README.md`` as code and the CLI CI runs::

    python -m turnstream.wire.compat              # vs schemas/history/* and git HEAD
    python -m turnstream.wire.compat --base origin/main
    python -m turnstream.wire.compat --against schemas/history/v1 --mode backward
    python -m turnstream.wire.compat snapshot v2      # freeze the current set

For each topic it compares the old top-level schema (the *writer* of stored
data) with the new one (the *reader*), two ways:

1. **Statically**, by Avro's schema-resolution rules plus our stricter ones:
   union branches and enum symbols may only be appended; a reader field
   missing from the writer needs a default (or an alias naming the old
   field); types may only be promoted (int→long→float→double,
   string↔bytes); a logical type may not change; every enum has a default.
   In ``full`` mode (the default) the roles are also swapped, so an *old*
   reader can read *new* data — except for values of newly appended union
   branches, which old readers refuse as an unknown type by design.
2. **Dynamically**: records generated from the old schema (every union
   branch at least once) and the old set's golden fixtures are written with
   the old schema and read back with fastavro's resolution into the new one.

Imports fastavro and :mod:`turnstream.wire.schemas`; never value types, the
runtime or aiokafka. Exit status: 0 compatible, 1 incompatible, 2 usage error.

One module on purpose (~650 lines): the evolution rules, their report and the
bundled-file check are one contract, run by one command.
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Final
from uuid import UUID

from fastavro import schemaless_reader, schemaless_writer
from fastavro.types import Schema

from turnstream.errors import ConfigError
from turnstream.wire import bundle
from turnstream.wire.framing import HEADER_SIZE, MAGIC
from turnstream.wire.schemas import (
    CURRENT_VERSION,
    HISTORY_DIR,
    MANIFEST,
    Topic,
    TopicSchema,
    default_schema_dir,
    history_dirs,
    load_topic_schemas,
    named_types,
)

__all__ = [
    "Mode",
    "Problem",
    "check_bundled",
    "check_sets",
    "load_git_set",
    "main",
    "snapshot",
]

FIXTURES_DIR: Final = "fixtures"
_PROMOTIONS: Final = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}
_NAMED: Final = frozenset({"record", "error", "enum", "fixed"})
_COMPOSITE: Final = frozenset({"record", "error", "enum", "array", "map"})


class Mode(StrEnum):
    """Which direction(s) must hold."""

    BACKWARD = "backward"
    """The new set reads data written with the old one."""
    FULL = "full"
    """Backward, and old readers read new data (bar appended branches)."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One incompatibility, located by topic and schema path."""

    topic: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.topic}: {self.path}: {self.message}"


# --------------------------------------------------------------------------
# Static check
# --------------------------------------------------------------------------


@dataclass
class _Walk:
    """State of one directed comparison (writer → reader)."""

    topic: str
    writer_named: Mapping[str, Schema]
    reader_named: Mapping[str, Schema]
    forward: bool
    """Roles swapped: the writer is the *new* set, the reader the old one."""
    problems: list[Problem] = field(default_factory=list)
    seen: set[tuple[str, str]] = field(default_factory=set)

    def fail(self, path: str, message: str) -> None:
        who = "old readers" if self.forward else "the new set"
        self.problems.append(
            Problem(self.topic, path, f"{message} ({who} cannot read)")
        )

    def deref(self, schema: Schema, named: Mapping[str, Schema]) -> Schema:
        if isinstance(schema, str) and schema in named:
            return named[schema]
        return schema

    def compare(self, writer: Schema, reader: Schema, path: str) -> None:
        w = self.deref(writer, self.writer_named)
        r = self.deref(reader, self.reader_named)
        if isinstance(w, list) or isinstance(r, list):
            self._unions(w, r, path)
            return
        wkind, wlogical = _kind(w)
        rkind, rlogical = _kind(r)
        if wkind in _NAMED or rkind in _NAMED:
            self._named(w, r, path)
            return
        if wkind != rkind and rkind not in _PROMOTIONS.get(wkind, set()):
            self.fail(path, f"type changed from {wkind} to {rkind}")
        elif wlogical != rlogical:
            self.fail(path, f"logical type changed from {wlogical} to {rlogical}")
        elif isinstance(w, dict) and isinstance(r, dict):
            if wkind == "array":
                self.compare(w["items"], r["items"], f"{path}[]")
            elif wkind == "map":
                self.compare(w["values"], r["values"], f"{path}{{}}")

    def _unions(self, w: Schema, r: Schema, path: str) -> None:
        wbranches = w if isinstance(w, list) else [w]
        rbranches = r if isinstance(r, list) else [r]
        if isinstance(w, list) and not isinstance(r, list):
            self.fail(path, "union narrowed to a single type")
            return
        wnames = [_branch_name(b, self.writer_named) for b in wbranches]
        rnames = [_branch_name(b, self.reader_named) for b in rbranches]
        answers = [_answers_to(b, self.reader_named) for b in rbranches]
        # Our rule, stricter than Avro's by-name matching: the old branches
        # are a prefix of the new ones (append only).
        both = isinstance(r, list) and isinstance(w, list)
        in_place = len(answers) >= len(wnames) and all(
            name in answers[i] for i, name in enumerate(wnames)
        )
        if both and not self.forward and not in_place:
            self.fail(
                path, f"union branches removed or reordered: {wnames} -> {rnames}"
            )
            return
        for wbranch, name in zip(wbranches, wnames, strict=True):
            match = _match_branch(name, answers)
            if match is None:
                if self.forward and both:
                    continue  # an appended branch: old readers refuse it by design
                self.fail(path, f"union branch {name} has no counterpart")
                continue
            self.compare(wbranch, rbranches[match], f"{path}<{_short(name)}>")

    def _named(self, w: Schema, r: Schema, path: str) -> None:
        if not (isinstance(w, dict) and isinstance(r, dict)):
            self.fail(path, f"type changed from {_kind(w)[0]} to {_kind(r)[0]}")
            return
        wname, rname = str(w.get("name")), str(r.get("name"))
        if w.get("type") != r.get("type"):
            self.fail(path, f"type changed from {w.get('type')} to {r.get('type')}")
            return
        if wname != rname and wname not in r.get("aliases", []):
            self.fail(path, f"{wname} renamed to {rname} without an alias")
            return
        if (wname, rname) in self.seen:
            return
        self.seen.add((wname, rname))
        kind = w["type"]
        if kind == "enum":
            self._enums(w, r, path)
        elif kind == "fixed":
            if w.get("size") != r.get("size"):
                self.fail(path, "fixed size changed")
        else:
            self._records(w, r, path)

    def _enums(self, w: dict[str, object], r: dict[str, object], path: str) -> None:
        wsyms = list(_strs(w.get("symbols")))
        rsyms = list(_strs(r.get("symbols")))
        if not self.forward and rsyms[: len(wsyms)] != wsyms:
            self.fail(path, f"enum symbols removed or reordered: {wsyms} -> {rsyms}")
        elif any(s not in rsyms for s in wsyms) and "default" not in r:
            self.fail(path, "new enum symbols and the reader enum has no default")

    def _records(self, w: dict[str, object], r: dict[str, object], path: str) -> None:
        wfields = {str(f["name"]): f for f in _dicts(w.get("fields"))}
        for rf in _dicts(r.get("fields")):
            names = [str(rf["name"]), *_strs(rf.get("aliases", []))]
            wf = next((wfields[n] for n in names if n in wfields), None)
            where = f"{path}.{rf['name']}"
            if wf is not None:
                self.compare(_as_schema(wf["type"]), _as_schema(rf["type"]), where)
            elif "default" not in rf:
                what = "removed" if self.forward else "added"
                self.fail(where, f"field {what} without a default")


def _as_schema(value: object) -> Schema:
    if isinstance(value, str | list | dict):
        return value
    raise ConfigError("schema_dir", f"not a schema: {type(value).__name__}")


def _kind(schema: Schema) -> tuple[str, str | None]:
    if isinstance(schema, str):
        return schema, None
    if isinstance(schema, list):
        return "union", None
    logical = schema.get("logicalType")
    return str(schema.get("type")), None if logical is None else str(logical)


def _branch_name(schema: Schema, named: Mapping[str, Schema]) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, dict) and "name" in schema:
        return str(schema["name"])
    kind, logical = _kind(schema)
    return kind if logical is None else f"{kind}:{logical}"


def _answers_to(schema: Schema, named: Mapping[str, Schema]) -> set[str]:
    """The names a reader branch matches: its own and its aliases."""
    resolved = named.get(schema, schema) if isinstance(schema, str) else schema
    names = {_branch_name(schema, named)}
    if isinstance(resolved, dict):
        names.update(_strs(resolved.get("aliases", [])))
    return names


def _match_branch(name: str, answers: Sequence[set[str]]) -> int | None:
    for i, names in enumerate(answers):
        if name in names:
            return i
    base = name.split(":", 1)[0]
    for i, names in enumerate(answers):  # a primitive may be promoted
        if any(n.split(":", 1)[0] in _PROMOTIONS.get(base, set()) for n in names):
            return i
    return None


def _short(name: str) -> str:
    return name.rpartition(".")[2]


def _strs(value: object) -> Iterator[str]:
    if isinstance(value, list):
        yield from (str(v) for v in value)


def _dicts(value: object) -> Iterator[dict[str, object]]:
    if isinstance(value, list):
        yield from (v for v in value if isinstance(v, dict))


def _lint(topic: str, schema: Schema) -> list[Problem]:
    return [
        Problem(
            topic, name, "enum has no default (old readers cannot survive new symbols)"
        )
        for name, named in named_types(schema).items()
        if isinstance(named, dict)
        and named.get("type") == "enum"
        and "default" not in named
    ]


# --------------------------------------------------------------------------
# Dynamic check: sample records written with the old schema, read with the new
# --------------------------------------------------------------------------


class _Sampler:
    """Deterministic values of a schema; unions round-robin over branches."""

    def __init__(self, schema: Schema) -> None:
        self.named = named_types(schema)
        self.turn: dict[int, int] = {}
        self.n = 0

    def value(self, schema: Schema) -> object:
        """One value of ``schema``; successive calls vary it."""
        self.n += 1
        if isinstance(schema, str):
            schema = self.named.get(schema, schema)
        if isinstance(schema, list):
            k = self.turn.get(id(schema), 0)
            self.turn[id(schema)] = k + 1
            return self._branch(schema[k % len(schema)])
        kind, logical = _kind(schema)
        if not isinstance(schema, dict) or kind not in _COMPOSITE:
            return self._primitive(kind, logical, schema)
        if kind == "enum":
            symbols = list(_strs(schema["symbols"]))
            return symbols[self.n % len(symbols)]
        if kind in ("record", "error"):
            return {
                str(f["name"]): self.value(_as_schema(f["type"]))
                for f in _dicts(schema["fields"])
            }
        inner = schema["items"] if kind == "array" else schema["values"]
        width = len(inner) if isinstance(inner, list) else 2
        items = [self.value(inner) for _ in range(width)]
        return items if kind == "array" else {f"k{i}": v for i, v in enumerate(items)}

    def _branch(self, schema: Schema) -> object:
        value = self.value(schema)
        resolved = self.named.get(schema, schema) if isinstance(schema, str) else schema
        if isinstance(resolved, dict) and resolved.get("type") in ("record", "error"):
            return (str(resolved["name"]), value)  # force the branch by name
        return value

    def _primitive(self, kind: str, logical: str | None, schema: Schema) -> object:
        n = self.n
        if logical == "uuid":
            return UUID(int=n)
        if logical in ("timestamp-micros", "timestamp-millis"):
            return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=n)
        values: dict[str, object] = {
            "null": None,
            "boolean": n % 2 == 0,
            "int": n,
            "long": n,
            "float": float(n),
            "double": float(n),
            "string": f"s{n}",
            "bytes": bytes([n % 256]),
        }
        if kind == "fixed" and isinstance(schema, dict):
            return bytes(int(str(schema["size"])))
        return values.get(kind)


def _samples(schema: Schema, count: int) -> list[object]:
    sampler = _Sampler(schema)
    return [sampler.value(schema) for _ in range(count)]


def _read_across(old: TopicSchema, new: TopicSchema, body: bytes) -> str | None:
    stream = io.BytesIO(body)
    try:
        schemaless_reader(stream, old.parsed, new.parsed)
    except Exception as exc:  # noqa: BLE001 - any failure is the finding
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    if stream.tell() != len(body):
        return "trailing bytes"
    return None


def _fixture_bodies(
    directory: Path | None, schema: TopicSchema
) -> Iterator[tuple[str, bytes]]:
    if directory is None or not directory.is_dir():
        return
    for path in sorted(directory.glob("*.bin")):
        data = path.read_bytes()
        if data[:2] == MAGIC and data[2:HEADER_SIZE] == schema.fingerprint:
            yield path.name, data[HEADER_SIZE:]


def _dynamic(
    topic: str, old: TopicSchema, new: TopicSchema, fixtures: Path | None, samples: int
) -> tuple[list[Problem], int]:
    problems: list[Problem] = []
    checked = 0
    for i, record in enumerate(_samples(old.parsed, samples)):
        out = io.BytesIO()
        schemaless_writer(out, old.parsed, record)
        error = _read_across(old, new, out.getvalue())
        checked += 1
        if error is not None:
            problems.append(
                Problem(topic, f"sample {i}", f"old data unreadable: {error}")
            )
    for name, body in _fixture_bodies(fixtures, old):
        error = _read_across(old, new, body)
        checked += 1
        if error is not None:
            problems.append(
                Problem(topic, f"fixture {name}", f"old data unreadable: {error}")
            )
    return problems, checked


# --------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Report:
    """The outcome of comparing two sets."""

    problems: list[Problem]
    checked: int
    """How many sample and fixture records were read across."""


def check_sets(
    old: Mapping[Topic, TopicSchema],
    new: Mapping[Topic, TopicSchema],
    *,
    mode: Mode = Mode.FULL,
    fixtures: Path | None = None,
    samples: int = 64,
) -> Report:
    """Compare two loaded schema sets topic by topic.

    Args:
        old: the set that wrote the stored data.
        new: the candidate set.
        mode: ``backward`` or ``full``.
        fixtures: the old set's golden-fixture directory, read across too.
        samples: generated records per topic (unions round-robin, so a few
            dozen cover every branch).
    """
    problems: list[Problem] = []
    checked = 0
    for topic, candidate in new.items():
        problems += _lint(topic.value, candidate.parsed)
    for topic, old_schema in old.items():
        new_schema = new.get(topic)
        if new_schema is None:
            problems.append(Problem(topic.value, "", "topic schema removed"))
            continue
        old_named = named_types(old_schema.parsed)
        new_named = named_types(new_schema.parsed)
        back = _Walk(topic.value, old_named, new_named, forward=False)
        back.compare(old_schema.parsed, new_schema.parsed, _short(old_schema.name))
        problems += back.problems
        if mode is Mode.FULL:
            fwd = _Walk(topic.value, new_named, old_named, forward=True)
            fwd.compare(new_schema.parsed, old_schema.parsed, _short(new_schema.name))
            problems += fwd.problems
        found, n = _dynamic(topic.value, old_schema, new_schema, fixtures, samples)
        problems += found
        checked += n
    return Report(problems=problems, checked=checked)


def check_bundled(
    schema_dir: Path, current: Mapping[Topic, TopicSchema], *, mode: Mode = Mode.FULL
) -> list[str]:
    """Check the generated ``bundled/`` files as other languages load them.

    They must be up to date with the fragments (see
    :mod:`turnstream.wire.bundle`), each must load on its own with the
    fragments' fingerprint, and the current files must read every older
    bundled version by the same rules as :func:`check_sets`. Returns report
    lines; any starting with ``STALE`` or ``INCOMPATIBLE`` is a failure.
    """
    versions = bundle.bundled_versions(schema_dir)
    if not versions:
        return [f"skip bundled: no {schema_dir / bundle.BUNDLE_DIR}"]
    out_of_date = bundle.stale(schema_dir)
    if out_of_date:
        return [
            f"STALE {schema_dir / bundle.BUNDLE_DIR} (run `python -m "
            f"turnstream.wire.bundle`): {', '.join(out_of_date)}"
        ]
    sets = {v: bundle.load_bundled(schema_dir, v) for v in versions}
    head = sets[CURRENT_VERSION]
    lines = [
        f"INCOMPATIBLE bundled/current/{t.value}.avsc: fingerprint "
        f"{head[t].fingerprint_hex} is not the fragments' {s.fingerprint_hex}"
        for t, s in current.items()
        if head[t].fingerprint != s.fingerprint
    ] or [f"ok {schema_dir / bundle.BUNDLE_DIR} is up to date, fingerprints match"]
    for version, old in sets.items():
        if version == CURRENT_VERSION:
            continue
        report = check_sets(old, head, mode=mode)
        _print_report(f"bundled/{version}", report, lines)
    return lines


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(  # noqa: S603 - fixed argv, no shell
        ["git", "-C", str(root), *args],  # noqa: S607 - git from PATH, as in CI
        capture_output=True,
        check=False,
    )


def load_git_set(
    schema_dir: Path, ref: str
) -> tuple[dict[Topic, TopicSchema], Path] | None:
    """Load the schema set committed at ``ref`` (``None`` if it has none).

    Returns the loaded set and a temporary directory holding its files
    (including its fixtures); the caller removes the directory.
    """
    top = _git(schema_dir, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        return None
    root = Path(top.stdout.decode().strip())
    rel = schema_dir.resolve().relative_to(root.resolve()).as_posix()
    if _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").returncode:
        return None
    listing = _git(root, "ls-tree", "-r", "--name-only", ref, "--", f"{rel}/")
    names = [n for n in listing.stdout.decode().splitlines() if n]
    wanted = [
        n
        for n in names
        if "/" not in n[len(rel) + 1 :].removeprefix(f"{FIXTURES_DIR}/")
        and not n[len(rel) + 1 :].startswith(f"{HISTORY_DIR}/")
    ]
    if f"{rel}/{MANIFEST}" not in wanted:
        return None
    tmp = Path(tempfile.mkdtemp(prefix="ts-schemas-"))
    for name in wanted:
        blob = _git(root, "show", f"{ref}:{name}")
        target = tmp / name[len(rel) + 1 :]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blob.stdout)
    return load_topic_schemas(tmp, ref), tmp


def snapshot(schema_dir: Path, version: str) -> Path:
    """Copy the current set (and its fixtures) to ``history/<version>/``.

    Raises:
        FileExistsError: that version already exists.
    """
    target = schema_dir / HISTORY_DIR / version
    target.mkdir(parents=True)
    for path in [*schema_dir.glob("*.avsc"), schema_dir / MANIFEST]:
        shutil.copy2(path, target / path.name)
    fixtures = schema_dir / FIXTURES_DIR
    if fixtures.is_dir():
        shutil.copytree(fixtures, target / FIXTURES_DIR)
    return target


def _print_report(label: str, report: Report, out: list[str]) -> None:
    if report.problems:
        out.append(f"INCOMPATIBLE current vs {label}:")
        out.extend(f"  {p}" for p in report.problems)
    else:
        out.append(f"ok current reads {label} ({report.checked} records read across)")


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m turnstream.wire.compat")
    parser.add_argument("--schemas", type=Path, default=default_schema_dir())
    sub = parser.add_subparsers(dest="command")
    snap = sub.add_parser(
        "snapshot", help="freeze the current set as history/<version>"
    )
    snap.add_argument("version")
    parser.add_argument("--base", default="HEAD", help="git ref of the previous set")
    parser.add_argument("--no-git", action="store_true", help="skip the git base")
    parser.add_argument(
        "--against",
        type=Path,
        action="append",
        default=None,
        help="an old set directory (default: every schemas/history/*)",
    )
    parser.add_argument("--mode", type=Mode, choices=list(Mode), default=Mode.FULL)
    args = parser.parse_args(argv)
    schema_dir: Path = args.schemas
    if args.command == "snapshot":
        print(f"wrote {snapshot(schema_dir, args.version)}")
        return 0
    lines: list[str] = []
    try:
        current = load_topic_schemas(schema_dir, CURRENT_VERSION)
        olds: list[Path] = args.against or history_dirs(schema_dir)
        failed = False
        for old_dir in olds:
            report = check_sets(
                load_topic_schemas(old_dir, old_dir.name),
                current,
                mode=args.mode,
                fixtures=old_dir / FIXTURES_DIR,
            )
            failed |= bool(report.problems)
            _print_report(str(old_dir), report, lines)
        found = check_bundled(schema_dir, current, mode=args.mode)
        failed |= any(line.startswith(("STALE", "INCOMPATIBLE")) for line in found)
        lines += found
        if not args.no_git:
            base = load_git_set(schema_dir, args.base)
            if base is None:
                lines.append(f"skip git {args.base}: no committed schema set there")
            else:
                old_set, tmp = base
                try:
                    report = check_sets(
                        old_set, current, mode=args.mode, fixtures=tmp / FIXTURES_DIR
                    )
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
                failed |= bool(report.problems)
                _print_report(f"git {args.base}", report, lines)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
