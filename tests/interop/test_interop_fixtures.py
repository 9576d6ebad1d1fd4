"""Java (Apache Avro) and Go (hamba/avro) decode every golden fixture like Python.

The example programs in ``examples/java`` and ``examples/go`` know only
``schemas/bundled/`` and their Avro library; they must agree with the Python
codec on each frame's topic, type and id, for the current set and every
``history/`` set.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.interop.programs import READERS, SCHEMAS, Program, java, python_view, run

# ------------------------------------------------------------ golden fixtures

FIXTURES = sorted(
    [*(SCHEMAS / "fixtures").glob("*.bin"), *SCHEMAS.glob("history/*/fixtures/*.bin")]
)


@pytest.mark.parametrize("reader", READERS)
def test_reader_decodes_every_golden_fixture_like_python(reader: Program) -> None:
    """Every fixture, current and historical: same topic, type and id as Python."""
    assert len(FIXTURES) >= 60
    lines = run([*reader(), str(SCHEMAS), "files", *map(str, FIXTURES)])
    got = {
        Path(line["source"]): (line["topic"], line["type"], line["id"])
        for line in lines
    }
    want = {path: python_view(path.read_bytes()) for path in FIXTURES}
    assert got == want


def test_java_computes_the_published_fingerprints() -> None:
    """Avro's own fingerprint of each bundled file is the one in the table."""
    table = json.loads((SCHEMAS / "bundled" / "fingerprints.json").read_text())
    lines = run([*java("Reader"), str(SCHEMAS), "fingerprints"])
    for line in lines:
        entry = table["fingerprints"][line["fingerprint"]]
        assert entry["topic"] == line["topic"]
    assert {line["fingerprint"] for line in lines} == set(table["fingerprints"])


def test_java_schema_parser_reads_the_fragments_in_name_order() -> None:
    """Avro 1.12's SchemaParser takes schemas/*.avsc as they are, in name order.

    And each topic schema it builds equals the bundled file (same fingerprint,
    same defaults and docs).
    """
    table = json.loads((SCHEMAS / "bundled" / "fingerprints.json").read_text())
    lines = run([*java("Reader"), str(SCHEMAS), "fragments"])
    assert {line["topic"]: line["fragments"] for line in lines} == {
        topic: writer["fingerprint"] for topic, writer in table["writers"].items()
    }
    assert all(line["equal"] for line in lines), lines
