"""The analytics snapshot codec: framing, round trip, schemas, fail-closed decode."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from turnstream.analytics.aggregate import FoldConfig, TerminalKind, fold_journal
from turnstream.analytics.report import build_snapshot
from turnstream.analytics.sample import LoopPlan, TurnPlan, build_journal
from turnstream.errors import ConfigError, DecodeError, PayloadTooLargeError
from turnstream.wire.analytics_codec import (
    ANALYTICS_NAMESPACE,
    AnalyticsCodec,
    AnalyticsSnapshot,
    SnapshotAggregates,
    marshal_snapshot,
    unmarshal_snapshot,
)
from turnstream.wire.errors import FramingError, UnknownFingerprintError
from turnstream.wire.framing import HEADER_SIZE, MAGIC
from turnstream.wire.schemas import _check_bounded, default_schema_dir, fingerprint_of

SCHEMA_DIR = default_schema_dir() / "analytics"


def sample_snapshot() -> AnalyticsSnapshot:
    config = FoldConfig()
    plans = [
        LoopPlan(
            turns=[
                TurnPlan(),
                TurnPlan(TerminalKind.FAILED, steps=2, tool_calls_per_step=2),
            ]
        ),
        LoopPlan(
            turns=[TurnPlan(TerminalKind.INTERRUPTED, latency_ms=90_000)], model=None
        ),
    ]
    states = fold_journal(build_journal(plans, seed=2), config)
    return build_snapshot(
        states.values(),
        config,
        app_id="unit",
        partitions=[0, 2],
        undecodable=3,
        generated_at_ms=1_767_268_800_123,
    )


@pytest.fixture(scope="module")
def codec() -> AnalyticsCodec:
    return AnalyticsCodec.load()


def test_analytics_codec_round_trips_a_real_snapshot(codec):
    """Encode then decode gives back an equal snapshot."""
    snap = sample_snapshot()
    assert snap.windows, "the sample must exercise windows"
    assert snap.totals.latency.buckets, "and latency buckets"
    assert codec.unmarshal_snapshot(codec.marshal_snapshot(snap)) == snap


def test_analytics_codec_round_trips_an_empty_snapshot(codec):
    """Defaults (no loops, no watermark, null percentiles) survive."""
    snap = AnalyticsSnapshot(
        snapshot_id=uuid.uuid4(),
        app_id="a",
        generated_at=datetime(2026, 1, 1, tzinfo=UTC),
        window_size_ms=60_000,
    )
    assert codec.unmarshal_snapshot(codec.marshal_snapshot(snap)) == snap


def test_analytics_codec_uses_single_object_encoding(codec):
    """C3 01, the 8-byte CRC-64-AVRO fingerprint of the schema, then the body."""
    data = codec.marshal_snapshot(sample_snapshot())
    assert data[:2] == MAGIC == b"\xc3\x01"
    assert data[2:HEADER_SIZE] == fingerprint_of(codec.schema) == codec.fingerprint
    assert len(codec.fingerprint_hex) == 16


def test_analytics_codec_module_functions_use_the_default(codec):
    """marshal_snapshot/unmarshal_snapshot work with the checkout's schemas."""
    snap = sample_snapshot()
    assert unmarshal_snapshot(marshal_snapshot(snap)) == snap
    assert (
        marshal_snapshot(snap)[:HEADER_SIZE]
        == codec.marshal_snapshot(snap)[:HEADER_SIZE]
    )


def test_analytics_schema_files_are_named_by_full_name():
    """Each .avsc is <namespace>.<Name>.avsc and declares that name."""
    files = sorted(SCHEMA_DIR.glob("*.avsc"))
    assert len(files) == 7
    for path in files:
        schema = json.loads(path.read_text())
        assert path.name == f"{schema['namespace']}.{schema['name']}.avsc"
        assert schema["namespace"] == ANALYTICS_NAMESPACE
        assert schema.get("doc")


def test_analytics_schema_decoding_is_bounded(codec):
    """No array or map item can be zero bytes wide (linear-time decoding)."""
    _check_bounded(codec.schema, "AnalyticsSnapshot")


def test_analytics_schema_mirrors_the_value_types(codec):
    """Record fields and model fields agree, both ways."""

    def fields(name: str) -> set[str]:
        data = json.loads(
            (SCHEMA_DIR / f"{ANALYTICS_NAMESPACE}.{name}.avsc").read_text()
        )
        return {f["name"] for f in data["fields"]}

    assert fields("AnalyticsSnapshot") == set(AnalyticsSnapshot.model_fields)
    assert fields("Aggregates") == set(SnapshotAggregates.model_fields)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        pytest.param(b"", FramingError, id="empty"),
        pytest.param(b"\x00" * 20, FramingError, id="no-marker"),
        pytest.param(
            MAGIC + b"\x01" * 8 + b"\x00", UnknownFingerprintError, id="other-schema"
        ),
    ],
)
def test_analytics_codec_rejects_foreign_frames(codec, data, error):
    """Bytes that are not a snapshot frame raise a DecodeError subclass."""
    with pytest.raises(error):
        codec.unmarshal_snapshot(data)


def test_analytics_codec_fails_closed_on_corrupt_bodies(codec):
    """Truncations and trailing bytes are DecodeErrors, never other exceptions."""
    good = codec.marshal_snapshot(sample_snapshot())
    for cut in range(HEADER_SIZE, len(good), 7):
        with pytest.raises(DecodeError):
            codec.unmarshal_snapshot(good[:cut])
    with pytest.raises(DecodeError, match="trailing"):
        codec.unmarshal_snapshot(good + b"\x00")


def test_analytics_codec_refuses_oversize_frames():
    """Frames over the limit are refused before decoding."""
    small = AnalyticsCodec(AnalyticsCodec.load().schema, max_payload_bytes=64)
    with pytest.raises(PayloadTooLargeError):
        small.unmarshal_snapshot(b"\xc3\x01" + b"\x00" * 100)


def test_analytics_codec_load_reports_a_missing_directory(tmp_path: Path):
    """A schema directory without analytics/ is a ConfigError."""
    with pytest.raises(ConfigError, match="missing"):
        AnalyticsCodec.load(tmp_path)


def test_analytics_snapshot_requires_aware_times():
    """Naive datetimes are refused by the value type (the wire is UTC)."""
    with pytest.raises(ValueError, match="timezone"):
        AnalyticsSnapshot(
            snapshot_id=uuid.uuid4(),
            app_id="a",
            generated_at=datetime(2026, 1, 1) + timedelta(0),
            window_size_ms=1,
        )
