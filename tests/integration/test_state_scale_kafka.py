"""State that grows with what changed, on the real broker.

* each state write adds a small head and a history record of what changed,
  never the whole conversation, and the latest head with its history records
  rebuilds exactly the fold of the loop's journal, also after a new owner took
  the partition over;
* beyond the resident budget, idle loops are passivated and their next command
  restores them with their whole history.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from uuid import UUID, uuid4

import pytest
from aiokafka import TopicPartition
from tests.support.eventually import assert_eventually
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    Models,
    apply_topic_set,
    clients_for,
    collect_garbage,
    collect_until,
    committed_state_records,
    committed_state_records_at,
    connect,
    count_type,
    delete_topic_set,
    layout_free,
    loop_filter,
    running,
    service_for,
    unique_prefix,
)

from turnstream.content import AIMessage, UserMessage
from turnstream.ids import LoopId
from turnstream.kafka import reader as reader_module
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.reader import HistoryReader, read_latest_states
from turnstream.kafka.records import loop_key
from turnstream.kafka.state_records import history_key
from turnstream.kafka.topology import TopicNames
from turnstream.runtime.fold import fold_loop
from turnstream.testing import ScriptedModel, text_step
from turnstream.wire import default_codec

pytestmark = pytest.mark.kafka


@pytest.fixture
async def topics(kafka_bootstrap: str) -> AsyncIterator[tuple[str, TopicNames]]:
    prefix = unique_prefix("statescale")
    names = await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    try:
        yield prefix, names
    finally:
        await delete_topic_set(kafka_bootstrap, prefix)


async def test_state_writes_carry_what_changed_and_restore_equals_the_journal(
    kafka_bootstrap: str, topics: tuple[str, TopicNames]
) -> None:
    """Three turns: six one-message history records, small heads; a new owner
    rebuilds the journal's fold from them and carries on with the whole history."""
    prefix, names = topics
    group = f"{prefix}actors"
    loop_id = LoopId(uuid4())
    models = Models()
    models.by_loop[loop_id] = ScriptedModel(
        [text_step(f"answer {i}") for i in range(3)]
    )
    session = await connect(kafka_bootstrap, names)
    try:
        subscription = session.subscribe_events(loop_filter(loop_id))
        async with running(
            service_for(kafka_bootstrap, names, group_id=group, models=models)
        ):
            for i in range(3):
                await session.submit(f"question {i}", loop_id=loop_id)
                await collect_until(subscription, count_type("LoopIdle"))

        records = await committed_state_records(kafka_bootstrap, names.loops)
        assert {k for k, _ in records} == {loop_key(loop_id)}
        heads = [s for _, s in records]
        history = dict(await committed_state_records(kafka_bootstrap, names.history))
        assert sorted(history) == sorted(history_key(loop_id, n) for n in range(6))
        # Each history record holds the one message its write added ...
        assert [
            len(s.messages)
            for _, s in sorted(
                ((s.history_start, s) for s in history.values()), key=lambda x: x[0]
            )
        ] == [1] * 6
        # ... and no head holds any history at all.
        assert all(h.messages == () and h.recent_command_ids == () for h in heads)
        assert heads[-1].history_length == 6
        assert heads[-1].history_records == 6
        # Heads and records say where the records are: a reader fetches them
        # by position, never by a scan of the history partition.
        placed = {
            s.history_records - 1: offset
            for offset, _, s in await committed_state_records_at(
                kafka_bootstrap, names.history
            )
        }
        assert (heads[-1].history_first_offset, heads[-1].history_last_offset) == (
            placed[0],
            placed[5],
        )
        by_number = {s.history_records - 1: s for s in history.values()}
        assert [by_number[n].history_previous_offset for n in range(6)] == [
            -1,
            *(placed[n] for n in range(5)),
        ]
        for walk in (False, True):  # one pass over the span; one fetch per record
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(reader_module, "_DENSE_SPAN", -1 if walk else 4096)
                patch.setattr(reader_module, "_SPARSE_FACTOR", 0 if walk else 4)
                reader = HistoryReader(
                    clients_for(kafka_bootstrap),
                    default_codec(),
                    TopicPartition(names.history, 0),
                )
                try:
                    fetched = await reader.fetch(heads[-1])
                    again = await reader.fetch(heads[-1])  # the consumer reused
                finally:
                    await reader.close()
            assert sorted(fetched) == list(range(6))
            assert again == fetched

        read = await read_latest_states(
            clients_for(kafka_bootstrap),
            default_codec(),
            TopicPartition(names.loops, 0),
            TopicPartition(names.history, 0),
        )
        journal = await session.replay(loop_id)
        restored = read.states[loop_id]
        assert layout_free(restored) == layout_free(fold_loop(journal))
        assert [type(m) for m in restored.messages] == [UserMessage, AIMessage] * 3

        after = Models()
        model = ScriptedModel([text_step("answer 3")])
        after.by_loop[loop_id] = model
        metrics = ServiceMetrics()
        owner = service_for(
            kafka_bootstrap, names, group_id=group, models=after, metrics=metrics
        )
        async with running(owner):
            await session.submit("question 3", loop_id=loop_id)
            await collect_until(subscription, count_type("LoopIdle", 1))
        assert metrics.restores["snapshot"] == 1
        assert [type(m) for m in model.requests[0].messages] == [
            UserMessage,
            AIMessage,
        ] * 3 + [UserMessage]
        # The new owner went on with the same history records (no rewrite).
        records = await committed_state_records(kafka_bootstrap, names.history)
        keys = [k for k, _ in records]
        assert sorted(set(keys)) == sorted(history_key(loop_id, n) for n in range(8))
        assert len(keys) == 8
    finally:
        await session.close()


async def test_idle_loops_beyond_the_budget_are_passivated_and_come_back_whole(
    kafka_bootstrap: str, topics: tuple[str, TopicNames]
) -> None:
    """Budget 2, five loops: the idle ones are let go of; each second turn still
    starts at turn 2 and its model sees the first turn's history."""
    prefix, names = topics
    loops = [LoopId(uuid4()) for _ in range(5)]
    models = Models()
    scripted: dict[UUID, ScriptedModel] = {}
    for loop_id in loops:
        scripted[loop_id] = ScriptedModel([text_step("one"), text_step("two")])
        models.by_loop[loop_id] = scripted[loop_id]
    metrics = ServiceMetrics()
    service = service_for(
        kafka_bootstrap,
        names,
        group_id=f"{prefix}actors",
        models=models,
        metrics=metrics,
        max_resident_loops=2,
    )
    session = await connect(kafka_bootstrap, names)
    try:
        async with running(service):
            for round_ in (1, 2):
                for loop_id in loops:
                    subscription = session.subscribe_events(loop_filter(loop_id))
                    await session.submit(f"round {round_}", loop_id=loop_id)
                    await collect_until(subscription, count_type("LoopIdle"))
                    subscription.close()
                # Idle beyond the budget: let go of within a sweep or two. Both
                # figures in one wait: an actor's task counts itself out of
                # live_loops as it ends, and its passivation is counted when
                # the sweep that awaited that end runs next.
                settled = 3 * round_
                await assert_eventually(
                    lambda: metrics.live_loops <= 2 and metrics.passivated >= settled,  # noqa: B023 - awaited in this iteration
                    timeout=10.0,
                )
        for loop_id in loops:
            journal = [e.type_name for e in await session.replay(loop_id)]
            assert journal == [
                "LoopStarted",
                "TurnStarted",
                "StepDone",
                "TurnDone",
                "LoopIdle",
                "TurnStarted",
                "StepDone",
                "TurnDone",
                "LoopIdle",
            ]
            second = scripted[loop_id].requests[1].messages
            assert [type(m) for m in second] == [UserMessage, AIMessage, UserMessage]
        assert metrics.restores["snapshot"] >= 3
    finally:
        await session.close()
