"""A loop's state on the loops topic: a head plus history records of what changed."""

from __future__ import annotations

import random
from uuid import UUID, uuid4

from turnstream.content import AIMessage, Conversation, TextBlock, UserMessage
from turnstream.kafka.state_records import (
    assemble,
    erased_history_keys,
    history_key,
    parse_history_key,
    split,
)
from turnstream.runtime.input_queue import SEEN_WINDOW
from turnstream.state import LoopState

SESSION = uuid4()


def message(i: int) -> Conversation:
    if i % 2:
        return AIMessage(blocks=(TextBlock(text=f"answer {i}"),))
    return UserMessage(blocks=(TextBlock(text=f"question {i}"),))


def whole(state: LoopState) -> LoopState:
    """``state`` without its layout fields (what the fold knows)."""
    return state.model_copy(
        update={"history_length": -1, "history_records": 0, "history_start": 0}
    )


def test_split_writes_only_what_changed_since_the_last_write() -> None:
    loop_id = uuid4()
    first = LoopState(
        session_id=SESSION, loop_id=loop_id, messages=(message(0),), turn_index=1
    )
    ids = [uuid4()]
    one = split(first, ids)
    assert one.head.messages == ()
    assert one.head.recent_command_ids == ()
    assert (one.head.history_length, one.head.history_records) == (1, 1)
    assert one.history is not None
    assert one.history.messages == (message(0),)
    assert one.history.history_start == 0
    # The next write starts from what the kept state says is stored.
    grown = one.kept.model_copy(
        update={"messages": (message(0), message(1)), "turn_index": 1}
    )
    two = split(grown, [])
    assert two.history is not None
    assert two.history.messages == (message(1),)
    assert two.history.recent_command_ids == ()
    assert (two.history.history_start, two.head.history_records) == (1, 2)
    # Nothing new: a head alone.
    three = split(two.kept, [])
    assert three.history is None
    assert (three.head.history_length, three.head.history_records) == (2, 2)


def test_split_of_a_state_with_nothing_stored_starts_a_lineage() -> None:
    """A replayed or older whole state: record 0 holds the whole history."""
    recent = tuple(uuid4() for _ in range(3))
    state = LoopState(
        session_id=SESSION,
        loop_id=uuid4(),
        messages=tuple(message(i) for i in range(5)),
        recent_command_ids=recent,
        history_records=7,  # from an earlier lineage: not trusted
    )
    records = split(state, [recent[-1]])
    assert records.history is not None
    assert records.history.messages == state.messages
    assert records.history.recent_command_ids == recent
    assert records.head.history_records == 1
    assert assemble(records.head, {0: records.history}) == records.kept


def test_assemble_equals_the_folded_state_over_many_writes() -> None:
    """Write after write, head + records rebuild exactly the state kept."""
    rng = random.Random(7)
    loop_id = uuid4()
    kept = LoopState(session_id=SESSION, loop_id=loop_id)
    stored: dict[int, LoopState] = {}
    count = 0
    for write in range(300):
        new_messages = tuple(message(count + i) for i in range(rng.randint(0, 3)))
        count += len(new_messages)
        added = [uuid4() for _ in range(rng.randint(0, 3))]
        if added and rng.random() < 0.1:
            added.append(added[0])  # the fold dedupes repeats
        recent = tuple(dict.fromkeys((*kept.recent_command_ids, *added)))
        state = kept.model_copy(
            update={
                "messages": (*kept.messages, *new_messages),
                "recent_command_ids": recent[-SEEN_WINDOW:],
                "turn_index": write,
            }
        )
        records = split(state, added)
        if records.history is not None:
            stored[records.head.history_records - 1] = records.history
        kept = records.kept
        assert assemble(records.head, stored) == kept
        assert whole(kept) == whole(state)


def test_assemble_refuses_missing_or_misaligned_records() -> None:
    loop_id = uuid4()
    state = LoopState(
        session_id=SESSION, loop_id=loop_id, messages=(message(0), message(1))
    )
    one = split(state.model_copy(update={"messages": (message(0),)}), [])
    two = split(one.kept.model_copy(update={"messages": state.messages}), [])
    assert one.history is not None
    assert two.history is not None
    assert assemble(two.head, {0: one.history, 1: two.history}) == two.kept
    assert assemble(two.head, {1: two.history}) is None
    assert assemble(two.head, {0: one.history, 1: one.history}) is None
    other = one.history.model_copy(update={"loop_id": uuid4()})
    assert assemble(two.head, {0: other, 1: two.history}) is None
    short = two.head.model_copy(update={"history_length": 3})
    assert assemble(short, {0: one.history, 1: two.history}) is None


def test_assemble_returns_a_whole_record_as_it_is() -> None:
    """Records written before this layout hold the whole history themselves."""
    state = LoopState(session_id=SESSION, loop_id=uuid4(), messages=(message(0),))
    assert assemble(state, {}) == state


def test_history_keys_round_trip_and_are_not_loop_keys() -> None:
    loop_id = uuid4()
    assert parse_history_key(history_key(loop_id, 12)) == (loop_id, 12)
    assert parse_history_key(str(loop_id).encode()) is None
    assert parse_history_key(b"not/a-key") is None
    assert parse_history_key(f"{loop_id}/-1".encode()) is None
    assert parse_history_key(None) is None
    assert isinstance(parse_history_key(history_key(loop_id, 0))[0], UUID)  # type: ignore[index]


def test_records_name_where_the_history_records_landed() -> None:
    """Heads carry the first and last record's offsets; each record the one before."""
    loop_id = uuid4()
    state = LoopState(
        session_id=SESSION, loop_id=loop_id, messages=(message(0),), turn_index=1
    )
    one = split(state, []).placed(40)
    assert one.history is not None
    assert one.history.history_previous_offset == -1
    assert (one.head.history_first_offset, one.head.history_last_offset) == (40, 40)
    assert (one.kept.history_first_offset, one.kept.history_last_offset) == (40, 40)
    grown = one.kept.model_copy(update={"messages": (message(0), message(1))})
    two = split(grown, []).placed(57)
    assert two.history is not None
    assert two.history.history_previous_offset == 40
    assert (two.head.history_first_offset, two.head.history_last_offset) == (40, 57)
    # A head alone keeps pointing at the records already written.
    three = split(two.kept, [])
    assert three.history is None
    assert three.placed(99) is three
    assert (three.head.history_first_offset, three.head.history_last_offset) == (
        40,
        57,
    )


def test_a_new_lineage_forgets_the_old_records_offsets() -> None:
    loop_id = uuid4()
    state = LoopState(
        session_id=SESSION, loop_id=loop_id, messages=(message(0),), turn_index=1
    )
    kept = split(state, []).placed(40).kept
    restarted = kept.model_copy(
        update={"messages": (message(0), message(1)), "history_length": -1}
    )
    again = split(restarted, [])
    assert again.history is not None
    assert again.history.history_previous_offset == -1
    assert again.head.history_last_offset == -1  # until placed
    placed = again.placed(80)
    assert (placed.head.history_first_offset, placed.head.history_last_offset) == (
        80,
        80,
    )


def test_a_deleted_state_is_written_as_a_marker_head_alone() -> None:
    """After LoopDeleted: one small head, no history record, nothing said."""
    loop_id = uuid4()
    state = LoopState(
        session_id=SESSION,
        loop_id=loop_id,
        agent_name="a",
        model="m",
        turn_index=3,
        messages=tuple(message(i) for i in range(4)),
        recent_command_ids=(uuid4(),),
        history_length=4,
        history_records=2,
        deleted=True,
        stopped=True,
    )
    records = split(state, [uuid4()])
    assert records.history is None
    assert records.kept == records.head
    head = records.head
    assert (head.deleted, head.stopped, head.messages, head.recent_command_ids) == (
        True,
        True,
        (),
        (),
    )
    assert (head.history_length, head.history_records, head.history_start) == (0, 0, 0)
    assert (head.agent_name, head.model, head.turn_index) == ("a", "m", 3)
    # A marker restores alone: it names no history record.
    assert assemble(head, {}) == head


def test_erased_history_keys_name_every_record_up_to_the_count() -> None:
    loop_id = uuid4()
    assert erased_history_keys(loop_id, 0) == []
    keys = erased_history_keys(loop_id, 3)
    assert keys == [history_key(loop_id, n) for n in range(3)]
    assert [parse_history_key(k) for k in keys] == [(loop_id, n) for n in range(3)]
