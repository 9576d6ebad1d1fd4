"""The takeover's index of state records: latest wins, decoded only when needed."""

from __future__ import annotations

from uuid import UUID, uuid4

from turnstream.content import TextBlock, UserMessage
from turnstream.kafka.reader import StateIndex, restore_hint
from turnstream.kafka.records import RESTORE_SNAPSHOT, RESTORE_TAIL
from turnstream.kafka.state_records import split
from turnstream.state import LoopState, OpenTurn
from turnstream.wire import Codec, default_codec

SESSION = uuid4()


class CountingCodec(Codec):
    """The real codec, counting the state records it decodes."""

    def __init__(self) -> None:
        super().__init__(default_codec().schemas)
        self.decoded = 0

    def unmarshal_state(self, data: bytes) -> LoopState:
        self.decoded += 1
        return super().unmarshal_state(data)


def state(loop_id: UUID, *, turns: int = 1, open_turn: bool = False) -> LoopState:
    return LoopState(
        session_id=SESSION,
        loop_id=loop_id,
        turn_index=turns,
        journal_offset=10 * turns,
        open_turn=OpenTurn(turn_id=uuid4(), turn_index=turns) if open_turn else None,
    )


def test_state_index_decodes_no_idle_loop_at_a_takeover() -> None:
    """Records with the hint are classified from their header alone."""
    codec = CountingCodec()
    index = StateIndex(codec)
    idle, running = uuid4(), uuid4()
    for turns in range(1, 4):
        for loop_id, is_open in ((idle, False), (running, turns == 3)):
            value = state(loop_id, turns=turns, open_turn=is_open)
            index.put(loop_id, codec.marshal_state(value), restore_hint(value))
    assert codec.decoded == 0
    assert index.tail_loops() == [running]
    assert index.known(idle)
    assert index.known(running)
    assert not index.known(uuid4())
    assert len(index) == 2


async def test_state_index_keeps_the_latest_record_of_each_loop() -> None:
    """A later record replaces an earlier one, also its hint."""
    codec = default_codec()
    index = StateIndex(codec)
    loop_id = uuid4()
    first = state(loop_id, turns=1, open_turn=True)
    index.put(loop_id, codec.marshal_state(first), RESTORE_TAIL)
    assert index.tail_loops() == [loop_id]
    latest = state(loop_id, turns=2)
    index.put(loop_id, codec.marshal_state(latest), RESTORE_SNAPSHOT)
    assert index.tail_loops() == []
    assert await index.load(loop_id) == latest


async def test_state_index_tombstone_forgets_the_loop() -> None:
    codec = default_codec()
    index = StateIndex(codec)
    loop_id = uuid4()
    index.put(loop_id, codec.marshal_state(state(loop_id, open_turn=True)), None)
    index.put(loop_id, None, None)
    assert not index.known(loop_id)
    assert index.tail_loops() == []
    assert await index.load(loop_id) is None


def test_state_index_decodes_records_written_without_the_hint() -> None:
    """Older writers set no header: such a record is decoded to classify it."""
    codec = CountingCodec()
    index = StateIndex(codec)
    idle, running = uuid4(), uuid4()
    index.put(idle, codec.marshal_state(state(idle)), None)
    index.put(running, codec.marshal_state(state(running, open_turn=True)), None)
    marker = state(uuid4()).model_copy(update={"journal_offset": -1})
    index.put(marker.loop_id, codec.marshal_state(marker), None)
    assert codec.decoded == 3
    assert index.tail_loops() == sorted([running, marker.loop_id])


async def test_state_index_unreadable_records_make_the_loop_a_replay() -> None:
    """Undecodable bytes, or a record naming another loop: known, replayed."""
    codec = default_codec()
    index = StateIndex(codec)
    garbage, foreign = uuid4(), uuid4()
    index.put(garbage, b"\x00not avro", None)
    assert index.tail_loops() == [garbage]
    assert index.known(garbage)
    assert await index.load(garbage) is None
    # A hinted record is only found unreadable when it is decoded.
    index.put(foreign, codec.marshal_state(state(uuid4())), RESTORE_SNAPSHOT)
    assert index.tail_loops() == [garbage]
    assert await index.load(foreign) is None
    assert index.known(foreign)
    assert index.unreadable == {garbage, foreign}
    assert index.tail_loops() == sorted([garbage, foreign])


def test_state_index_forget_hands_the_loop_to_its_owner() -> None:
    codec = default_codec()
    index = StateIndex(codec)
    loop_id = uuid4()
    index.put(loop_id, codec.marshal_state(state(loop_id, open_turn=True)), None)
    index.forget(loop_id)
    assert not index.known(loop_id)
    assert index.tail_loops() == []
    assert index.loops() == []


def test_restore_hint_names_open_turns_and_replay_markers() -> None:
    loop_id = uuid4()
    assert restore_hint(state(loop_id)) == RESTORE_SNAPSHOT
    assert restore_hint(state(loop_id, open_turn=True)) == RESTORE_TAIL
    marker = state(loop_id).model_copy(update={"journal_offset": -1})
    assert restore_hint(marker) == RESTORE_TAIL


async def test_state_index_assembles_a_head_with_its_history_records() -> None:
    """Heads of the incremental layout are decoded with their history records."""
    codec = CountingCodec()
    index = StateIndex(codec)
    loop_id = uuid4()
    kept = state(loop_id)
    for turn in range(3):
        message = UserMessage(blocks=(TextBlock(text=f"q{turn}"),))
        answered = uuid4()
        grown = kept.model_copy(
            update={
                "messages": (*kept.messages, message),
                "recent_command_ids": (*kept.recent_command_ids, answered),
            }
        )
        records = split(grown, [answered])
        assert records.history is not None
        number = records.head.history_records - 1
        index.put_history(loop_id, number, codec.marshal_state(records.history))
        index.put(loop_id, codec.marshal_state(records.head), RESTORE_SNAPSHOT)
        kept = records.kept
    assert codec.decoded == 0
    assert await index.load(loop_id) == kept
    index.forget(loop_id)
    assert await index.load(loop_id) is None


async def test_state_index_head_without_its_history_is_a_replay() -> None:
    codec = default_codec()
    index = StateIndex(codec)
    loop_id = uuid4()
    grown = state(loop_id).model_copy(
        update={"messages": (UserMessage(blocks=(TextBlock(text="q"),)),)}
    )
    records = split(grown, [])
    index.put(loop_id, codec.marshal_state(records.head), RESTORE_SNAPSHOT)
    assert await index.load(loop_id) is None
    assert index.unreadable == {loop_id}
    assert index.tail_loops() == [loop_id]


async def test_state_index_tombstone_drops_the_history_too() -> None:
    codec = default_codec()
    index = StateIndex(codec)
    loop_id = uuid4()
    grown = state(loop_id).model_copy(
        update={"messages": (UserMessage(blocks=(TextBlock(text="q"),)),)}
    )
    records = split(grown, [])
    assert records.history is not None
    index.put_history(loop_id, 0, codec.marshal_state(records.history))
    index.put(loop_id, None, None)
    index.put(loop_id, codec.marshal_state(records.head), RESTORE_SNAPSHOT)
    assert await index.load(loop_id) is None  # the old history is gone with the loop


async def test_state_index_fetches_a_positioned_heads_history_when_loaded() -> None:
    """A head naming its records' offsets: the index keeps the head only and
    fetches the records by position on the loop's first load."""
    codec = default_codec()
    loop_id = uuid4()
    whole_state = LoopState(
        session_id=SESSION,
        loop_id=loop_id,
        turn_index=1,
        messages=(UserMessage(blocks=(TextBlock(text="hi"),)),),
    )
    records = split(whole_state, []).placed(7)
    assert records.history is not None
    asked: list[tuple[int, int]] = []

    async def fetch(head: LoopState) -> dict[int, bytes]:
        asked.append((head.history_first_offset, head.history_last_offset))
        assert records.history is not None
        return {0: codec.marshal_state(records.history)}

    index = StateIndex(codec, fetch=fetch)
    index.put(
        loop_id, codec.marshal_state(records.head), RESTORE_SNAPSHOT, positioned=True
    )
    assert index.unpositioned == frozenset()
    assert asked == []
    assert await index.load(loop_id) == records.kept
    assert asked == [(7, 7)]


async def test_state_index_parks_a_stored_loop_as_its_head_alone() -> None:
    codec = default_codec()
    loop_id = uuid4()
    whole_state = LoopState(
        session_id=SESSION,
        loop_id=loop_id,
        turn_index=1,
        messages=(UserMessage(blocks=(TextBlock(text="x" * 5000),)),),
    )
    records = split(whole_state, []).placed(3)
    assert records.history is not None
    history = codec.marshal_state(records.history)

    async def fetch(head: LoopState) -> dict[int, bytes]:
        return {0: history}

    index = StateIndex(codec, fetch=fetch)
    index.park(records.kept)
    assert await index.load(loop_id) == records.kept
    # What stayed in memory was the head, not the history it names.
    index.park(records.kept)
    assert len(index._records[loop_id]) < 1000


async def test_state_index_missing_fetched_records_make_the_loop_a_replay() -> None:
    codec = default_codec()
    loop_id = uuid4()
    whole_state = LoopState(
        session_id=SESSION,
        loop_id=loop_id,
        turn_index=1,
        messages=(UserMessage(blocks=(TextBlock(text="hi"),)),),
    )
    records = split(whole_state, []).placed(7)

    async def fetch(head: LoopState) -> dict[int, bytes]:
        return {}  # compacted away, or a new lineage overwrote them

    index = StateIndex(codec, fetch=fetch)
    index.put(
        loop_id, codec.marshal_state(records.head), RESTORE_SNAPSHOT, positioned=True
    )
    assert await index.load(loop_id) is None
    assert index.unreadable == frozenset({loop_id})


def test_state_index_keeps_the_latest_heads_trace_origin_once() -> None:
    """The carried ``traceparent`` on an open turn's head is handed out once;
    a later head without one (or a tombstone) drops an earlier one."""
    codec = default_codec()
    index = StateIndex(codec)
    kept, dropped, deleted = uuid4(), uuid4(), uuid4()
    for loop_id in (kept, dropped, deleted):
        value = state(loop_id, open_turn=True)
        index.put(
            loop_id,
            codec.marshal_state(value),
            restore_hint(value),
            trace_origin=b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )
    later = state(dropped, turns=2, open_turn=True)
    index.put(dropped, codec.marshal_state(later), restore_hint(later))
    index.put(deleted, None, None)

    assert index.take_trace_origin(kept) is not None
    assert index.take_trace_origin(kept) is None
    assert index.take_trace_origin(dropped) is None
    assert index.take_trace_origin(deleted) is None
