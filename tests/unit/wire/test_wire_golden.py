"""Golden fixtures: the bytes on the wire are pinned, per record type.

Each ``schemas/fixtures/<name>.bin`` must decode to its builder's value and
re-encode byte-identically. ``pytest tests/unit/wire --update-golden`` (or
``TURNSTREAM_UPDATE_GOLDEN=1``) rewrites them after a reviewed change; the
``.json`` beside each is a readable view for that review.
"""

from __future__ import annotations

import json

import pytest
from tests.unit.wire.golden import (
    BUILDERS,
    FIXTURE_DIR,
    SCHEMA_DIR,
    decoder_for,
    encode,
)

from turnstream.commands import CommandBase
from turnstream.events import EVENT_TYPES, EventBase
from turnstream.state import LoopState
from turnstream.wire import Codec
from turnstream.wire.framing import HEADER_SIZE, MAGIC


def _json_view(name: str, data: bytes, codec: Codec) -> str:
    value = BUILDERS[name]()
    view = {
        "type": type(value).__name__,
        "schema_fingerprint": data[2:HEADER_SIZE].hex(),
        "size_bytes": len(data),
        "value": json.loads(value.model_dump_json()),
    }
    return json.dumps(view, indent=2, ensure_ascii=False, sort_keys=True) + "\n"


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_golden_fixture_round_trips_byte_identically(
    name: str, codec: Codec, update_golden: bool
) -> None:
    """Fixture bytes decode to the builder's value and re-encode identically."""
    value = BUILDERS[name]()
    data = encode(codec, value)
    bin_path = FIXTURE_DIR / f"{name}.bin"
    json_path = FIXTURE_DIR / f"{name}.json"
    if update_golden:
        FIXTURE_DIR.mkdir(exist_ok=True)
        bin_path.write_bytes(data)
        json_path.write_text(_json_view(name, data, codec), encoding="utf-8")
        return
    stored = bin_path.read_bytes()
    decoded = decoder_for(codec, value)(stored)
    assert decoded == value
    assert type(decoded) is type(value)
    assert encode(codec, decoded) == stored
    assert data == stored, "encoding drifted: review and run --update-golden"
    assert json_path.read_text(encoding="utf-8") == _json_view(name, data, codec)


def test_golden_fixtures_have_builders() -> None:
    """No stale fixture: every file in schemas/fixtures has a builder."""
    names = {p.name.rsplit(".", 1)[0] for p in FIXTURE_DIR.iterdir()}
    assert names == set(BUILDERS)


def test_golden_set_covers_every_type() -> None:
    """Every event and command class and LoopState has a golden fixture."""
    built = {type(b()) for b in BUILDERS.values()}
    assert set(EVENT_TYPES) <= built
    assert {c for c in CommandBase.__subclasses__()} <= built
    assert LoopState in built


@pytest.mark.parametrize(
    "path",
    sorted((SCHEMA_DIR / "history").glob("*/fixtures/*.bin")),
    ids=lambda p: f"{p.parent.parent.name}/{p.stem}",
)
def test_history_fixtures_decode_with_current_codec(path, codec: Codec) -> None:
    """Data written by every earlier committed schema set stays readable."""
    name = path.stem
    builder = BUILDERS.get(name)
    assert builder is not None, f"no builder for history fixture {name}"
    reference = builder()
    decoded = decoder_for(codec, reference)(path.read_bytes())
    assert type(decoded) is type(reference)


def test_fixtures_are_single_object_frames() -> None:
    """Every fixture starts with C3 01 and a known fingerprint."""
    for path in FIXTURE_DIR.glob("*.bin"):
        assert path.read_bytes()[:2] == MAGIC, path.name


def test_golden_events_are_valid_event_bases() -> None:
    """Sanity: builders build what they say (an event has a header)."""
    for name, builder in BUILDERS.items():
        value = builder()
        if isinstance(value, EventBase):
            assert type(value).__name__ == name.split("-")[0]
