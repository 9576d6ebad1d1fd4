"""Deleting a loop on the real broker: refused afterwards, its state compacted away.

One partition holds three loops: ``keep`` and ``gone`` run two turns each, ``busy``
hangs in its first turn. ``gone`` is deleted while idle and ``busy`` mid-turn; then
the service is replaced by another (a takeover that reads the state partition
afresh). The loops and history topics are created with aggressive compaction
(``segment.ms`` 100, dirty ratio 0.01, ``delete.retention.ms`` 100; the dev broker's
cleaner backs off 1 s), so "gone after compaction" is observed, not assumed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from uuid import UUID, uuid4

import pytest
from aiokafka import TopicPartition
from tests.support.eventually import assert_eventually
from tests.support.kafka import consume_all, create_topic
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    Models,
    apply_topic_set,
    clients_for,
    collect_garbage,
    collect_garbage_late,
    connect,
    delete_topic_set,
    running,
    service_for,
    unique_prefix,
)
from typer.testing import CliRunner

from turnstream.cli.main import app
from turnstream.events import (
    LoopDeleted,
    RejectReason,
    TurnInterrupted,
    TurnRejected,
    TurnStarted,
)
from turnstream.ids import LoopId
from turnstream.kafka.client.session import KafkaSession
from turnstream.kafka.client.turns import TurnStatus
from turnstream.kafka.reader import read_journal, read_latest_states
from turnstream.kafka.records import parse_loop_key
from turnstream.kafka.state_records import parse_history_key
from turnstream.kafka.topology import TopicNames
from turnstream.runtime.fold import fold_loop
from turnstream.state import LoopState
from turnstream.testing import ScriptedModel
from turnstream.wire import default_codec

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

WAIT = 30.0
_COMPACT_FAST = {
    "cleanup.policy": "compact",
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "100",
    "min.compaction.lag.ms": "0",
    "max.message.bytes": "8454144",
}


@pytest.fixture
async def topics(kafka_bootstrap: str) -> AsyncIterator[TopicNames]:
    """The topic set on one partition; the state topics compact within seconds."""
    prefix = unique_prefix("delete")
    names = TopicNames.with_affixes(prefix=prefix)
    try:
        for name in (names.commands, names.events, names.deltas, names.dead_letters):
            await create_topic(
                kafka_bootstrap, name, config={"cleanup.policy": "delete"}
            )
        for name in (names.loops, names.history):
            await create_topic(kafka_bootstrap, name, config=_COMPACT_FAST)
        yield names
    finally:
        await delete_topic_set(kafka_bootstrap, prefix)


async def state_records(
    bootstrap: str, topic: str
) -> list[tuple[bytes, LoopState | None]]:
    """Every committed record of the one partition of ``topic``, decoded."""
    codec = default_codec()
    return [
        (r.key, None if r.value is None else codec.unmarshal_state(r.value))
        for r in await consume_all(bootstrap, topic, isolation_level="read_committed")
    ]


def history_of(
    records: list[tuple[bytes, LoopState | None]], loop_id: UUID
) -> list[tuple[int, LoopState | None]]:
    """The history records of ``loop_id``: (number, value or None), in order."""
    found = []
    for key, value in records:
        numbered = parse_history_key(key)
        if numbered is not None and numbered[0] == loop_id:
            found.append((numbered[1], value))
    return found


def heads_of(
    records: list[tuple[bytes, LoopState | None]], loop_id: UUID
) -> list[LoopState | None]:
    return [value for key, value in records if parse_loop_key(key) == loop_id]


async def rejected(session: KafkaSession, loop_id: LoopId) -> TurnRejected:
    """Submit to ``loop_id``; its answer must be a rejection."""
    outcome = await session.submit_and_wait(
        "still there?", loop_id=loop_id, timeout=WAIT
    )
    assert outcome.status is TurnStatus.REJECTED, outcome.status
    assert isinstance(outcome.answer, TurnRejected)
    return outcome.answer


async def test_deleted_loop_is_refused_by_every_owner_and_its_state_compacted(
    kafka_bootstrap: str, topics: TopicNames
) -> None:
    """DeleteLoop stops a loop (mid-turn: TurnInterrupted, then LoopDeleted), its
    later submits and deletes are refused ``loop_deleted`` -- also after another
    service took the partition over -- a loop never seen answers ``unknown_loop``,
    compaction leaves nothing of its history and only the deleted marker as its
    head, and the other loop of the partition keeps working with its history.
    """
    keep, gone, busy = (LoopId(uuid4()) for _ in range(3))
    models = Models(by_loop={busy: ScriptedModel([], hang=True)})
    group = f"{topics.commands}.actors"
    first = service_for(kafka_bootstrap, topics, group_id=group, models=models)
    async with running(first):
        session = await connect(kafka_bootstrap, topics)
        async with session:
            for loop_id in (keep, gone, keep, gone):
                outcome = await session.submit_and_wait(
                    "What is 12 + 30?", loop_id=loop_id, timeout=WAIT
                )
                assert outcome.status is TurnStatus.DONE, outcome.status
            await session.submit_to_loop(busy, "hang here")

            history = await state_records(kafka_bootstrap, topics.history)
            stored = {n for n, v in history_of(history, gone) if v is not None}
            assert stored

            async with asyncio.timeout(WAIT):
                deleted = await session.delete_loop(gone)
            assert isinstance(deleted, LoopDeleted)
            # In LoopDeleted's transaction: every history record tombstoned,
            # the head replaced by the deleted marker. (Read before anything
            # else is appended: the records are in the active segments, which
            # the cleaner never touches.)
            history = await state_records(kafka_bootstrap, topics.history)
            latest = dict(history_of(history, gone))
            assert set(latest) == stored
            assert all(value is None for value in latest.values()), latest
            heads = await state_records(kafka_bootstrap, topics.loops)
            marker = heads_of(heads, gone)[-1]
            assert marker is not None
            assert (marker.deleted, marker.messages) == (True, ())
            assert (marker.history_length, marker.history_records) == (0, 0)

            async def busy_turn_runs() -> None:
                assert any(
                    isinstance(e, TurnStarted) for e in await session.replay(busy)
                )

            await assert_eventually(busy_turn_runs, timeout=WAIT)
            async with asyncio.timeout(WAIT):
                assert isinstance(await session.delete_loop(busy), LoopDeleted)
            tail = [e.type_name for e in await session.replay(busy)][-2:]
            assert tail == ["TurnInterrupted", "LoopDeleted"]
            assert (
                sum(isinstance(e, TurnInterrupted) for e in await session.replay(busy))
                == 1
            )

            assert (await rejected(session, gone)).reason is RejectReason.LOOP_DELETED
            async with asyncio.timeout(WAIT):
                again = await session.delete_loop(gone)
                unknown = await session.delete_loop(LoopId(uuid4()))
            assert isinstance(again, TurnRejected)
            assert again.reason is RejectReason.LOOP_DELETED
            assert isinstance(unknown, TurnRejected)
            assert unknown.reason is RejectReason.UNKNOWN_LOOP

    # Another service takes the partition over: it reads the marker.
    second = service_for(kafka_bootstrap, topics, group_id=group, models=Models())
    async with running(second):
        session = await connect(kafka_bootstrap, topics)
        async with session:
            for loop_id in (gone, busy):
                refusal = await rejected(session, loop_id)
                assert refusal.reason is RejectReason.LOOP_DELETED

            async def compacted() -> None:
                # Each turn of the kept loop appends to both state topics, which
                # rolls their segments (segment.ms 100) for the cleaner.
                outcome = await session.submit_and_wait(
                    "What is 1 + 1?", loop_id=keep, timeout=WAIT
                )
                assert outcome.status is TurnStatus.DONE
                history = await state_records(kafka_bootstrap, topics.history)
                for loop_id in (gone, busy):
                    left = [n for n, v in history_of(history, loop_id) if v is not None]
                    assert left == [], f"history records of {loop_id} left: {left}"
                heads = await state_records(kafka_bootstrap, topics.loops)
                for loop_id in (gone, busy):
                    kept = heads_of(heads, loop_id)
                    assert len(kept) == 1, f"{len(kept)} heads of {loop_id} left"
                    assert kept[0] is not None
                    assert kept[0].deleted

            await assert_eventually(
                compacted, timeout=90, interval=1.0, message="state not compacted"
            )

    read = await read_latest_states(
        clients_for(kafka_bootstrap),
        default_codec(),
        TopicPartition(topics.loops, 0),
        TopicPartition(topics.history, 0),
    )
    kept = read.states[keep]
    assert not kept.deleted
    assert kept.turn_index >= 3
    # The kept loop's state is its journal's fold: no message lost to the
    # deletions or the compaction.
    journal = await read_journal(
        clients_for(kafka_bootstrap),
        default_codec(),
        TopicPartition(topics.events, 0),
        loops=(keep,),
    )
    assert kept.messages == fold_loop([e.event for e in journal]).messages
    assert len(kept.messages) >= 2 * kept.turn_index
    assert read.states[gone].messages == ()


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """In-process CLI runs configure the root logger: put it back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


async def _cli(bootstrap: str, prefix: str, *args: str) -> tuple[int, str]:
    result = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        [*args, "--bootstrap", bootstrap, "--topic-prefix", prefix],
        env={"COLUMNS": "400"},
    )
    return result.exit_code, " ".join(result.output.split())


async def test_loops_delete_command(kafka_bootstrap: str) -> None:
    """``turnstream loops delete``: exit 0 when deleted (and when deleted
    already), 1 for a loop of which nothing is stored and when no actor
    answers in time; ``loops list`` shows the loop as deleted.
    """
    prefix = unique_prefix("delete-cli")
    names = await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    loop_id = LoopId(uuid4())
    try:
        service = service_for(
            kafka_bootstrap, names, group_id=f"{prefix}g", models=Models()
        )
        async with running(service):
            session = await connect(kafka_bootstrap, names)
            async with session:
                outcome = await session.submit_and_wait(
                    "hello", loop_id=loop_id, timeout=WAIT
                )
                assert outcome.status is TurnStatus.DONE
            code, out = await _cli(
                kafka_bootstrap, prefix, "loops", "delete", str(loop_id)
            )
            assert (code, out) == (0, f"deleted loop {loop_id}")
            code, out = await _cli(
                kafka_bootstrap, prefix, "loops", "delete", str(loop_id)
            )
            assert (code, out) == (0, f"loop {loop_id} was deleted already")
            missing = uuid4()
            code, out = await _cli(
                kafka_bootstrap, prefix, "loops", "delete", str(missing)
            )
            assert code == 1, out
            assert f"loop {missing}: not deleted (unknown_loop:" in out
            code, out = await _cli(kafka_bootstrap, prefix, "loops", "list")
            assert code == 0, out
            assert f"{loop_id} agent=it turns=1 deleted" in out
        code, out = await _cli(
            kafka_bootstrap, prefix, "loops", "delete", str(loop_id), "--wait", "2"
        )
        assert code == 1, out
        assert "no answer within 2 s" in out
    finally:
        await delete_topic_set(kafka_bootstrap, prefix)
