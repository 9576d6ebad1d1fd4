"""Loop-state snapshots written with a loop's memo: the generic writer's bytes.

``Codec.marshal_state(state, history)`` must write exactly what
``Codec.marshal_state(state)`` writes, for every golden state and along a
conversation that grows, restarts from decoded objects, changes in the middle,
slides its window of command ids or fails to encode; and a warm memo encodes
only the messages added since its last write.
"""

from __future__ import annotations

from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.unit.wire.golden import (
    AI_WITH_TOOL,
    BUILDERS,
    FINAL_ANSWER,
    LOOP,
    SESSION,
    TOOL_RESULT,
    USER_MESSAGE,
    uid,
)

from turnstream.content import Conversation, TextBlock, UserMessage
from turnstream.state import LoopState
from turnstream.wire import Codec, EncodedHistory, EncodeError, SchemaSet, Topic
from turnstream.wire._accel import state_writer

POOL: tuple[Conversation, ...] = (USER_MESSAGE, AI_WITH_TOOL, TOOL_RESULT, FINAL_ANSWER)


def state(messages: tuple[Conversation, ...], ids: tuple[UUID, ...] = ()) -> LoopState:
    return LoopState(
        session_id=SESSION,
        loop_id=LOOP,
        turn_index=len(messages),
        messages=messages,
        recent_command_ids=ids,
        journal_offset=len(messages),
    )


@pytest.fixture
def codec(schema_set: SchemaSet) -> Codec:
    """The accelerated codec whatever ``TURNSTREAM_CODEC`` says (its memo is tested)."""
    return Codec(schema_set, paths="auto")


@pytest.fixture
def encodes(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The messages the memo encodes, in order."""
    seen: list[object] = []
    encode = state_writer.StateWriter._encode_message

    def counting(self: state_writer.StateWriter, message: Conversation) -> bytes:
        seen.append(message)
        return encode(self, message)

    monkeypatch.setattr(state_writer.StateWriter, "_encode_message", counting)
    return seen


@pytest.mark.parametrize("name", [n for n in BUILDERS if n.startswith("LoopState")])
def test_golden_states_are_written_byte_for_byte(codec: Codec, name: str) -> None:
    value = BUILDERS[name]()
    assert isinstance(value, LoopState)
    history = EncodedHistory()
    assert codec.marshal_state(value, history) == codec.marshal_state(value)
    # Warm: nothing new to encode, same bytes again.
    assert codec.marshal_state(value, history) == codec.marshal_state(value)


def test_a_growing_history_encodes_only_new_messages(
    codec: Codec, encodes: list[object]
) -> None:
    history = EncodedHistory()
    messages: tuple[Conversation, ...] = ()
    for turn in range(6):
        fresh = tuple(m.model_copy() for m in POOL)  # new objects, as each turn's
        messages = (*messages, *fresh)
        encodes.clear()
        written = codec.marshal_state(state(messages), history)
        assert encodes == list(fresh), f"turn {turn}"
        encodes.clear()
        assert written == codec.marshal_state(state(messages))
    assert history.size == len(messages)


def test_decoded_objects_are_encoded_again(codec: Codec, encodes: list[object]) -> None:
    history = EncodedHistory()
    before = state(POOL)
    data = codec.marshal_state(before, history)
    restored = codec.unmarshal_state(data)
    assert restored.messages == before.messages
    encodes.clear()
    assert codec.marshal_state(restored, history) == data
    assert len(encodes) == len(POOL)  # equal, but not the objects it encoded


def test_a_message_replaced_in_the_middle_is_encoded_from_there(
    codec: Codec, encodes: list[object]
) -> None:
    history = EncodedHistory()
    codec.marshal_state(state(POOL), history)
    other = UserMessage(blocks=(TextBlock(text="a different second message"),))
    changed = (POOL[0], other, *POOL[2:])
    encodes.clear()
    assert codec.marshal_state(state(changed), history) == codec.marshal_state(
        state(changed)
    )
    assert encodes[: len(POOL) - 1] == list(changed[1:])
    shorter = POOL[:2]
    assert codec.marshal_state(state(shorter), history) == codec.marshal_state(
        state(shorter)
    )


def test_a_sliding_window_of_command_ids(codec: Codec) -> None:
    history = EncodedHistory()
    for start in range(0, 40, 7):
        ids = tuple(uid(100 + i) for i in range(start, start + 12))
        value = state(POOL, ids)
        assert codec.marshal_state(value, history) == codec.marshal_state(value)


def test_a_failed_encode_leaves_the_memo_as_it_was(
    codec: Codec, encodes: list[object]
) -> None:
    history = EncodedHistory()
    good = state(POOL)
    codec.marshal_state(good, history)
    broken = UserMessage(blocks=(TextBlock(text="lone surrogate \ud800"),))
    with pytest.raises(EncodeError) as caught:
        codec.marshal_state(state((*POOL, broken)), history)
    assert caught.value.kind == codec_error_kind(codec, state((*POOL, broken)))
    assert history.size == len(POOL)
    encodes.clear()
    again = codec.marshal_state(good, history)
    assert encodes == []
    assert again == codec.marshal_state(good)


def codec_error_kind(codec: Codec, value: LoopState) -> str:
    """The kind the generic path reports for ``value`` (the memo's must match)."""
    with pytest.raises(EncodeError) as caught:
        codec.marshal_state(value)
    return caught.value.kind


def test_another_writer_schema_starts_the_memo_over(codec: Codec) -> None:
    history = EncodedHistory()
    schema = codec.schemas.writer_schema(Topic.LOOPS)
    writer = state_writer.StateWriter(schema.fingerprint, schema.parsed)
    out = bytearray()
    writer.write(out, state(POOL), history)
    assert history.size == len(POOL)
    items = history.messages(b"another schema!", POOL[:1], lambda _m: b"")
    assert list(items) == [b""]  # re-encoded with that schema's writer
    assert history.size == 1


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["append", "copy", "drop", "replace"]),
            st.integers(min_value=0, max_value=3),
        ),
        max_size=25,
    )
)
def test_any_sequence_of_snapshots_matches_the_generic_writer(
    codec: Codec, ops: list[tuple[str, int]]
) -> None:
    history = EncodedHistory()
    messages: tuple[Conversation, ...] = ()
    ids: tuple[UUID, ...] = ()
    for step, (op, n) in enumerate(ops):
        if op == "append":
            messages = (*messages, POOL[n])
        elif op == "copy":
            messages = (*messages, POOL[n].model_copy())
        elif op == "drop" and messages:
            messages = messages[: -1 - n % len(messages)]
        elif op == "replace" and messages:
            at = n % len(messages)
            messages = (*messages[:at], POOL[n].model_copy(), *messages[at + 1 :])
        ids = (*ids[-5:], uid(1000 + step))
        value = state(messages, ids)
        assert codec.marshal_state(value, history) == codec.marshal_state(value)
