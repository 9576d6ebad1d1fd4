"""The analytics output contract: snapshot value types and their Avro codec.

Owns the frozen value types of an analytics snapshot
(:class:`AnalyticsSnapshot` and its parts, mirroring
``schemas/analytics/turnstream.analytics.v1.*.avsc``) and
:class:`AnalyticsCodec`, which frames them with Avro single-object encoding
(``C3 01`` + CRC-64-AVRO fingerprint + body, :mod:`turnstream.wire.framing`)
for the analytics topic ``turnstream.analytics.v1``. Imports fastavro, value
types and the wire helpers; never faust, aiokafka, the runtime or
:mod:`turnstream.analytics` (the producer of snapshots sits above this layer).

Contract: ``marshal_snapshot`` writes exactly the schema's fields
(``strict=True``); ``unmarshal_snapshot`` is fail-closed -- for any input it
returns a valid snapshot or raises a :class:`~turnstream.errors.DecodeError`
(oversize input is refused before decoding; trailing bytes are rejected;
messages never echo payload bytes).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Final
from uuid import UUID

from fastavro import schemaless_reader, schemaless_writer
from fastavro.schema import load_schema
from fastavro.types import Schema
from pydantic import AwareDatetime, BaseModel, ConfigDict, ValidationError

from turnstream.content import Usage
from turnstream.errors import ConfigError, DecodeError, PayloadTooLargeError
from turnstream.wire.errors import (
    EncodeError,
    RecordTooLargeError,
    UnknownFingerprintError,
)
from turnstream.wire.framing import HEADER_SIZE, frame, read_fingerprint
from turnstream.wire.process_default import ProcessDefault
from turnstream.wire.schemas import default_schema_dir, fingerprint_of

__all__ = [
    "ANALYTICS_NAMESPACE",
    "ANALYTICS_SCHEMA_SUBDIR",
    "ANALYTICS_TOPIC",
    "DEFAULT_MAX_SNAPSHOT_BYTES",
    "SNAPSHOT_SCHEMA_NAME",
    "AnalyticsCodec",
    "AnalyticsSnapshot",
    "CountSummary",
    "LatencySummary",
    "SketchBucket",
    "SnapshotAggregates",
    "SnapshotWindow",
    "default_analytics_codec",
    "marshal_snapshot",
    "set_default_analytics_codec",
    "unmarshal_snapshot",
]

ANALYTICS_TOPIC: Final = "turnstream.analytics.v1"
"""The default topic analytics snapshots are published to."""

ANALYTICS_NAMESPACE: Final = "turnstream.analytics.v1"
SNAPSHOT_SCHEMA_NAME: Final = f"{ANALYTICS_NAMESPACE}.AnalyticsSnapshot"
ANALYTICS_SCHEMA_SUBDIR: Final = "analytics"
"""Where the analytics schemas live, below the schema directory."""

DEFAULT_MAX_SNAPSHOT_BYTES: Final = 8 * 1024 * 1024
"""Largest snapshot frame written or read: 8 MiB."""

_WHAT: Final = "analytics snapshot"


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SketchBucket(_Value):
    """One non-empty latency bucket (see :class:`LatencySummary`)."""

    index: int
    count: int


class LatencySummary(_Value):
    """Turn latency in milliseconds: exact count/sum/min/max, estimated percentiles.

    A percentile is within ``relative_accuracy`` of the true nearest-rank
    sample (samples under ``min_value_ms`` report 0). ``buckets`` let a
    consumer merge summaries exactly: bucket ``i`` spans
    ``(gamma**(i-1), gamma**i]`` with ``gamma = (1+a)/(1-a)``.
    """

    count: int = 0
    sum_ms: float = 0.0
    min_ms: float | None = None
    max_ms: float | None = None
    p50_ms: float | None = None
    p90_ms: float | None = None
    p99_ms: float | None = None
    relative_accuracy: float = 0.01
    min_value_ms: float = 0.001
    max_value_ms: float = 1e12
    zero_count: int = 0
    buckets: tuple[SketchBucket, ...] = ()


class CountSummary(_Value):
    """A per-turn count (steps or tool calls) over ended turns."""

    turns: int = 0
    total: int = 0
    max: int = 0


class SnapshotAggregates(_Value):
    """The counters of one window, or of the totals."""

    turns_started: int = 0
    turns_done: int = 0
    turns_failed: int = 0
    turns_interrupted: int = 0
    failure_kinds: dict[str, int] = {}
    latency: LatencySummary = LatencySummary()
    steps: CountSummary = CountSummary()
    tool_calls: CountSummary = CountSummary()
    usage_by_model: dict[str, Usage] = {}
    usage_by_loop: dict[str, Usage] = {}


class SnapshotWindow(_Value):
    """One tumbling window ``[start, end)`` of event time."""

    start: AwareDatetime
    end: AwareDatetime
    aggregates: SnapshotAggregates


class AnalyticsSnapshot(_Value):
    """Cumulative analytics over the journal partitions one worker owns.

    Timestamps are UTC with millisecond precision (what Avro
    ``timestamp-millis`` carries).
    """

    snapshot_id: UUID
    app_id: str
    generated_at: AwareDatetime
    partitions: tuple[int, ...] = ()
    window_size_ms: int
    watermark: AwareDatetime | None = None
    loops: int = 0
    open_turns: int = 0
    events_applied: int = 0
    duplicates_skipped: int = 0
    late_events: int = 0
    undecodable: int = 0
    totals: SnapshotAggregates = SnapshotAggregates()
    windows: tuple[SnapshotWindow, ...] = ()


class AnalyticsCodec:
    """Framed Avro encoding of :class:`AnalyticsSnapshot`.

    Args:
        schema: the parsed ``AnalyticsSnapshot`` schema (named types inlined).
        max_payload_bytes: frames larger than this are refused both ways.
    """

    def __init__(
        self, schema: Schema, *, max_payload_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES
    ) -> None:
        if max_payload_bytes < HEADER_SIZE:
            raise ValueError("max_payload_bytes must cover the frame header")
        self.schema = schema
        self.fingerprint = fingerprint_of(schema)
        self.max_payload_bytes = max_payload_bytes

    @classmethod
    def load(cls, schema_dir: Path | None = None) -> AnalyticsCodec:
        """Load the snapshot schema from ``<schema_dir>/analytics/``.

        Args:
            schema_dir: the schema directory (``TURNSTREAM_SCHEMA_DIR``);
                defaults to the checkout's ``schemas/``.

        Raises:
            ConfigError: the schema file is missing or does not parse.
        """
        root = schema_dir if schema_dir is not None else default_schema_dir()
        path = root / ANALYTICS_SCHEMA_SUBDIR / f"{SNAPSHOT_SCHEMA_NAME}.avsc"
        if not path.is_file():
            raise ConfigError("schema_dir", f"{path} is missing")
        try:
            schema = load_schema(str(path), named_schemas={})
        except Exception as exc:
            raise ConfigError(
                "schema_dir", f"{path.name} does not parse: {type(exc).__name__}: {exc}"
            ) from exc
        return cls(schema)

    @property
    def fingerprint_hex(self) -> str:
        """The writer schema's fingerprint, as lowercase hex."""
        return self.fingerprint.hex()

    def marshal_snapshot(self, snapshot: AnalyticsSnapshot) -> bytes:
        """Encode ``snapshot`` as one framed record.

        Raises:
            EncodeError: a value the schema cannot carry (e.g. an integer
                beyond a long), or the frame is over the size limit.
        """
        out = io.BytesIO()
        out.write(frame(self.fingerprint, b""))
        try:
            schemaless_writer(out, self.schema, _record_of(snapshot), strict=True)
        except (ValueError, TypeError, OverflowError, UnicodeError) as exc:
            raise EncodeError(
                _WHAT, f"value not representable ({type(exc).__name__})"
            ) from None
        data = out.getvalue()
        if len(data) > self.max_payload_bytes:
            raise RecordTooLargeError(_WHAT, len(data), self.max_payload_bytes)
        return data

    def unmarshal_snapshot(self, data: bytes) -> AnalyticsSnapshot:
        """Decode one framed snapshot.

        Raises:
            DecodeError: for any input that is not a valid snapshot.
        """
        if len(data) > self.max_payload_bytes:
            raise PayloadTooLargeError(_WHAT, len(data), self.max_payload_bytes)
        fingerprint = read_fingerprint(data, _WHAT)
        if fingerprint != self.fingerprint:
            raise UnknownFingerprintError(_WHAT, fingerprint.hex())
        stream = io.BytesIO(data)
        stream.seek(HEADER_SIZE)
        try:
            decoded: Any = schemaless_reader(stream, self.schema, None)
        except Exception as exc:  # noqa: BLE001 - fail closed on any malformed body
            raise DecodeError(
                _WHAT, f"malformed body ({type(exc).__name__} at byte {stream.tell()})"
            ) from None
        if stream.tell() != len(data):
            raise DecodeError(_WHAT, f"{len(data) - stream.tell()} trailing bytes")
        try:
            return AnalyticsSnapshot.model_validate(decoded)
        except ValidationError as exc:
            raise DecodeError(
                _WHAT, f"value out of contract ({exc.error_count()} errors)"
            ) from None


def _record_of(snapshot: AnalyticsSnapshot) -> dict[str, object]:
    """The Avro record of ``snapshot`` (arrays as lists, nested models as dicts)."""
    record: dict[str, object] = snapshot.model_dump()
    record["partitions"] = list(snapshot.partitions)
    record["totals"] = _aggregates_record(snapshot.totals)
    record["windows"] = [
        {"start": w.start, "end": w.end, "aggregates": _aggregates_record(w.aggregates)}
        for w in snapshot.windows
    ]
    return record


def _aggregates_record(aggregates: SnapshotAggregates) -> dict[str, object]:
    record: dict[str, object] = aggregates.model_dump()
    latency: dict[str, object] = aggregates.latency.model_dump()
    latency["buckets"] = [b.model_dump() for b in aggregates.latency.buckets]
    record["latency"] = latency
    return record


# --------------------------------------------------------------------------
# The process default codec and the module-level API
# --------------------------------------------------------------------------

_default: Final = ProcessDefault(AnalyticsCodec.load)


def set_default_analytics_codec(codec: AnalyticsCodec | None) -> None:
    """Install the codec the module-level functions use (``None`` resets it)."""
    _default.install(codec)


def default_analytics_codec() -> AnalyticsCodec:
    """The installed codec, or one loaded from the checkout's ``schemas/``.

    Raises:
        ConfigError: the default schema directory cannot be loaded.
    """
    return _default.get()


def marshal_snapshot(snapshot: AnalyticsSnapshot) -> bytes:
    """Encode a snapshot with the default analytics codec."""
    return default_analytics_codec().marshal_snapshot(snapshot)


def unmarshal_snapshot(data: bytes) -> AnalyticsSnapshot:
    """Decode a snapshot with the default analytics codec."""
    return default_analytics_codec().unmarshal_snapshot(data)
