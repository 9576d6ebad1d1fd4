"""The codec's fast path against its generic path: same bytes, same values.

The generated writers and readers (``_event_writer``, ``_event_reader``) must
be indistinguishable from ``to_record``/``from_record`` + fastavro: for every
golden event, identical bytes and structurally identical decoded models
(types, field values, ``model_fields_set``, timezone objects); for fuzzed
input, the fast reader either declines or returns exactly what the generic
path returns; and odd values handed to the writer end in the generic path's
bytes or its typed error.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from tests.unit.wire.golden import BUILDERS, encode
from tests.unit.wire.test_wire_fuzz import _mutate, mutation

from turnstream.content import TextChunk
from turnstream.errors import DecodeError
from turnstream.events import (
    ENDURING_EVENT_TYPES,
    EPHEMERAL_EVENT_TYPES,
    EventBase,
    Header,
    TokenDelta,
    TurnDone,
)
from turnstream.wire import Codec, EncodeError, SchemaSet, Topic
from turnstream.wire._accel.codegen import Miss, zigzag_bytes
from turnstream.wire._accel.compiled import compile_schema
from turnstream.wire._accel.event_reader import compile_event_reader, read_long
from turnstream.wire._accel.event_writer import compile_event_writers
from turnstream.wire.codec import _read_enduring, _read_ephemeral
from turnstream.wire.framing import HEADER_SIZE, frame
from turnstream.wire.schemas import default_schema_dir

CODEC = Codec(SchemaSet.load(default_schema_dir()), paths="auto")
"""The accelerated codec whatever ``TURNSTREAM_CODEC`` says (its paths are tested)."""

TOPICS: dict[Topic, tuple[str, frozenset[str], Callable[..., Any]]] = {
    Topic.EVENTS: (
        "event",
        frozenset(t.__name__ for t in ENDURING_EVENT_TYPES),
        _read_enduring,
    ),
    Topic.DELTAS: (
        "ephemeral event",
        frozenset(t.__name__ for t in EPHEMERAL_EVENT_TYPES),
        _read_ephemeral,
    ),
}


def _writers(topic: Topic) -> dict[type[BaseModel], Callable[[EventBase], bytes]]:
    schema = CODEC.schemas.writer_schema(topic)
    return compile_event_writers(schema.parsed, frame(schema.fingerprint, b""))


def _reader(topic: Topic) -> Callable[[bytes], EventBase]:
    reader = compile_event_reader(
        CODEC.schemas.writer_schema(topic).parsed, HEADER_SIZE, TOPICS[topic][1]
    )
    assert reader is not None
    return reader


WRITERS = {topic: _writers(topic) for topic in TOPICS}
READERS = {topic: _reader(topic) for topic in TOPICS}
EVENT_GOLDEN = sorted(
    name for name, build in BUILDERS.items() if isinstance(build(), EventBase)
)


def _topic(event: EventBase) -> Topic:
    return Topic.EVENTS if event.is_enduring() else Topic.DELTAS


def _generic_write(event: EventBase) -> bytes:
    topic = _topic(event)
    return CODEC._write(topic, TOPICS[topic][0], event)  # type: ignore[arg-type]


def _generic_read(topic: Topic, data: bytes) -> EventBase:
    what, _, build = TOPICS[topic]
    value: EventBase = CODEC._read(topic, what, data, build)
    return value


def assert_identical(fast: object, generic: object, where: str = "value") -> None:
    """Equal, and built alike: same types, fields set, timezone objects."""
    assert type(fast) is type(generic), where
    if isinstance(fast, BaseModel):
        assert isinstance(generic, BaseModel)
        assert list(fast.__dict__) == list(generic.__dict__), where
        assert fast.model_fields_set == generic.model_fields_set, where
        assert fast.__pydantic_extra__ == generic.__pydantic_extra__, where
        assert fast.__pydantic_private__ == generic.__pydantic_private__, where
        for key, value in fast.__dict__.items():
            assert_identical(value, generic.__dict__[key], f"{where}.{key}")
    elif isinstance(fast, tuple):
        assert isinstance(generic, tuple)
        assert len(fast) == len(generic), where
        for i, (a, b) in enumerate(zip(fast, generic, strict=True)):
            assert_identical(a, b, f"{where}[{i}]")
    else:
        assert fast == generic, where
        if isinstance(fast, datetime):
            assert isinstance(generic, datetime)
            assert fast.tzinfo is generic.tzinfo, where
    assert fast == generic, where


def test_every_event_type_has_a_fast_writer_and_reader() -> None:
    """No event type silently falls back to the generic path."""
    for topic, types in (
        (Topic.EVENTS, ENDURING_EVENT_TYPES),
        (Topic.DELTAS, EPHEMERAL_EVENT_TYPES),
    ):
        assert set(types) <= set(WRITERS[topic])
        readers = READERS[topic].__globals__["_PAYLOADS"].values()
        assert {f.__name__ for f in readers} == {f"read_{t.__name__}" for t in types}


@pytest.mark.parametrize("name", EVENT_GOLDEN)
def test_fast_writer_matches_generic_bytes_on_golden(name: str) -> None:
    event = BUILDERS[name]()
    assert isinstance(event, EventBase)
    fast = WRITERS[_topic(event)][type(event)](event)
    assert fast == _generic_write(event)
    assert fast == encode(CODEC, event)


@pytest.mark.parametrize("name", EVENT_GOLDEN)
def test_fast_reader_matches_generic_value_on_golden(name: str) -> None:
    event = BUILDERS[name]()
    assert isinstance(event, EventBase)
    data = _generic_write(event)
    fast = READERS[_topic(event)](data)
    assert_identical(fast, _generic_read(_topic(event), data))
    assert fast == event


FUZZ = settings(
    max_examples=300,
    deadline=timedelta(milliseconds=500),
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
GOLDEN_FRAMES = [
    (_topic(BUILDERS[n]()), encode(CODEC, BUILDERS[n]()))
    for n in EVENT_GOLDEN  # type: ignore[arg-type]
]


def _compare_on(topic: Topic, data: bytes) -> None:
    # The codec's own entry to the fast path: frame check, then the reader.
    fast = CODEC._read_fast(topic, data)
    try:
        generic: EventBase | None = _generic_read(topic, data)
    except DecodeError:
        generic = None
    if fast is not None:
        assert generic is not None, "the fast path accepted what the generic refuses"
        assert_identical(fast, generic)


@pytest.mark.timeout(60)
@FUZZ
@given(
    index=st.integers(0, len(GOLDEN_FRAMES) - 1),
    mutations=st.lists(mutation, min_size=1, max_size=4),
    cross=st.booleans(),
)
def test_fast_reader_on_mutated_golden_is_the_generic_or_declines(
    index: int, mutations: list[tuple[str, int, int]], cross: bool
) -> None:
    topic, data = GOLDEN_FRAMES[index]
    for op, where, arg in mutations:
        data = _mutate(data, op, where, arg)
    for each in TOPICS if cross else (topic,):
        _compare_on(each, data)


@pytest.mark.timeout(60)
@FUZZ
@given(
    topic=st.sampled_from(sorted(TOPICS)),
    body=st.binary(max_size=512),
)
def test_fast_reader_on_random_bodies_is_the_generic_or_declines(
    topic: Topic, body: bytes
) -> None:
    prefix = frame(CODEC.schemas.writer_schema(topic).fingerprint, b"")
    _compare_on(topic, prefix + body)


def _record_bytes(topic: Topic, record: dict[str, object]) -> bytes:
    schema = CODEC.schemas.writer_schema(topic)
    out = bytearray(frame(schema.fingerprint, b""))
    compile_schema(schema.parsed)(out, record)
    return bytes(out)


def test_model_rules_still_hold_on_the_fast_path() -> None:
    """A turn index of 0 (``ge=1``) and a negative usage count are refused."""
    from turnstream.wire import to_record

    delta = BUILDERS["TokenDelta"]()
    record: Any = to_record.event_record(delta)  # type: ignore[arg-type]
    record["payload"][1]["turn_index"] = 0
    data = _record_bytes(Topic.DELTAS, record)
    with pytest.raises(Exception):  # noqa: B017, PT011 - the reader only declines
        READERS[Topic.DELTAS](data)
    with pytest.raises(DecodeError, match="turn_index"):
        CODEC.unmarshal_ephemeral(data)

    done = BUILDERS["TurnDone"]()
    record = to_record.event_record(done)  # type: ignore[arg-type]
    record["payload"][1]["usage"]["input_tokens"] = -1
    data = _record_bytes(Topic.EVENTS, record)
    with pytest.raises(DecodeError, match="input_tokens"):
        CODEC.unmarshal_event(data)


def test_model_validators_still_run_on_the_fast_path() -> None:
    """A StepDone whose first message is a tool result breaks its group shape."""
    from turnstream.wire import to_record

    step = BUILDERS["StepDone"]()
    record: Any = to_record.event_record(step)  # type: ignore[arg-type]
    record["payload"][1]["messages"] = record["payload"][1]["messages"][1:]
    data = _record_bytes(Topic.EVENTS, record)
    with pytest.raises(ValueError, match="AIMessage"):
        READERS[Topic.EVENTS](data)
    with pytest.raises(DecodeError, match="StepDone"):
        CODEC.unmarshal_event(data)


def _delta(**header: object) -> TokenDelta:
    base = BUILDERS["TokenDelta"]()
    assert isinstance(base, TokenDelta)
    return base.model_copy(update={"header": base.header.model_copy(update=header)})


@pytest.mark.parametrize(
    ("event", "error"),
    [
        (_delta(created_at=datetime(2026, 1, 1)), EncodeError),  # naive
        (
            BUILDERS["TokenDelta"]().model_copy(update={"turn_index": 1 << 64}),  # type: ignore[union-attr]
            EncodeError,
        ),
        (
            BUILDERS["TokenDelta"]().model_copy(  # type: ignore[union-attr]
                update={"chunk": TextChunk.model_construct(text="\ud800")}
            ),
            EncodeError,
        ),
    ],
    ids=["naive-datetime", "long-overflow", "lone-surrogate"],
)
def test_odd_values_end_in_the_generic_error(event: EventBase, error: type) -> None:
    with pytest.raises(Exception):  # noqa: B017, PT011 - the writer only declines
        WRITERS[Topic.DELTAS][type(event)](event)
    with pytest.raises(error):
        CODEC.marshal_ephemeral(event)


def test_values_the_writer_declines_are_written_by_the_generic_path() -> None:
    """A subclass of a chunk, an enum field holding a plain string."""

    class Loud(TextChunk):
        pass

    base = BUILDERS["TokenDelta"]()
    assert isinstance(base, TokenDelta)
    sub = base.model_copy(update={"chunk": Loud(text="hey")})
    with pytest.raises(Exception):  # noqa: B017, PT011
        WRITERS[Topic.DELTAS][TokenDelta](sub)
    assert CODEC.marshal_ephemeral(sub) == _generic_write(sub)


def test_repeated_delta_headers_share_one_decoded_instance() -> None:
    delta = BUILDERS["TokenDelta"]()
    data = CODEC.marshal_ephemeral(delta)
    first, second = CODEC.unmarshal_ephemeral(data), CODEC.unmarshal_ephemeral(data)
    assert first.header is second.header
    assert isinstance(first.header, Header)
    assert first == delta


def test_enduring_headers_are_not_cached() -> None:
    done = BUILDERS["TurnDone"]()
    assert isinstance(done, TurnDone)
    data = CODEC.marshal_event(done)
    assert CODEC.unmarshal_event(data).header is not CODEC.unmarshal_event(data).header
    assert done.header.created_at is not None
    assert done.header.created_at.tzinfo is not None
    assert CODEC.unmarshal_event(data).header.created_at == done.header.created_at
    assert UTC.utcoffset(None) == timedelta(0)


def _reference_long(data: bytes, p: int) -> tuple[int, int]:
    z = shift = 0
    while True:
        b = data[p]
        p += 1
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise Miss
    if z >> 64:
        raise Miss
    return (z >> 1) ^ -(z & 1), p


def _outcome(read: Callable[[bytes, int], tuple[int, int]], data: bytes) -> object:
    try:
        return read(data, 0)
    except Miss:
        return "miss"
    except IndexError:
        return "truncated"


@FUZZ
@given(
    data=st.one_of(
        st.integers(-(2**63), 2**63 - 1).map(lambda n: zigzag_bytes(n) + b"\x00"),
        st.binary(min_size=1, max_size=14),
        st.lists(st.sampled_from([0x80, 0xFF, 0x81, 0x01, 0x7F]), max_size=14).map(
            bytes
        ),
    )
)
def test_unrolled_varint_reader_matches_the_loop(data: bytes) -> None:
    assert _outcome(read_long, data) == _outcome(_reference_long, data)
