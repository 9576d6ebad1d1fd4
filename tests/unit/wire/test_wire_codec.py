"""The codec's contract: what it writes, what it refuses, how it fails.

Pins: enduring-only journal writes (ephemeral refused, validation before
write), validation after decode, the TurnFailed error surviving a restart as
a typed RestoredError, fail-closed decoding (framing, fingerprints, trailing
bytes, oversize input refused before decoding, huge length prefixes), values
Avro cannot carry refused on write, old schema versions read through
resolution, and the Kafka headers.
"""

from __future__ import annotations

import io
import json
import shutil
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from fastavro import schemaless_reader, schemaless_writer
from tests.unit.wire.golden import (
    AT,
    BUILDERS,
    SCHEMA_DIR,
    TURN,
    decoder_for,
    encode,
    live_header,
    step_header,
    turn_header,
)

from turnstream import wire
from turnstream.content import (
    AIMessage,
    ImageBlock,
    TextBlock,
    TextChunk,
    Usage,
    UserMessage,
)
from turnstream.errors import (
    ContractError,
    DecodeError,
    EphemeralNotPersistableError,
    InvalidEventError,
    PayloadTooLargeError,
    RestoredError,
    ToolLimitError,
    UnknownEventTypeError,
    UnsupportedSchemaError,
)
from turnstream.events import (
    EPHEMERAL_EVENT_TYPES,
    FailureKind,
    Header,
    LoopIdle,
    StepDone,
    TokenDelta,
    TurnDone,
    TurnFailed,
    TurnInterrupted,
    TurnStarted,
    failure_from_error,
)
from turnstream.wire import (
    Codec,
    EncodeError,
    FramingError,
    InvalidRecordError,
    NotEphemeralError,
    RecordTooLargeError,
    SchemaSet,
    Topic,
    UnknownFingerprintError,
    UnknownRecordTypeError,
    to_record,
)
from turnstream.wire.framing import HEADER_SIZE, MAGIC, frame


def _zigzag(n: int) -> bytes:
    """Avro's zig-zag varint encoding of a long."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _raw_event_frame(codec: Codec, event: Any, topic: Topic = Topic.EVENTS) -> bytes:
    """Frame an event WITHOUT the codec's checks (to forge bad records)."""
    schema = codec.schemas.writer_schema(topic)
    out = io.BytesIO()
    schemaless_writer(out, schema.parsed, to_record.event_record(event), strict=True)
    return frame(schema.fingerprint, out.getvalue())


# ------------------------------------------------------------ journal writes


@pytest.mark.parametrize("event_type", EPHEMERAL_EVENT_TYPES, ids=lambda t: t.__name__)
def test_marshal_event_refuses_every_ephemeral_event(
    codec: Codec, event_type: type
) -> None:
    """Live-only events never reach the journal."""
    event = next(b() for b in BUILDERS.values() if type(b()) is event_type)
    with pytest.raises(EphemeralNotPersistableError) as info:
        codec.marshal_event(event)
    assert info.value.type_name == event_type.__name__


def test_marshal_ephemeral_refuses_an_enduring_event(codec: Codec) -> None:
    with pytest.raises(NotEphemeralError):
        codec.marshal_ephemeral(BUILDERS["TurnDone"]())


def test_marshal_event_validates_before_writing(codec: Codec) -> None:
    """A record that could not be restored is never written."""
    no_event_id = TurnInterrupted(header=live_header(), turn_index=1)
    with pytest.raises(InvalidEventError) as info:
        codec.marshal_event(no_event_id)
    assert (info.value.field, info.value.rule) == ("event_id", "must be set")


def test_marshal_event_refuses_an_unknown_event_class(codec: Codec) -> None:
    class Rogue(LoopIdle):
        pass

    with pytest.raises(UnknownEventTypeError):
        codec.marshal_event(Rogue(header=BUILDERS["LoopIdle"]().header))


def test_unmarshal_event_validates_after_decoding(codec: Codec) -> None:
    """A forged journal record breaking its profile is a DecodeError too."""
    forged = _raw_event_frame(
        codec, TurnStarted(header=live_header(), turn_index=1, message=UserMessage())
    )
    with pytest.raises(InvalidRecordError) as info:
        codec.unmarshal_event(forged)
    assert isinstance(info.value, DecodeError)
    assert isinstance(info.value, InvalidEventError)
    assert (info.value.event, info.value.field) == ("TurnStarted", "event_id")


def test_unmarshal_ephemeral_does_not_require_an_event_id(codec: Codec) -> None:
    delta = TokenDelta(header=Header(), turn_index=1, chunk=TextChunk(text="x"))
    assert codec.unmarshal_ephemeral(codec.marshal_ephemeral(delta)) == delta


def test_turn_done_with_reasoning_above_output_still_persists(codec: Codec) -> None:
    """Divergent usage is carried verbatim, never a reason to refuse TurnDone."""
    odd = Usage(output_tokens=5, reasoning_tokens=50)
    event = TurnDone(
        header=turn_header(), turn_index=1, message=AIMessage(usage=odd), usage=odd
    )
    assert not event.usage.reasoning_within_output()
    assert codec.unmarshal_event(codec.marshal_event(event)) == event


# ------------------------------------------------- error projection on the wire


def test_turn_failed_error_is_typed_after_a_restart(codec: Codec) -> None:
    """The live error's kind survives the journal: consumers branch on it."""
    live = ToolLimitError(iterations=8, max_iterations=8, calls=9, max_calls=16)
    event = TurnFailed(
        header=turn_header(), turn_index=2, error=failure_from_error(live)
    )
    restored = codec.unmarshal_event(codec.marshal_event(event))
    assert isinstance(restored, TurnFailed)
    error = restored.restored_error()
    assert isinstance(error, RestoredError)
    assert error.restored_kind == FailureKind.TOOL_LIMIT == live.kind
    assert error.message == str(live)
    # Re-projecting the restored error is a fixed point on the wire too.
    again = TurnFailed(
        header=turn_header(), turn_index=2, error=failure_from_error(error)
    )
    assert codec.marshal_event(again) == codec.marshal_event(restored)


def test_turn_failed_without_error_restores_as_unknown(codec: Codec) -> None:
    event = TurnFailed(
        header=turn_header(), turn_index=1, error=failure_from_error(None)
    )
    error = codec.unmarshal_event(codec.marshal_event(event))
    assert isinstance(error, TurnFailed)
    assert (error.error.kind, error.error.message) == (FailureKind.UNKNOWN, "")


# --------------------------------------------------------- fail-closed decode


DECODERS = ["event", "ephemeral", "command", "state"]


def _decoder(codec: Codec, which: str) -> Any:
    return {
        "event": codec.unmarshal_event,
        "ephemeral": codec.unmarshal_ephemeral,
        "command": codec.unmarshal_command,
        "state": codec.unmarshal_state,
    }[which]


def _topic(which: str) -> Topic:
    return {
        "event": Topic.EVENTS,
        "ephemeral": Topic.DELTAS,
        "command": Topic.COMMANDS,
        "state": Topic.LOOPS,
    }[which]


@pytest.mark.parametrize("which", DECODERS)
@pytest.mark.parametrize(
    ("data", "error"),
    [
        pytest.param(b"", FramingError, id="empty"),
        pytest.param(b"\xc3\x01\x00", FramingError, id="short-header"),
        pytest.param(
            b"\x00\x00\x00\x00\x01" + b"\x00" * 16, FramingError, id="confluent"
        ),
        pytest.param(b'{"type": "TurnDone"}', FramingError, id="json"),
        pytest.param(
            MAGIC + b"\x01" * 8 + b"\x00", UnknownFingerprintError, id="fingerprint"
        ),
    ],
)
def test_malformed_frames_are_typed_decode_errors(
    codec: Codec, which: str, data: bytes, error: type[DecodeError]
) -> None:
    with pytest.raises(error) as info:
        _decoder(codec, which)(data)
    assert isinstance(info.value, DecodeError)


def test_unknown_fingerprint_is_also_an_unsupported_schema_error(codec: Codec) -> None:
    with pytest.raises(UnsupportedSchemaError) as info:
        codec.unmarshal_event(MAGIC + b"\xee" * 8)
    assert isinstance(info.value, DecodeError)
    assert info.value.kind == "unsupported_schema"
    assert info.value.fingerprint == "ee" * 8


@pytest.mark.parametrize(
    ("value", "decoder"),
    [
        pytest.param("SubmitInput", "event", id="command-as-event"),
        pytest.param("TokenDelta", "event", id="delta-as-event"),
        pytest.param("TurnDone", "ephemeral", id="event-as-delta"),
        pytest.param("LoopState", "command", id="state-as-command"),
        pytest.param("TurnStarted", "state", id="event-as-state"),
    ],
)
def test_a_frame_from_another_topic_is_refused(
    codec: Codec, value: str, decoder: str
) -> None:
    """Each decoder accepts only its own topic's fingerprints."""
    data = encode(codec, BUILDERS[value]())
    with pytest.raises(UnknownFingerprintError):
        _decoder(codec, decoder)(data)


@pytest.mark.parametrize(
    "name", ["TurnStarted", "TokenDelta", "SubmitInput", "LoopState"]
)
def test_trailing_bytes_and_truncation_are_refused(codec: Codec, name: str) -> None:
    value = BUILDERS[name]()
    data = encode(codec, value)
    decode = decoder_for(codec, value)
    with pytest.raises(DecodeError, match="trailing"):
        decode(data + b"\x00")
    for cut in range(HEADER_SIZE, len(data)):
        with pytest.raises(DecodeError):
            decode(data[:cut])


@pytest.mark.parametrize("which", DECODERS)
@pytest.mark.parametrize(
    "claim",
    [2**31, 2**62, -(2**62), 2**63 - 1],
    ids=["2GiB", "2^62", "negative", "max-long"],
)
def test_huge_length_prefixes_fail_fast(codec: Codec, which: str, claim: int) -> None:
    """A 5-byte body claiming a 2 GB string/array neither allocates nor hangs.

    Every top-level record starts with a uuid/string or a union/array count,
    so the claim lands on a length or count read. The body is padded so the
    claim meets some real bytes.
    """
    fingerprint = codec.schemas.writer_schema(_topic(which)).fingerprint
    for prefix in (b"", b"\x02", b"\x02\x02", b"\x00" * 8):
        data = frame(fingerprint, prefix + _zigzag(claim) + b"abcd")
        started = time.perf_counter()
        with pytest.raises(DecodeError):
            _decoder(codec, which)(data)
        assert time.perf_counter() - started < 0.5


def test_oversize_payload_is_refused_before_decoding(codec: Codec) -> None:
    """Size is checked first: a huge buffer is not even framed or parsed."""
    data = b"\x00" * (wire.DEFAULT_MAX_PAYLOAD_BYTES + 1)
    with pytest.raises(PayloadTooLargeError) as info:
        codec.unmarshal_event(data)
    assert (info.value.size, info.value.limit) == (len(data), 8 * 1024 * 1024)
    assert isinstance(info.value, DecodeError)


def test_payload_limit_is_configurable_on_both_sides(schema_set: SchemaSet) -> None:
    small = Codec(schema_set, max_payload_bytes=64)
    event = BUILDERS["StepDone"]()
    with pytest.raises(RecordTooLargeError) as info:
        small.marshal_event(event)
    assert info.value.limit == 64
    data = Codec(schema_set).marshal_event(event)
    with pytest.raises(PayloadTooLargeError):
        small.unmarshal_event(data)
    with pytest.raises(ValueError, match="header"):
        Codec(schema_set, max_payload_bytes=4)


def test_decoded_values_out_of_contract_are_decode_errors(codec: Codec) -> None:
    """Avro-valid bytes that break a model rule (negative usage) are refused."""
    schema = codec.schemas.writer_schema(Topic.EVENTS)
    record = to_record.event_record(BUILDERS["TurnDone"]())
    payload = record["payload"]
    assert isinstance(payload, tuple)
    usage = dict(payload[1]["usage"])  # type: ignore[index]
    usage["input_tokens"] = -1
    forged = dict(record, payload=(payload[0], {**payload[1], "usage": usage}))  # type: ignore[dict-item]
    out = io.BytesIO()
    schemaless_writer(out, schema.parsed, forged, strict=True)
    with pytest.raises(DecodeError, match=r"Usage\.input_tokens") as info:
        codec.unmarshal_event(frame(schema.fingerprint, out.getvalue()))
    assert "-1" not in str(info.value)


def test_decode_errors_never_echo_payload_text(codec: Codec) -> None:
    secret = "sk-live-SECRET-prompt"
    data = encode(codec, BUILDERS["TurnStarted"]()).replace(
        b"What", secret[:4].encode()
    )
    for cut in (len(data) - 3, len(data) - 20):
        with pytest.raises(DecodeError) as info:
            codec.unmarshal_event(data[:cut])
        assert "sk-l" not in str(info.value)


# --------------------------------------------------------------- encode refusals


@pytest.mark.parametrize(
    "event",
    [
        pytest.param(
            TurnInterrupted(
                header=turn_header().model_copy(
                    update={"created_at": datetime(2026, 1, 1)}
                ),
                turn_index=1,
            ),
            id="naive-datetime",
        ),
        pytest.param(
            TurnInterrupted(header=turn_header(), turn_index=2**63), id="int>long"
        ),
        pytest.param(
            StepDone(
                header=step_header(),
                messages=(AIMessage(blocks=(TextBlock(text="\ud800"),)),),
            ),
            id="lone-surrogate",
        ),
    ],
)
def test_values_avro_cannot_carry_are_encode_errors(codec: Codec, event: Any) -> None:
    with pytest.raises(EncodeError) as info:
        codec.marshal_event(event)
    assert isinstance(info.value, ContractError)
    assert not isinstance(info.value, DecodeError)


def test_aware_non_utc_datetimes_round_trip_as_the_same_instant(codec: Codec) -> None:
    from datetime import timedelta, timezone

    local = AT.astimezone(timezone(timedelta(hours=2)))
    event = TurnInterrupted(
        header=turn_header().model_copy(update={"created_at": local}), turn_index=1
    )
    back = codec.unmarshal_event(codec.marshal_event(event))
    assert back == event
    assert back.header.created_at == AT


def test_image_bytes_round_trip(codec: Codec) -> None:
    data = bytes(range(256)) * 4
    event = TurnStarted(
        header=turn_header(),
        turn_index=1,
        message=UserMessage(blocks=(ImageBlock(media_type="image/png", data=data),)),
    )
    assert codec.unmarshal_event(codec.marshal_event(event)) == event


# ------------------------------------------------------- schema versions


def test_data_of_an_older_schema_set_is_resolved_into_the_current_one(
    scratch_dir: Path, codec: Codec
) -> None:
    """A frame written by history/<old> decodes through its fingerprint.

    The old set lacks Header.agent_name; resolution fills its default.
    """
    root = scratch_dir / "schemas"
    shutil.copytree(
        SCHEMA_DIR, root, ignore=shutil.ignore_patterns("history", "fixtures")
    )
    old_dir = root / "history" / "v0"
    shutil.copytree(root, old_dir, ignore=shutil.ignore_patterns("history"))
    header_path = old_dir / "turnstream.v1.Header.avsc"
    header = json.loads(header_path.read_text())
    header["fields"] = [f for f in header["fields"] if f["name"] != "agent_name"]
    header_path.write_text(json.dumps(header))
    schemas = SchemaSet.load(root)
    old = next(s for s in schemas.readable[Topic.EVENTS].values() if s.version == "v0")
    assert old.fingerprint != schemas.writer_schema(Topic.EVENTS).fingerprint

    event = TurnInterrupted(header=turn_header(), turn_index=4)
    record = to_record.event_record(event)
    record["header"] = {k: v for k, v in record["header"].items() if k != "agent_name"}  # type: ignore[union-attr]
    out = io.BytesIO()
    schemaless_writer(out, old.parsed, record, strict=True)
    decoded = Codec(schemas).unmarshal_event(frame(old.fingerprint, out.getvalue()))
    assert decoded == event
    assert decoded.header.turn_id == TURN


def test_unknown_union_branch_is_an_unknown_record_type(codec: Codec) -> None:
    """An old reader meeting an appended event type fails typed, not by guess."""
    from turnstream.wire.from_record import event_from

    data = codec.marshal_event(BUILDERS["TurnDone"]())
    record = schemaless_reader(
        io.BytesIO(data[HEADER_SIZE:]),
        codec.schemas.writer_schema(Topic.EVENTS).parsed,
        None,
        return_record_name=True,
        return_record_name_override=True,
    )
    record["payload"] = ("x.Future", {})
    with pytest.raises(UnknownRecordTypeError) as info:
        event_from(record, frozenset({"TurnDone"}))
    assert isinstance(info.value, DecodeError)
    assert isinstance(info.value, UnknownEventTypeError)
    assert info.value.type_name == "Future"


# ------------------------------------------------------------- kafka headers


@pytest.mark.parametrize(
    ("name", "topic"),
    [
        pytest.param("TurnDone", Topic.EVENTS, id="enduring"),
        pytest.param("TokenDelta", Topic.DELTAS, id="ephemeral"),
        pytest.param("RespondGate", Topic.COMMANDS, id="command"),
        pytest.param("LoopState", Topic.LOOPS, id="state"),
    ],
)
def test_kafka_headers_name_type_and_fingerprint(
    codec: Codec, name: str, topic: Topic
) -> None:
    value = BUILDERS[name]()
    headers = dict(codec.kafka_headers(value))
    assert headers["ts-type"] == type(value).__name__.encode()
    data = encode(codec, value)
    assert headers["ts-schema"] == data[2:HEADER_SIZE].hex().encode()
    assert (
        headers["ts-schema"]
        == codec.schemas.writer_schema(topic).fingerprint_hex.encode()
    )


# ---------------------------------------------------------- module functions


def test_module_functions_use_the_default_codec(codec: Codec) -> None:
    wire.set_default_codec(codec)
    try:
        assert wire.default_codec() is codec
        for name, builder in BUILDERS.items():
            value = builder()
            data = encode(codec, value)
            if name in (
                "SubmitInput",
                "Interrupt",
                "RespondGate",
                "Retract",
                "Shutdown",
                "DeleteLoop",
            ):
                assert wire.marshal_command(value) == data  # type: ignore[arg-type]
                assert wire.unmarshal_command(data) == value
            elif name.startswith("LoopState"):
                assert wire.marshal_state(value) == data  # type: ignore[arg-type]
                assert wire.unmarshal_state(data) == value
            elif type(value) in EPHEMERAL_EVENT_TYPES:
                assert wire.marshal_ephemeral(value) == data  # type: ignore[arg-type]
                assert wire.unmarshal_ephemeral(data) == value
            else:
                assert wire.marshal_event(value) == data  # type: ignore[arg-type]
                assert wire.unmarshal_event(data) == value
            assert wire.kafka_headers(value) == codec.kafka_headers(value)  # type: ignore[arg-type]
    finally:
        wire.set_default_codec(None)


def test_default_codec_loads_the_checkout_schemas() -> None:
    wire.set_default_codec(None)
    try:
        assert wire.default_codec().schemas.directory == SCHEMA_DIR
    finally:
        wire.set_default_codec(None)


# ---------------------------------------------------------- error hierarchy


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        pytest.param(FramingError("event", "x"), "framing", id="framing"),
        pytest.param(
            UnknownFingerprintError("event", "00"), "unsupported_schema", id="fp"
        ),
        pytest.param(
            UnknownRecordTypeError("event", "X"), "unknown_event_type", id="type"
        ),
        pytest.param(
            InvalidRecordError("event", "E", "f", "must be set"),
            "invalid_event",
            id="inv",
        ),
        pytest.param(
            PayloadTooLargeError("event", 2, 1), "payload_too_large", id="size"
        ),
    ],
)
def test_every_decode_failure_is_a_decode_error(error: DecodeError, kind: str) -> None:
    """One ``except DecodeError`` covers every decoder failure; kinds are stable."""
    assert isinstance(error, DecodeError)
    assert isinstance(error, ContractError)
    assert error.kind == kind
    assert str(error).startswith("cannot decode event")


def test_wire_package_is_a_table_of_contents() -> None:
    """Every name in ``turnstream.wire.__all__`` resolves; the list is sorted."""
    assert wire.__all__ == sorted(wire.__all__, key=lambda n: (not n.isupper(), n))
    for name in wire.__all__:
        assert getattr(wire, name) is not None
