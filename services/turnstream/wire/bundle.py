"""Self-contained per-topic schema files for readers in any language.

Owns the generated directory ``schemas/bundled/`` and the CLI that writes and
checks it::

    python -m turnstream.wire.bundle            # regenerate schemas/bundled/
    python -m turnstream.wire.bundle --check    # exit 1 if it is out of date

For the current set and every ``history/<version>/`` set it writes
``<version>/<topic>.avsc``: the topic's value schema with every named type
inlined once, at its first use, so each definition precedes its references
(what Java's ``Schema.Parser`` and hamba/avro need from one file). Beside them,
``fingerprints.json`` is the published fingerprint table: the hex of the 8
fingerprint bytes of a frame (as they appear on the wire, little-endian
CRC-64-AVRO of the Parsing Canonical Form) -> topic, version, file. Docs and
defaults are kept: they do not change the fingerprint, and resolution needs
the defaults.

The fragments (``schemas/*.avsc``) stay the source; these files are derived
and checked. Imports :mod:`turnstream.wire.schemas`; never value types, the
runtime or aiokafka. Exit status: 0 up to date (or written), 1 stale, 2 the
set does not load.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from fastavro.schema import parse_schema

from turnstream.errors import ConfigError
from turnstream.wire.schemas import (
    CURRENT_VERSION,
    Topic,
    TopicSchema,
    default_schema_dir,
    expand_named,
    fingerprint_of,
    history_dirs,
    load_topic_schemas,
)

__all__ = [
    "BUNDLE_DIR",
    "FINGERPRINTS",
    "bundled_versions",
    "load_bundled",
    "main",
    "render",
    "stale",
    "write",
]

BUNDLE_DIR: Final = "bundled"
"""Sub-directory of the schema directory holding the generated files."""

FINGERPRINTS: Final = "fingerprints.json"
"""The fingerprint table's file name inside :data:`BUNDLE_DIR`."""

_README: Final = """\
# schemas/bundled/ -- generated, do not edit

One self-contained Avro schema per topic and schema version, generated from
the fragments in `schemas/` by `python -m turnstream.wire.bundle` (CI checks it
is up to date with `--check`). `fingerprints.json` maps the 8 fingerprint bytes
of a frame (hex, in wire order) to its topic, version and schema file. See
`schemas/README.md`, "Reading and writing from other languages".
"""


def _dump(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def render(schema_dir: Path) -> dict[str, str]:
    """Every file of ``bundled/`` as it should be: relative path -> text.

    Raises:
        ConfigError: a schema set does not load.
    """
    sets = [(CURRENT_VERSION, schema_dir)]
    sets += [(d.name, d) for d in history_dirs(schema_dir)]
    files: dict[str, str] = {"README.md": _README}
    writers: dict[str, dict[str, str]] = {}
    table: dict[str, dict[str, str]] = {}
    for version, directory in sets:
        for topic, schema in load_topic_schemas(directory, version).items():
            rel = f"{version}/{topic.value}.avsc"
            files[rel] = _dump(expand_named(directory, schema.name))
            entry = {
                "topic": topic.value,
                "version": version,
                "name": schema.name,
                "file": rel,
            }
            # Current first: a history set with the same canonical form (the
            # same fingerprint) reads the same bytes; the current file wins.
            table.setdefault(schema.fingerprint_hex, entry)
            if version == CURRENT_VERSION:
                writers[topic.value] = {
                    "fingerprint": schema.fingerprint_hex,
                    "name": schema.name,
                    "file": rel,
                }
    files[FINGERPRINTS] = _dump(
        {
            "doc": (
                "Frame = C3 01 | 8 fingerprint bytes | Avro binary body. Keys of "
                "'fingerprints' are those 8 bytes in hex, in wire order (the "
                "little-endian CRC-64-AVRO of the schema's Parsing Canonical Form). "
                "'writers' names the schema each topic is written with now."
            ),
            "writers": dict(sorted(writers.items())),
            "fingerprints": dict(sorted(table.items())),
        }
    )
    return files


def bundled_versions(schema_dir: Path) -> list[str]:
    """The versions ``bundled/`` holds, ``current`` first (none if absent)."""
    target = schema_dir / BUNDLE_DIR
    if not target.is_dir():
        return []
    names = sorted(d.name for d in target.iterdir() if d.is_dir())
    return sorted(names, key=lambda n: n != CURRENT_VERSION)


def load_bundled(schema_dir: Path, version: str) -> dict[Topic, TopicSchema]:
    """Parse ``bundled/<version>/<topic>.avsc`` on its own, one file per topic.

    Each file is parsed with nothing but itself (as another language would),
    so a file that needs a type defined elsewhere fails here.

    Raises:
        ConfigError: a topic's file is missing or does not parse.
    """
    loaded: dict[Topic, TopicSchema] = {}
    for topic in Topic:
        path = schema_dir / BUNDLE_DIR / version / f"{topic.value}.avsc"
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            parsed = parse_schema(raw, named_schemas={})
        except Exception as exc:  # any failure means "does not load"
            raise ConfigError(
                "schema_dir", f"{path} does not load: {type(exc).__name__}: {exc}"
            ) from exc
        loaded[topic] = TopicSchema(
            topic=topic,
            name=str(raw.get("namespace", "")) + "." + str(raw.get("name", "")),
            version=version,
            fingerprint=fingerprint_of(parsed),
            parsed=parsed,
        )
    return loaded


def stale(schema_dir: Path) -> list[str]:
    """Paths under ``bundled/`` that are missing, differ, or should not exist."""
    return _diff(schema_dir / BUNDLE_DIR, render(schema_dir))


def _diff(target: Path, wanted: Mapping[str, str]) -> list[str]:
    out = [
        rel
        for rel, text in wanted.items()
        if not (target / rel).is_file()
        or (target / rel).read_text(encoding="utf-8") != text
    ]
    if target.is_dir():
        out += sorted(
            p.relative_to(target).as_posix()
            for p in target.rglob("*")
            if p.is_file() and p.relative_to(target).as_posix() not in wanted
        )
    return out


def write(schema_dir: Path) -> list[str]:
    """Regenerate ``bundled/``; returns the paths written (or removed)."""
    target = schema_dir / BUNDLE_DIR
    wanted = render(schema_dir)
    changed = _diff(target, wanted)
    for rel in changed:
        path = target / rel
        if rel in wanted:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(wanted[rel], encoding="utf-8")
        else:
            path.unlink()
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m turnstream.wire.bundle")
    parser.add_argument("--schemas", type=Path, default=default_schema_dir())
    parser.add_argument(
        "--check", action="store_true", help="only check; exit 1 if out of date"
    )
    args = parser.parse_args(argv)
    schema_dir: Path = args.schemas
    try:
        if args.check:
            out_of_date = stale(schema_dir)
            if out_of_date:
                print(
                    f"{schema_dir / BUNDLE_DIR} is out of date "
                    "(run `python -m turnstream.wire.bundle`):",
                    file=sys.stderr,
                )
                for rel in out_of_date:
                    print(f"  {rel}", file=sys.stderr)
                return 1
            print(f"ok {schema_dir / BUNDLE_DIR} is up to date")
            return 0
        for rel in write(schema_dir):
            print(f"wrote {schema_dir / BUNDLE_DIR / rel}")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
