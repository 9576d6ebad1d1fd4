"""The codec's native (C) path against its generic path: same bytes, same values.

``_native`` walks the plans ``native_plan`` builds; it may decline anything
(the Python paths then decide), but what it returns must be indistinguishable
from the generic path: identical bytes for every golden event, structurally
identical models (types, field order, fields set, timezone objects) for every
golden frame, for mutated and random frames either a decline or the generic
value, and the id rules of ``validate_event`` held on both directions.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from uuid import UUID

import hatch_build  # the build hook, at the checkout root (on the test path)
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.unit.wire.golden import BUILDERS, encode
from tests.unit.wire.test_wire_fast_path import (
    EVENT_GOLDEN,
    FUZZ,
    GOLDEN_FRAMES,
    TOPICS,
    _generic_read,
    _generic_write,
    _topic,
    assert_identical,
)
from tests.unit.wire.test_wire_fuzz import _mutate, mutation

from turnstream.content import TextChunk
from turnstream.errors import DecodeError, InvalidEventError
from turnstream.events import (
    ENDURING_EVENT_TYPES,
    EPHEMERAL_EVENT_TYPES,
    EventBase,
    StepDone,
    TokenDelta,
)
from turnstream.validation import id_rules, validate_event
from turnstream.wire import Codec, EncodeError, SchemaSet, Topic, to_record
from turnstream.wire._accel import native_plan as native
from turnstream.wire._accel.compiled import compile_schema
from turnstream.wire._accel.switch import codec_choice
from turnstream.wire.errors import InvalidRecordError
from turnstream.wire.framing import frame
from turnstream.wire.schemas import default_schema_dir

ROOT = Path(__file__).resolve().parents[3]

CODEC = Codec(SchemaSet.load(default_schema_dir()))
needs_native = pytest.mark.skipif(
    not native.native_available(), reason="native codec not built or switched off"
)


def _path(topic: Topic) -> native.NativePath:
    return CODEC._native_path(topic)


def _write(event: EventBase) -> bytes | None:
    plan = _path(_topic(event)).writers[type(event)]
    data: bytes | None = native.write(plan, event, CODEC.max_payload_bytes)
    return data


def _read(topic: Topic, data: bytes) -> Any:
    reader = _path(topic).reader
    assert reader is not None
    return native.read(reader, data)


def _declines(fn: Any, *args: object) -> bool:
    """A decline is None (the Python paths then decide), never an exception."""
    return fn(*args) is None


def test_native_extension_is_built_where_a_compiler_is() -> None:
    """``make install`` builds it; it must not be silently missing or stale."""
    if codec_choice() != "auto":
        pytest.skip("the codec switch leaves the C extension out")
    if hatch_build.compiler() is None:
        pytest.skip("no C compiler here: the package is pure Python")
    assert native.native_available(), "run `make install` (or `make native`)"
    from turnstream.wire._accel import _native  # type: ignore[attr-defined]

    source = ROOT / hatch_build.SOURCE
    built_from = _native.SOURCE_DIGEST
    expected = hatch_build.source_digest(source.read_bytes())
    assert built_from == expected, "built from another _native.c: run `make native`"


def test_an_extension_built_from_another_source_is_not_used(tmp_path: Path) -> None:
    """A stale build (the C edited or updated, not rebuilt) never walks new plans."""

    class Built:
        SOURCE_DIGEST = hatch_build.source_digest(b"/* the source it was built from */")

    older = tmp_path / "_native.c"
    older.write_bytes(b"/* the source it was built from */")
    assert native.is_current(Built, older)  # type: ignore[arg-type]
    older.write_bytes(b"/* edited since */")
    assert not native.is_current(Built, older)  # type: ignore[arg-type]
    assert native.is_current(Built, tmp_path / "missing.c")  # type: ignore[arg-type]


def test_switched_off_the_codec_runs_its_python_paths() -> None:
    code = (
        "from turnstream.wire import Codec, SchemaSet\n"
        "from turnstream.wire._accel import native_plan as n\n"
        "from tests.unit.wire.golden import BUILDERS\n"
        "c = Codec(SchemaSet.load())\n"
        "e = BUILDERS['TurnDone']()\n"
        "assert not n.native_available()\n"
        "assert c.unmarshal_event(c.marshal_event(e)) == e\n"
        "print(c.marshal_event(e).hex())\n"
    )
    env = {**os.environ, native.NATIVE_ENV: "0"}
    done = subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=ROOT,
    )
    assert bytes.fromhex(done.stdout.strip()) == encode(CODEC, BUILDERS["TurnDone"]())


@needs_native
def test_every_event_type_has_native_plans() -> None:
    for topic, types in (
        (Topic.EVENTS, ENDURING_EVENT_TYPES),
        (Topic.DELTAS, EPHEMERAL_EVENT_TYPES),
    ):
        assert set(_path(topic).writers) == set(types)
        assert _path(topic).readers == {t.__name__ for t in types}


@needs_native
@pytest.mark.parametrize("name", EVENT_GOLDEN)
def test_native_writer_matches_generic_bytes_on_golden(name: str) -> None:
    event = BUILDERS[name]()
    assert isinstance(event, EventBase)
    assert _write(event) == _generic_write(event) == encode(CODEC, event)


@needs_native
@pytest.mark.parametrize("name", EVENT_GOLDEN)
def test_native_reader_matches_generic_value_on_golden(name: str) -> None:
    event = BUILDERS[name]()
    assert isinstance(event, EventBase)
    data = _generic_write(event)
    decoded = _read(_topic(event), data)
    assert_identical(decoded, _generic_read(_topic(event), data))
    assert decoded == event


@needs_native
@pytest.mark.parametrize("name", EVENT_GOLDEN)
def test_native_values_behave_as_pydantic_built_ones(name: str) -> None:
    """Equality, hash, repr, dump, copy with update, pickle: all as validated."""
    event = BUILDERS[name]()
    assert isinstance(event, EventBase)
    data = _generic_write(event)
    decoded, generic = _read(_topic(event), data), _generic_read(_topic(event), data)
    assert decoded == event
    assert hash(decoded) == hash(event)
    assert repr(decoded) == repr(event)
    assert decoded.model_dump_json() == event.model_dump_json()
    assert pickle.loads(pickle.dumps(decoded)) == event  # noqa: S301 - own bytes
    moved = decoded.model_copy(update={"header": event.header})
    assert_identical(moved, generic.model_copy(update={"header": event.header}))


def _compare_on(topic: Topic, data: bytes) -> None:
    got = _read(topic, data)
    if got is None:  # declined
        return
    try:
        generic = _generic_read(topic, data)
    except DecodeError:
        pytest.fail("the native path accepted what the generic refuses")
    assert_identical(got, generic)
    if topic is Topic.EVENTS:
        validate_event(got)  # the id rules held, as unmarshal_event requires


@needs_native
@pytest.mark.timeout(60)
@FUZZ
@given(
    index=st.integers(0, len(GOLDEN_FRAMES) - 1),
    mutations=st.lists(mutation, min_size=1, max_size=4),
    cross=st.booleans(),
)
def test_native_reader_on_mutated_golden_is_the_generic_or_declines(
    index: int, mutations: list[tuple[str, int, int]], cross: bool
) -> None:
    topic, data = GOLDEN_FRAMES[index]
    for op, where, arg in mutations:
        data = _mutate(data, op, where, arg)
    for each in TOPICS if cross else (topic,):
        _compare_on(each, data)


@needs_native
@pytest.mark.timeout(60)
@FUZZ
@given(topic=st.sampled_from(sorted(TOPICS)), body=st.binary(max_size=512))
def test_native_reader_on_random_bodies_is_the_generic_or_declines(
    topic: Topic, body: bytes
) -> None:
    prefix = frame(CODEC.schemas.writer_schema(topic).fingerprint, b"")
    _compare_on(topic, prefix + body)


def _record_bytes(topic: Topic, record: dict[str, object]) -> bytes:
    schema = CODEC.schemas.writer_schema(topic)
    out = bytearray(frame(schema.fingerprint, b""))
    compile_schema(schema.parsed)(out, record)
    return bytes(out)


@needs_native
def test_model_rules_hold_on_the_native_path() -> None:
    """A turn index of 0 (``ge=1``), a negative count, a broken group shape."""
    delta: Any = to_record.event_record(BUILDERS["TokenDelta"]())  # type: ignore[arg-type]
    delta["payload"][1]["turn_index"] = 0
    data = _record_bytes(Topic.DELTAS, delta)
    assert _declines(_read, Topic.DELTAS, data)
    with pytest.raises(DecodeError, match="turn_index"):
        CODEC.unmarshal_ephemeral(data)

    done: Any = to_record.event_record(BUILDERS["TurnDone"]())  # type: ignore[arg-type]
    done["payload"][1]["usage"]["input_tokens"] = -1
    data = _record_bytes(Topic.EVENTS, done)
    assert _declines(_read, Topic.EVENTS, data)
    with pytest.raises(DecodeError, match="input_tokens"):
        CODEC.unmarshal_event(data)

    step: Any = to_record.event_record(BUILDERS["StepDone"]())  # type: ignore[arg-type]
    step["payload"][1]["messages"] = step["payload"][1]["messages"][1:]
    data = _record_bytes(Topic.EVENTS, step)
    assert _declines(_read, Topic.EVENTS, data)  # the validator raised inside
    with pytest.raises(DecodeError, match="StepDone"):
        CODEC.unmarshal_event(data)


def _broken_id_cases() -> list[tuple[str, str, bool, str]]:
    """Every id rule of every enduring golden event, each broken once."""
    cases = []
    for name in EVENT_GOLDEN:
        event = BUILDERS[name]()
        assert isinstance(event, EventBase)
        if not event.is_enduring():
            continue
        rules = id_rules(type(event))
        assert rules is not None
        for rule in rules:
            how = "unset" if rule.must_be_set else "set"
            cases.append((name, rule.field, rule.in_header, how))
    return cases


def _break(event: EventBase, field: str, in_header: bool, how: str) -> EventBase:
    # Header ids are optional (None is unset); an event's own id is not, so
    # there unset is the nil UUID (which validate_event also counts as unset).
    unset = None if in_header else UUID(int=0)
    value = unset if how == "unset" else UUID(int=0xBAD)
    if in_header:
        header = event.header.model_copy(update={field: value})
        return event.model_copy(update={"header": header})
    return event.model_copy(update={field: value})


@needs_native
@pytest.mark.parametrize(("name", "field", "in_header", "how"), _broken_id_cases())
def test_native_id_checks_are_validate_events(
    name: str, field: str, in_header: bool, how: str
) -> None:
    """Each broken id rule: the native writer and reader decline, and the
    codec raises the typed error on both directions, as on the Python path."""
    event = _break(BUILDERS[name](), field, in_header, how)  # type: ignore[arg-type]
    with pytest.raises(InvalidEventError) as raised:
        validate_event(event)
    assert _declines(_write, event)
    with pytest.raises(InvalidEventError) as marshalled:
        CODEC.marshal_event(event)
    assert str(marshalled.value) == str(raised.value)

    data = _record_bytes(Topic.EVENTS, to_record.event_record(event))  # type: ignore[arg-type]
    assert _declines(_read, Topic.EVENTS, data)
    with pytest.raises(InvalidRecordError, match=field):
        CODEC.unmarshal_event(data)


@needs_native
def test_nil_uuid_counts_as_unset_as_in_validate_event() -> None:
    event = _break(BUILDERS["TurnDone"](), "turn_id", True, "unset")  # type: ignore[arg-type]
    nil = event.model_copy(
        update={"header": event.header.model_copy(update={"turn_id": UUID(int=0)})}
    )
    assert _declines(_write, nil)
    with pytest.raises(InvalidEventError, match="turn_id"):
        CODEC.marshal_event(nil)


def _delta_with(**header: object) -> TokenDelta:
    base = BUILDERS["TokenDelta"]()
    assert isinstance(base, TokenDelta)
    return base.model_copy(update={"header": base.header.model_copy(update=header)})


class _Loud(TextChunk):
    pass


@needs_native
@pytest.mark.parametrize(
    "event",
    [
        _delta_with(created_at=datetime(2026, 1, 1)),  # naive
        _delta_with(
            created_at=datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=2)))
        ),
        BUILDERS["TokenDelta"]().model_copy(update={"turn_index": 1 << 64}),  # type: ignore[union-attr]
        BUILDERS["TokenDelta"]().model_copy(  # type: ignore[union-attr]
            update={"chunk": TextChunk.model_construct(text="\ud800")}
        ),
        BUILDERS["TokenDelta"]().model_copy(update={"chunk": _Loud(text="hey")}),  # type: ignore[union-attr]
        BUILDERS["TokenDelta"]().model_copy(  # type: ignore[union-attr]
            update={"chunk": TextChunk.model_construct(text=b"bytes")}
        ),
    ],
    ids=["naive", "other-zone", "long-overflow", "surrogate", "subclass", "bytes"],
)
def test_native_writer_declines_the_odd_and_the_codec_still_decides(
    event: EventBase,
) -> None:
    assert _declines(_write, event)
    try:
        expected: bytes | type = _generic_write(event)
    except Exception as exc:
        expected = type(exc)
    if isinstance(expected, bytes):
        assert CODEC.marshal_ephemeral(event) == expected
    else:
        with pytest.raises(expected):
            CODEC.marshal_ephemeral(event)


@needs_native
def test_a_steps_list_of_messages_is_declined_and_written_alike() -> None:
    step = BUILDERS["StepDone"]()
    assert isinstance(step, StepDone)
    listed = StepDone.model_construct(header=step.header, messages=list(step.messages))
    assert _declines(_write, listed)
    assert CODEC.marshal_event(listed) == _generic_write(step)


@needs_native
def test_non_canonical_uuid_text_is_read_as_the_generic_reads_it() -> None:
    """Uppercase hex parses on the Python side of the native reader."""
    base = BUILDERS["TurnDone"]()
    assert isinstance(base, EventBase)
    session = UUID("abcdef01-2345-4678-9abc-def012345678")
    done = base.model_copy(
        update={"header": base.header.model_copy(update={"session_id": session})}
    )
    data = encode(CODEC, done)
    text = str(session).encode()
    upper = data.replace(text, text.upper())
    assert upper != data
    assert_identical(_read(Topic.EVENTS, upper), _generic_read(Topic.EVENTS, upper))


@needs_native
@FUZZ
@given(
    ids=st.lists(st.uuids(), min_size=5, max_size=5),
    at=st.datetimes(
        min_value=datetime(1, 1, 2),
        max_value=datetime(9999, 12, 30),
    ),
    index=st.integers(1, 2**63 - 1),
)
def test_random_ids_times_and_counts_roundtrip_as_on_the_generic_path(
    ids: list[UUID], at: datetime, index: int
) -> None:
    base = BUILDERS["TurnDone"]()
    assert isinstance(base, EventBase)
    header = base.header.model_copy(
        update={
            "event_id": ids[0],
            "session_id": ids[1],
            "loop_id": ids[2],
            "turn_id": ids[3],
            "created_at": at.replace(tzinfo=UTC),
        }
    )
    event = base.model_copy(update={"header": header, "turn_index": index})
    try:
        validate_event(event)
    except InvalidEventError:
        assert _declines(_write, event)
        return
    data = _write(event)
    assert data is not None
    assert data == _generic_write(event)
    assert_identical(_read(Topic.EVENTS, data), _generic_read(Topic.EVENTS, data))


@needs_native
def test_loop_state_history_messages_have_a_native_plan() -> None:
    from turnstream.wire._accel import state_writer

    schema = CODEC.schemas.writer_schema(Topic.LOOPS)
    writer = state_writer.StateWriter(schema.fingerprint, schema.parsed)
    assert writer._native_message is not None


@needs_native
def test_a_frame_past_the_limit_is_declined_and_refused_with_the_typed_error() -> None:
    from turnstream.wire import RecordTooLargeError

    event = BUILDERS["StepDone"]()
    assert isinstance(event, EventBase)
    size = len(encode(CODEC, event))
    plan = _path(Topic.EVENTS).writers[type(event)]
    assert native.write(plan, event, size) is not None
    assert native.write(plan, event, size - 1) is None
    small = Codec(CODEC.schemas, max_payload_bytes=size - 1)
    with pytest.raises(RecordTooLargeError):
        small.marshal_event(event)


@needs_native
def test_only_exceptions_are_declines() -> None:
    """A validator's KeyboardInterrupt is not swallowed as a decline."""
    step: Any = to_record.event_record(BUILDERS["StepDone"]())  # type: ignore[arg-type]
    data = _record_bytes(Topic.EVENTS, step)
    codec = Codec(CODEC.schemas)
    reader = codec._native_path(Topic.EVENTS).reader
    assert reader is not None

    def interrupt(self: object) -> object:
        raise KeyboardInterrupt

    original = StepDone.__pydantic_decorators__.model_validators["_group_shape"]
    plan = _swap_validators(reader, original.func, interrupt)
    with pytest.raises(KeyboardInterrupt):
        native.read(plan, data)


def _swap_validators(plan: Any, old: object, new: object) -> Any:
    """``plan`` with the validator ``old`` replaced by ``new`` everywhere."""
    if isinstance(plan, tuple):
        if plan and plan[0] == native.R_RECORD and old in plan[5]:
            validators = tuple(new if v is old else v for v in plan[5])
            plan = (*plan[:5], validators, *plan[6:])
        return tuple(_swap_validators(p, old, new) for p in plan)
    return plan


# Free-text fields of the events (not discriminators, enums or literals).
_TEXT_KEYS = frozenset(
    {
        "agent_name",
        "detail",
        "display_name",
        "id",
        "input",
        "input_json",
        "message",
        "model",
        "name",
        "provider_state",
        "result_preview",
        "signature",
        "subject",
        "summary",
        "text",
        "thinking",
        "tool_name",
        "tool_use_id",
    }
)
_texts = st.text(
    alphabet=st.characters(exclude_categories=("Cs",)), max_size=40
) | st.sampled_from(["", "\x00", "é" * 300, "\U0001f600" * 50, "a" * 5000])
_counts = st.integers(0, 2**63 - 1) | st.integers(0, 300)


def _varied(data: st.DataObject, value: Any) -> Any:
    """``value`` (a model dump) with its free text and counts drawn anew."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if isinstance(item, str) and key in _TEXT_KEYS:
                out[key] = data.draw(_texts)
            elif isinstance(item, int) and not isinstance(item, bool):
                out[key] = data.draw(_counts)
            else:
                out[key] = _varied(data, item)
        return out
    if isinstance(value, list | tuple):
        return [_varied(data, item) for item in value]
    return value


@needs_native
@pytest.mark.timeout(120)
@FUZZ
@given(name=st.sampled_from(EVENT_GOLDEN), data=st.data())
def test_varied_events_write_and_read_as_on_the_generic_path(
    name: str, data: st.DataObject
) -> None:
    """Every golden event with its text (any Unicode, long, empty) and counts
    redrawn: native bytes are the generic bytes, and they decode alike."""
    from pydantic import ValidationError

    base = BUILDERS[name]()
    assert isinstance(base, EventBase)
    try:
        event = type(base).model_validate(_varied(data, base.model_dump()))
    except ValidationError:
        return  # a drawn count broke a bound (e.g. turn_index >= 1)
    topic = _topic(event)
    try:
        expected = _generic_write(event)
    except EncodeError:
        assert _declines(_write, event)
        return
    # A valid event of plain values is never declined, either way.
    assert _write(event) == expected
    assert_identical(_read(topic, expected), _generic_read(topic, expected))
