"""Every command applied once, in log order, whatever arrives on the commands topic.

Against the real broker:

- a ``SubmitInput`` followed by an ``Interrupt`` for the same idle loop ends that
  submit's turn ``TurnInterrupted`` -- with both records waiting before any actor
  runs, and with both produced back to back while one runs;
- a poison record as large as the commands topic allows is dead-lettered and
  never holds the committed offset, before and after a restart;
- after the group's offsets are reset to the beginning, no command runs again
  (no second answer, no second tool run), however far back redelivery starts;
- a valid command on the wrong partition, or keyed by another spelling of its loop
  id, is a dead letter (``misrouted`` / ``bad_key``), never a second writer;
- a dead letter too large for the dead-letter topic is written bounded;
- every dead letter is logged once with its partition, offset and reason (no
  content), and the public client always sends on the loop's own partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid4

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError
from tests.support.eventually import assert_eventually
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    Models,
    apply_topic_set,
    check_journal,
    clients_for,
    collect_garbage,
    collect_garbage_late,
    connect,
    delete_topic_set,
    read_all,
    running,
    service_for,
    unique_prefix,
)

from turnstream.commands import Interrupt, SubmitInput
from turnstream.content import TextBlock, TextChunk, UserMessage
from turnstream.events import (
    Agency,
    LoopStarted,
    RejectReason,
    TurnRejected,
    TurnStarted,
)
from turnstream.ids import LoopId, TurnId
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.reader import JournalEntry, read_journal
from turnstream.kafka.records import (
    DLQ_KIND,
    DLQ_OFFSET,
    DLQ_SIZE,
    DLQ_TRUNCATED,
    PREFIX_BYTES,
    loop_key,
    partition_for,
)
from turnstream.kafka.topology import TopicNames
from turnstream.models import DemoModel
from turnstream.runtime.config import LoopConfig
from turnstream.runtime.session import LoopSetup
from turnstream.testing import (
    FunctionTool,
    Hang,
    Pause,
    ScriptedModel,
    call,
    text_step,
    tool_step,
)
from turnstream.wire import default_codec

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(420)]

_CODEC = default_codec()


@pytest.fixture
async def lane(
    kafka_bootstrap: str, request: pytest.FixtureRequest
) -> AsyncIterator[str]:
    """A unique topic prefix, deleted afterwards."""
    prefix = unique_prefix(request.node.name)
    yield prefix
    await delete_topic_set(kafka_bootstrap, prefix)


def _submit(
    loop_id: UUID, text: str = "go", command_id: UUID | None = None
) -> SubmitInput:
    return SubmitInput(
        command_id=command_id or uuid4(),
        session_id=uuid4(),
        loop_id=loop_id,
        created_at=datetime.now(UTC),
        message=UserMessage(blocks=(TextBlock(text=text),)),
    )


def _interrupt(loop_id: UUID) -> Interrupt:
    return Interrupt(
        command_id=uuid4(),
        session_id=uuid4(),
        loop_id=loop_id,
        created_at=datetime.now(UTC),
        agency=Agency.USER,
    )


async def _raw_producer(bootstrap: str) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        max_request_size=4 * 1024 * 1024,
        linger_ms=20,
    )
    async with asyncio.timeout(30):
        await producer.start()
    return producer


async def _send_all(
    producer: AIOKafkaProducer, topic: str, commands: Sequence[SubmitInput | Interrupt]
) -> None:
    """Produce ``commands`` in order without waiting in between (one batch)."""
    futures = [
        await producer.send(
            topic,
            _CODEC.marshal_command(c),
            key=loop_key(c.loop_id),
            headers=_CODEC.kafka_headers(c),
        )
        for c in commands
    ]
    async with asyncio.timeout(60):
        await asyncio.gather(*futures)


def _terminal_of(entries: Sequence[JournalEntry], command_id: UUID) -> str | None:
    """The terminal type of the turn ``command_id`` started, if it ended."""
    turn = next(
        (
            e.event.header.turn_id
            for e in entries
            if e.event.type_name == "TurnStarted" and e.event.reply_to() == command_id
        ),
        None,
    )
    if turn is None:
        return None
    return next(
        (
            e.event.type_name
            for e in entries
            if e.event.ends_turn() and e.event.header.turn_id == turn
        ),
        None,
    )


async def _committed(bootstrap: str, group: str, tp: TopicPartition) -> int | None:
    checker = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    async with asyncio.timeout(30):
        await checker.start()
        try:
            return await checker.committed(tp)  # type: ignore[no-any-return]
        finally:
            await checker.stop()


async def _end_offset(bootstrap: str, tp: TopicPartition) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    async with asyncio.timeout(30):
        await consumer.start()
        try:
            ends = await consumer.end_offsets([tp])
        finally:
            await consumer.stop()
    return int(ends[tp])


async def _dead_letters(bootstrap: str, topic: str, expected: int) -> list[object]:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        fetch_max_bytes=8 * 1024 * 1024,
        max_partition_fetch_bytes=8 * 1024 * 1024,
    )
    records: list[object] = []
    async with asyncio.timeout(60):
        await consumer.start()
        try:
            while len(records) < expected:
                batch = await consumer.getmany(timeout_ms=500)
                for part in batch.values():
                    records.extend(part)
        finally:
            await consumer.stop()
    return records


def _slow_models() -> Models:
    """Turns that stream a chunk, then wait until interrupted.

    The turn is held, not raced: only the interrupt can end it, however late
    a busy machine delivers it.
    """
    held = ScriptedModel(then=[TextChunk(text="so far "), Hang()])
    return Models(default=held, tools=())


# --------------------------------------------------------------------------
# 1. Interrupts never overtake the submit before them
# --------------------------------------------------------------------------


async def test_submit_then_interrupt_waiting_before_the_actor_starts(
    kafka_bootstrap: str, lane: str
) -> None:
    """20 loops, each a SubmitInput then an Interrupt, both unread when the actor
    starts: every one of the 20 turns ends TurnInterrupted (log order).
    """
    names = await apply_topic_set(kafka_bootstrap, lane, partitions=3)
    loops = [uuid4() for _ in range(20)]
    submits = [_submit(loop) for loop in loops]
    producer = await _raw_producer(kafka_bootstrap)
    try:
        await _send_all(
            producer,
            names.commands,
            [c for s in submits for c in (s, _interrupt(s.loop_id))],
        )
    finally:
        await producer.stop()
    ids = [s.command_id for s in submits]
    async with running(
        service_for(kafka_bootstrap, names, group_id=f"{lane}g", models=_slow_models())
    ):

        async def ended() -> bool:
            entries = await read_all(kafka_bootstrap, names, 3)
            return all(_terminal_of(entries, c) for c in ids)

        await assert_eventually(ended, timeout=90, message="turns not all ended")
    entries = await read_all(kafka_bootstrap, names, 3)
    check_journal(entries, ids)
    outcomes = Counter(_terminal_of(entries, c) for c in ids)
    assert outcomes == {"TurnInterrupted": 20}


async def test_submit_then_interrupt_back_to_back_while_the_actor_runs(
    kafka_bootstrap: str, lane: str
) -> None:
    """The same 20 pairs produced in one batch to a running actor: 20/20 interrupted."""
    names = await apply_topic_set(kafka_bootstrap, lane, partitions=3)
    submits = [_submit(uuid4()) for _ in range(20)]
    ids = [s.command_id for s in submits]
    async with running(
        service_for(kafka_bootstrap, names, group_id=f"{lane}g", models=_slow_models())
    ):
        producer = await _raw_producer(kafka_bootstrap)
        try:
            await _send_all(
                producer,
                names.commands,
                [c for s in submits for c in (s, _interrupt(s.loop_id))],
            )
        finally:
            await producer.stop()

        async def ended() -> bool:
            entries = await read_all(kafka_bootstrap, names, 3)
            return all(_terminal_of(entries, c) for c in ids)

        await assert_eventually(ended, timeout=90, message="turns not all ended")
    entries = await read_all(kafka_bootstrap, names, 3)
    check_journal(entries, ids)
    assert Counter(_terminal_of(entries, c) for c in ids) == {"TurnInterrupted": 20}


async def test_an_interrupt_naming_an_ended_turn_leaves_the_next_one_running(
    kafka_bootstrap: str, lane: str
) -> None:
    """An interrupt names its turn: read after that turn ended (as after a restart,
    or late), it cancels nothing -- not the turn running by then -- and is
    answered ``TurnRejected{turn_ended}``; one naming the running turn cancels it.
    """
    names = await apply_topic_set(kafka_bootstrap, lane, partitions=3)
    loop_id = LoopId(uuid4())
    second, third = Pause(), Pause()
    model = ScriptedModel(
        [text_step("one"), [second, *text_step("two")], [third, *text_step("three")]]
    )
    async with running(
        service_for(
            kafka_bootstrap,
            names,
            group_id=f"{lane}g",
            models=Models(default=model, tools=()),
        )
    ):
        session = await connect(kafka_bootstrap, names)
        try:
            first = await session.submit_turn("one", loop_id=loop_id, no_fold=True)
            async with asyncio.timeout(60):
                ended = await first.outcome()
            assert ended.terminal is not None
            assert ended.terminal.type_name == "TurnDone"
            running_turn = await session.submit_turn(
                "two", loop_id=loop_id, no_fold=True
            )
            await second.wait_reached(within=60)  # the second turn is held here
            await session.interrupt(loop_id, turn_id=TurnId(ended.turn_id))

            async def answered() -> list[JournalEntry]:
                entries = await read_all(kafka_bootstrap, names, 3)
                rejected = [
                    e
                    for e in entries
                    if e.loop_id == loop_id and isinstance(e.event, TurnRejected)
                ]
                assert rejected, "the stale interrupt is not answered yet"
                return rejected

            rejected = await assert_eventually(answered, timeout=60)
            assert [e.event.reason for e in rejected] == [RejectReason.TURN_ENDED]  # type: ignore[attr-defined]
            second.release()
            async with asyncio.timeout(60):
                outcome = await running_turn.outcome()
            assert outcome.terminal is not None
            assert outcome.terminal.type_name == "TurnDone"
            # Naming the running turn still cancels it.
            last = await session.submit_turn("three", loop_id=loop_id, no_fold=True)
            async with asyncio.timeout(60), last:
                async for event in last:
                    if isinstance(event, TurnStarted):
                        break
                await third.wait_reached(within=60)
                await session.interrupt(loop_id, turn_id=TurnId(event.header.turn_id))
                cancelled = await last.outcome()
            assert cancelled.terminal is not None
            assert cancelled.terminal.type_name == "TurnInterrupted"
        finally:
            await session.close()


# --------------------------------------------------------------------------
# 2. and 3. Poison records and redelivery from far back
# --------------------------------------------------------------------------


@dataclass
class _Marking(Models):
    """Loops whose every turn runs the ``mark`` tool once, then answers.

    A burst of inputs is partly queued behind the running turn (and folded into
    it), the rest refused ``queue_full``: every input is answered either way.
    """

    tool: FunctionTool = field(
        default_factory=lambda: FunctionTool(name="mark", fn=lambda _i, _c: "marked")
    )

    def setup_for(self, loop_id: LoopId, _agent: str = "") -> LoopSetup:
        config = LoopConfig(
            model="test-model",
            tools=(self.tool,),
            commit_timeout=45.0,
            agent_name="it",
        )
        return LoopSetup(
            config=config,
            model=self.by_loop.get(loop_id, self.default),
            access_policy=self.access_for(loop_id),
        )


def _marking(loop_id: UUID, turns: int) -> _Marking:
    marking = _Marking()
    steps = (tool_step(call("mark")), text_step("ok"))
    marking.by_loop[loop_id] = ScriptedModel([s for _ in range(turns) for s in steps])
    return marking


async def _offset_at_end(
    bootstrap: str, group: str, names: TopicNames, *, within: float = 60
) -> None:
    """The group's committed offset reaches the end of the commands partition.

    The committed offset never passes an unanswered input, so at the end every
    command read has been answered (or given up, for a poison record).
    """
    tp = TopicPartition(names.commands, 0)
    end = await _end_offset(bootstrap, tp)

    async def at_end() -> bool:
        return await _committed(bootstrap, group, tp) == end

    await assert_eventually(
        at_end, timeout=within, interval=1.0, message="committed offset not at end"
    )


async def test_a_poison_record_at_the_size_limit_never_pins_the_partition(
    kafka_bootstrap: str, lane: str
) -> None:
    """(max.message.bytes - 100) random bytes, then 1,100 submits to one loop, then a
    restart: the committed offset reaches the end before and after, the poison is in
    the DLQ, and no submit is answered twice.
    """
    names = await apply_topic_set(kafka_bootstrap, lane, partitions=1)
    loop_id = uuid4()
    marking = _marking(loop_id, turns=1_200)
    group = f"{lane}g"
    limit = 1_048_576  # infra/topics.yaml: turnstream.commands.v1 max.message.bytes
    poison = os.urandom(limit - 100)
    submits = [_submit(loop_id, f"n{i}") for i in range(1_100)]
    producer = await _raw_producer(kafka_bootstrap)
    try:
        async with asyncio.timeout(60):
            await producer.send_and_wait(names.commands, poison)
        await _send_all(producer, names.commands, submits)
    finally:
        await producer.stop()
    ids = [s.command_id for s in submits]
    metrics = ServiceMetrics()
    async with running(
        service_for(
            kafka_bootstrap, names, group_id=group, models=marking, metrics=metrics
        )
    ):
        await _offset_at_end(kafka_bootstrap, group, names, within=240)
    runs = len(marking.tool.calls)
    async with running(
        service_for(kafka_bootstrap, names, group_id=group, models=marking)
    ):
        await _offset_at_end(kafka_bootstrap, group, names)
    assert len(marking.tool.calls) == runs  # nothing ran again
    check_journal(await read_all(kafka_bootstrap, names, 1), ids)
    dead = await _dead_letters(kafka_bootstrap, names.dead_letters, 1)
    assert len(dead) == 1
    assert dict(dead[0].headers)[DLQ_KIND] == b"undecodable"  # type: ignore[attr-defined]
    assert dict(dead[0].headers)[DLQ_OFFSET] == b"0"  # type: ignore[attr-defined]


async def test_offsets_reset_to_the_beginning_run_nothing_twice(
    kafka_bootstrap: str, lane: str
) -> None:
    """5,000 submits to one loop; the group's offsets reset to the beginning and the
    actor restarted: 0 submits answered twice, 0 tool runs repeated.
    """
    names = await apply_topic_set(kafka_bootstrap, lane, partitions=1)
    loop_id = uuid4()
    marking = _marking(loop_id, turns=5_200)
    group = f"{lane}g"
    submits = [_submit(loop_id, f"n{i}") for i in range(5_000)]
    producer = await _raw_producer(kafka_bootstrap)
    try:
        await _send_all(producer, names.commands, submits)
    finally:
        await producer.stop()
    ids = [s.command_id for s in submits]
    async with running(
        service_for(kafka_bootstrap, names, group_id=group, models=marking)
    ):
        await _offset_at_end(kafka_bootstrap, group, names, within=240)
    runs = len(marking.tool.calls)
    assert runs >= 1
    # What `kafka-consumer-groups --reset-offsets --to-earliest` does: commit
    # offset 0 for the group. The broker takes it only once the group is empty
    # (the stopped actor's leave may still be completing), so try until it holds.
    tp = TopicPartition(names.commands, 0)

    async def reset() -> bool:
        resetter = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=group)
        async with asyncio.timeout(30):
            await resetter.start()
            try:
                resetter.assign([tp])
                with contextlib.suppress(KafkaError):
                    await resetter.commit({tp: 0})
            finally:
                await resetter.stop()
        return await _committed(kafka_bootstrap, group, tp) == 0

    await assert_eventually(reset, timeout=60, interval=1.0)
    metrics = ServiceMetrics()
    async with running(
        service_for(
            kafka_bootstrap, names, group_id=group, models=marking, metrics=metrics
        )
    ):
        await _offset_at_end(kafka_bootstrap, group, names)
    assert metrics.duplicates == 5_000
    assert len(marking.tool.calls) == runs
    check_journal(await read_all(kafka_bootstrap, names, 1), ids)


# --------------------------------------------------------------------------
# 4. Misrouted and mis-keyed commands
# --------------------------------------------------------------------------


async def test_misrouted_and_miskeyed_commands_are_dead_letters(
    kafka_bootstrap: str, lane: str
) -> None:
    """A valid submit on a partition its key does not hash to, and one keyed by the
    uppercase spelling of its loop id: both dead-lettered with their reason; the
    loop's events stay on one partition, with one LoopStarted.
    """
    names = await apply_topic_set(kafka_bootstrap, lane, partitions=3)
    loop_id = uuid4()
    home = partition_for(loop_key(loop_id), 3)
    elsewhere = (home + 1) % 3
    wrong_partition, upper_key = _submit(loop_id), _submit(loop_id)
    producer = await _raw_producer(kafka_bootstrap)
    try:
        async with asyncio.timeout(30):
            await producer.send_and_wait(
                names.commands,
                _CODEC.marshal_command(wrong_partition),
                key=loop_key(loop_id),
                partition=elsewhere,
            )
            await producer.send_and_wait(
                names.commands,
                _CODEC.marshal_command(upper_key),
                key=str(loop_id).upper().encode("ascii"),
            )
    finally:
        await producer.stop()
    session = await connect(kafka_bootstrap, names)
    try:
        async with running(
            service_for(
                kafka_bootstrap,
                names,
                group_id=f"{lane}g",
                models=Models(default=DemoModel(), tools=()),
            )
        ):
            good_id = await session.submit_to_loop(LoopId(loop_id), "hello")

            async def answered() -> bool:
                entries = await read_all(kafka_bootstrap, names, 3)
                return _terminal_of(entries, good_id) == "TurnDone"

            await assert_eventually(answered, timeout=60)
            dead = await _dead_letters(kafka_bootstrap, names.dead_letters, 2)
    finally:
        await session.close()
    kinds = sorted(dict(d.headers)[DLQ_KIND] for d in dead)  # type: ignore[attr-defined]
    assert kinds == [b"bad_key", b"misrouted"]
    holding = set()
    mine: list[JournalEntry] = []
    for partition in range(3):
        part = await read_journal(
            clients_for(kafka_bootstrap),
            _CODEC,
            TopicPartition(names.events, partition),
        )
        ours = [e for e in part if e.loop_id == loop_id]
        if ours:
            holding.add(partition)
        mine.extend(ours)
    assert holding == {home}
    assert sum(isinstance(e.event, LoopStarted) for e in mine) == 1
    answered_ids = {e.event.reply_to() for e in mine}
    assert good_id in answered_ids
    assert wrong_partition.command_id not in answered_ids
    assert upper_key.command_id not in answered_ids


async def test_each_dead_letter_is_logged_once_with_partition_offset_and_reason(
    kafka_bootstrap: str, lane: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A poison record and a misrouted submit: one log line each naming the
    partition, offset and reason of the record, and nothing of its content.
    """
    names = await apply_topic_set(kafka_bootstrap, lane, partitions=3)
    loop_id = uuid4()
    home = partition_for(loop_key(loop_id), 3)
    elsewhere = (home + 1) % 3
    secret = "do-not-log-this-text"
    producer = await _raw_producer(kafka_bootstrap)
    try:
        async with asyncio.timeout(30):
            poison = await producer.send_and_wait(
                names.commands,
                b"\x00" + secret.encode(),
                key=loop_key(loop_id),
                partition=home,
            )
            misrouted = await producer.send_and_wait(
                names.commands,
                _CODEC.marshal_command(_submit(loop_id, secret)),
                key=loop_key(loop_id),
                partition=elsewhere,
            )
    finally:
        await producer.stop()
    caplog.set_level(logging.INFO, logger="turnstream")
    async with running(
        service_for(
            kafka_bootstrap,
            names,
            group_id=f"{lane}g",
            models=Models(default=DemoModel(), tools=()),
        )
    ):
        await _dead_letters(kafka_bootstrap, names.dead_letters, 2)

        def logged() -> list[logging.LogRecord]:
            lines = [
                r for r in caplog.records if r.getMessage() == "record dead-lettered"
            ]
            assert len(lines) == 2, [r.getMessage() for r in caplog.records]
            return lines

        lines = await assert_eventually(logged, timeout=30)
    seen = sorted(
        (r.partition, r.offset, r.reason)  # type: ignore[attr-defined]
        for r in lines
    )
    assert seen == sorted(
        [
            (poison.partition, poison.offset, "undecodable"),
            (misrouted.partition, misrouted.offset, "misrouted"),
        ]
    )
    assert all(r.levelno == logging.WARNING for r in lines)
    for record in caplog.records:
        assert secret not in record.getMessage()
        assert secret not in repr(record.__dict__)


async def test_the_session_sends_every_command_on_its_loops_partition(
    kafka_bootstrap: str, lane: str
) -> None:
    """Commands sent through the public client are keyed by the canonical loop id
    and sit on the partition that key belongs to: the client cannot misroute.
    """
    names = await apply_topic_set(kafka_bootstrap, lane, partitions=3)
    loops = [LoopId(uuid4()) for _ in range(12)]
    session = await connect(kafka_bootstrap, names)
    try:
        for loop_id in loops:
            await session.submit_to_loop(loop_id, "hello")
            await session.interrupt(loop_id)
    finally:
        await session.close()
    consumer = AIOKafkaConsumer(
        names.commands, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest"
    )
    records: list[Any] = []
    async with asyncio.timeout(60):
        await consumer.start()
        try:
            while len(records) < 2 * len(loops):
                for part in (await consumer.getmany(timeout_ms=500)).values():
                    records.extend(part)
        finally:
            await consumer.stop()
    for record in records:
        loop_id = _CODEC.unmarshal_command(record.value).loop_id
        assert record.key == loop_key(loop_id)
        assert record.partition == partition_for(record.key, 3)


# --------------------------------------------------------------------------
# 5. A dead letter that does not fit is written bounded
# --------------------------------------------------------------------------


async def test_a_dead_letter_too_large_for_the_dlq_is_written_bounded(
    kafka_bootstrap: str, lane: str
) -> None:
    """A DLQ that takes less than the commands topic (a misconfigured cluster): the
    poison is dead-lettered as a bounded record and the offset moves past it.
    """
    names = await apply_topic_set(kafka_bootstrap, lane, partitions=1)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    async with asyncio.timeout(30):
        await admin.start()
        try:
            await admin.alter_configs(
                [
                    ConfigResource(
                        ConfigResourceType.TOPIC,
                        names.dead_letters,
                        configs={
                            "max.message.bytes": "65536",
                            "cleanup.policy": "delete",
                            "retention.ms": "2592000000",
                        },
                    )
                ]
            )
        finally:
            await admin.close()
    group = f"{lane}g"
    poison = os.urandom(200_000)
    producer = await _raw_producer(kafka_bootstrap)
    try:
        async with asyncio.timeout(30):
            await producer.send_and_wait(names.commands, poison, key=b"not-a-loop")
    finally:
        await producer.stop()
    metrics = ServiceMetrics()
    async with running(
        service_for(
            kafka_bootstrap,
            names,
            group_id=group,
            models=Models(tools=()),
            metrics=metrics,
        )
    ):
        await _offset_at_end(kafka_bootstrap, group, names)
        assert metrics.dead_letters_truncated == 1
    dead = await _dead_letters(kafka_bootstrap, names.dead_letters, 1)
    headers = dict(dead[0].headers)  # type: ignore[attr-defined]
    assert headers[DLQ_TRUNCATED] == b"true"
    assert headers[DLQ_SIZE] == b"200000"
    assert dead[0].value == poison[:PREFIX_BYTES]  # type: ignore[attr-defined]


# --------------------------------------------------------------------------
# 6. Compressed batches from other producers
# --------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
async def test_compressed_commands_are_read(
    kafka_bootstrap: str, lane: str, codec: str
) -> None:
    """Java and Go producers compress by default (franz-go: snappy): a compressed
    batch of commands is read and answered, not a fatal fetch error.
    """
    names = await apply_topic_set(kafka_bootstrap, lane, partitions=1)
    submit = _submit(uuid4())
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, compression_type=codec
    )
    async with asyncio.timeout(30):
        await producer.start()
        try:
            await _send_all(producer, names.commands, [submit])
        finally:
            await producer.stop()
    async with running(
        service_for(
            kafka_bootstrap, names, group_id=f"{lane}g", models=Models(tools=())
        )
    ):

        async def answered() -> bool:
            entries = await read_all(kafka_bootstrap, names, 1)
            return _terminal_of(entries, submit.command_id) == "TurnDone"

        await assert_eventually(answered, timeout=60)
