"""The generated per-topic schemas in schemas/bundled/ are what other languages load.

Pins: the files are up to date with the fragments (and the check fails when
they are not); each loads on its own with the fingerprint the frames carry;
every named type is defined before it is referenced (what Java's
``Schema.Parser`` and hamba/avro need); the published fingerprint table finds
each golden frame's schema, and fastavro reads the frame with it, using the
reader options ``schemas/README.md`` documents.
"""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from fastavro import schemaless_reader
from fastavro.schema import parse_schema
from tests.unit.wire.golden import SCHEMA_DIR

from turnstream.wire import SchemaSet, Topic, bundle, compat
from turnstream.wire.schemas import CURRENT_VERSION, load_topic_schemas

BUNDLED = SCHEMA_DIR / bundle.BUNDLE_DIR
TABLE = json.loads((BUNDLED / bundle.FINGERPRINTS).read_text())
FIXTURES = sorted(
    [
        *(SCHEMA_DIR / "fixtures").glob("*.bin"),
        *SCHEMA_DIR.glob("history/*/fixtures/*.bin"),
    ]
)
_NAMED = ("record", "enum", "fixed")
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def test_bundled_files_are_up_to_date() -> None:
    """`python -m turnstream.wire.bundle --check` passes on the checkout."""
    assert bundle.stale(SCHEMA_DIR) == []
    assert bundle.main(["--schemas", str(SCHEMA_DIR), "--check"]) == 0


def test_every_version_and_topic_has_a_file() -> None:
    history = sorted(p.parent.name for p in SCHEMA_DIR.glob("history/*/topics.json"))
    assert bundle.bundled_versions(SCHEMA_DIR) == [CURRENT_VERSION, *history]
    for version in bundle.bundled_versions(SCHEMA_DIR):
        assert {p.stem for p in (BUNDLED / version).glob("*.avsc")} == {
            t.value for t in Topic
        }


def test_each_file_loads_alone_with_the_frames_fingerprint(
    schema_set: SchemaSet,
) -> None:
    """Parsed alone, each file has the fingerprint the codec writes and reads."""
    for version in bundle.bundled_versions(SCHEMA_DIR):
        for topic, loaded in bundle.load_bundled(SCHEMA_DIR, version).items():
            known = schema_set.reader_for(topic, loaded.fingerprint)
            assert known is not None, f"{version}/{topic}"
            entry = TABLE["fingerprints"][loaded.fingerprint_hex]
            assert entry["topic"] == topic.value
    for topic in Topic:
        writer = TABLE["writers"][topic.value]
        assert writer["fingerprint"] == schema_set.writer_schema(topic).fingerprint_hex


def _check_defined_before_use(
    schema: object, namespace: str, defined: set[str], where: str
) -> None:
    if isinstance(schema, str):
        if schema not in _PRIMITIVES:
            full = schema if "." in schema else f"{namespace}.{schema}"
            assert full in defined, f"{where}: {full} is used before it is defined"
    elif isinstance(schema, list):
        for branch in schema:
            _check_defined_before_use(branch, namespace, defined, where)
    elif isinstance(schema, dict):
        kind = schema["type"]
        if kind in _NAMED:
            space = schema.get("namespace", namespace)
            full = f"{space}.{schema['name']}"
            assert full not in defined, f"{where}: {full} is defined twice"
            defined.add(full)
            for field in schema.get("fields", []):
                _check_defined_before_use(field["type"], space, defined, where)
        elif kind == "array":
            _check_defined_before_use(schema["items"], namespace, defined, where)
        elif kind == "map":
            _check_defined_before_use(schema["values"], namespace, defined, where)
        elif kind not in _PRIMITIVES:
            _check_defined_before_use(kind, namespace, defined, where)


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, id=p.relative_to(BUNDLED).as_posix())
        for p in BUNDLED.glob("*/*.avsc")
    ],
)
def test_named_types_are_defined_once_before_use(path: Path) -> None:
    """One pass over the file in order resolves every reference."""
    _check_defined_before_use(json.loads(path.read_text()), "", set(), path.name)


def _fastavro_read(frame: bytes) -> tuple[str, Any]:
    entry = TABLE["fingerprints"][frame[2:10].hex()]
    writer = parse_schema(
        json.loads((BUNDLED / entry["file"]).read_text()), named_schemas={}
    )
    value = schemaless_reader(
        io.BytesIO(frame[10:]),
        writer,
        None,
        return_record_name=True,
        return_record_name_override=True,
    )
    return entry["topic"], value


@pytest.mark.parametrize(
    "path", [pytest.param(p, id=p.relative_to(SCHEMA_DIR).as_posix()) for p in FIXTURES]
)
def test_fixture_reads_with_the_published_table_and_fastavro(path: Path) -> None:
    """The table finds the writer schema; unions read as (branch name, value)."""
    topic, value = _fastavro_read(path.read_bytes())
    shown = json.loads(path.with_suffix(".json").read_text())
    if topic == Topic.LOOPS.value:
        assert shown["type"] == "LoopState"
        assert str(value["loop_id"]) == shown["value"]["loop_id"]
        return
    branch, _ = value["payload"]
    assert branch.rpartition(".")[2] == shown["type"]


def _copy_schemas(scratch_dir: Path) -> Path:
    target = scratch_dir / "schemas"
    shutil.copytree(SCHEMA_DIR, target, ignore=shutil.ignore_patterns("analytics"))
    return target


def test_a_stale_bundle_fails_both_checks(
    scratch_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fragment edit (even a doc) without regenerating is caught; writing fixes it."""
    schemas = _copy_schemas(scratch_dir)
    header = schemas / "turnstream.v1.Header.avsc"
    raw = json.loads(header.read_text())
    raw["doc"] += " Edited."
    header.write_text(json.dumps(raw, indent=2) + "\n")
    (schemas / bundle.BUNDLE_DIR / "current" / "stray.avsc").write_text("{}")

    assert bundle.main(["--schemas", str(schemas), "--check"]) == 1
    err = capsys.readouterr().err
    assert "current/turnstream.events.v1.avsc" in err
    assert "current/stray.avsc" in err
    assert compat.main(["--schemas", str(schemas), "--no-git"]) == 1
    assert "STALE" in capsys.readouterr().out

    assert bundle.main(["--schemas", str(schemas)]) == 0
    assert bundle.stale(schemas) == []
    assert not (schemas / bundle.BUNDLE_DIR / "current" / "stray.avsc").exists()
    assert compat.main(["--schemas", str(schemas), "--no-git"]) == 0
    assert "bundled is up to date" in capsys.readouterr().out


def test_an_incompatible_change_fails_between_the_bundled_files(
    scratch_dir: Path,
) -> None:
    """The evolution rules also run between the generated files themselves."""
    schemas = _copy_schemas(scratch_dir)
    envelope = schemas / "turnstream.v1.EventEnvelope.avsc"
    raw = json.loads(envelope.read_text())
    next(f for f in raw["fields"] if f["name"] == "payload")["type"].pop(0)
    envelope.write_text(json.dumps(raw, indent=2) + "\n")
    assert bundle.main(["--schemas", str(schemas)]) == 0

    found = compat.check_bundled(schemas, load_topic_schemas(schemas, "x"))
    assert "INCOMPATIBLE current vs bundled/v1:" in found


def test_readme_fingerprint_table_matches_the_generated_table() -> None:
    """schemas/README.md's table shows what bundled/fingerprints.json says."""
    readme = (SCHEMA_DIR / "README.md").read_text()
    rows = re.findall(
        r"^\| `(turnstream\.[a-z]+\.v\d+)` \| `([0-9a-f]{16})` \|(.*)\|$", readme, re.M
    )
    assert {topic: fp for topic, fp, _ in rows} == {
        topic: writer["fingerprint"] for topic, writer in TABLE["writers"].items()
    }
    older = {fp for _, _, rest in rows for fp in re.findall(r"`([0-9a-f]{16})`", rest)}
    current = {writer["fingerprint"] for writer in TABLE["writers"].values()}
    assert older == set(TABLE["fingerprints"]) - current
