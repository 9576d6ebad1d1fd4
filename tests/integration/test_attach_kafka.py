"""``KafkaSession.attach``: resume a loop's stream from a cursor, on the real broker.

One in-process loop-actor service; the loop's model is scripted with pauses, so the
test decides where the turn stands when the client leaves and when it comes back
(nothing races a fast model). A client reads part of a turn, closes its session (a
client restart), the turn streams on while nobody watches, and a new session
attaches with the last cursor: the tokens of both halves make the committed answer
exactly, no record is seen twice, and the journal events seen are the loop's
journal, in order. ``turn_start`` replays the running turn from its start; with the
deltas after a cursor gone (the log start moved past them, as retention moves it)
the attachment says so once and the journal still has the whole answer.
``follow`` of a command sent by another session, without its loop id, is refused at
once instead of waiting for ever.
"""

from __future__ import annotations

import asyncio
from uuid import uuid4

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from tests.integration.test_crash_kill9 import _actors, _loop_on, _spawn
from tests.support.eventually import assert_eventually
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    Models,
    apply_topic_set,
    collect_garbage,
    collect_garbage_late,
    connect,
    delete_topic_set,
    running,
    service_for,
    unique_prefix,
)

from turnstream.content import TextBlock, TextChunk, text_of
from turnstream.errors import InvalidCursorError, UnknownCommandError
from turnstream.events import (
    GateOpened,
    StepDone,
    TokenDelta,
    TurnDone,
    TurnInterrupted,
)
from turnstream.ids import LoopId
from turnstream.kafka.client import (
    Attachment,
    Cursor,
    DeltasExpired,
    KafkaSession,
    Streamed,
)
from turnstream.runtime.model_client import StreamEnd
from turnstream.testing import Pause, ScriptedModel

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(180)]

WAIT = 45.0
ANSWER = ("Hello ", "there, ", "this ", "is ", "the ", "end.")


def _paced(first: Pause, second: Pause) -> ScriptedModel:
    """One text step: two tokens, ``first``, two tokens, ``second``, two tokens."""
    return ScriptedModel(
        [
            [
                *(TextChunk(text=t) for t in ANSWER[:2]),
                first,
                *(TextChunk(text=t) for t in ANSWER[2:4]),
                second,
                *(TextChunk(text=t) for t in ANSWER[4:]),
                StreamEnd(stop_reason="end_turn"),
            ]
        ]
    )


async def _read(
    attachment: Attachment,
    items: list[Streamed],
    *,
    tokens: int = 0,
    done: bool = False,
) -> None:
    """Read into ``items`` until ``tokens`` more deltas came (or a ``TurnDone``)."""
    async with asyncio.timeout(WAIT):
        async for item in attachment:
            assert isinstance(item, Streamed), item
            items.append(item)
            if isinstance(item.event, TokenDelta):
                tokens -= 1
            if (not done and tokens <= 0) or (
                done and isinstance(item.event, TurnDone)
            ):
                return


def _text(items: list[Streamed]) -> str:
    return "".join(
        i.event.chunk.text
        for i in items
        if isinstance(i.event, TokenDelta) and isinstance(i.event.chunk, TextChunk)
    )


def _coordinates(items: list[Streamed]) -> list[tuple[str, int | None]]:
    return [(i.cursor.kind, i.cursor.offset) for i in items]


async def test_attach_resumes_after_a_client_restart_without_gap_or_duplicate(
    kafka_bootstrap: str,
) -> None:
    prefix = unique_prefix("attach-resume")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=2)
    loop = LoopId(uuid4())
    first_pause, second_pause = Pause(), Pause()
    models = Models(by_loop={loop: _paced(first_pause, second_pause)})
    service = service_for(
        kafka_bootstrap, topics, group_id=f"{prefix}g", models=models, txn_prefix=prefix
    )
    sessions: list[KafkaSession] = []
    try:
        async with running(service):
            session = await connect(kafka_bootstrap, topics)
            sessions.append(session)
            before: list[Streamed] = []
            attachment = await session.attach(loop)
            start = attachment.cursor
            await session.submit("hi", loop_id=loop)
            await _read(attachment, before, tokens=2)
            await first_pause.wait_reached(within=WAIT)
            cursor = attachment.cursor.encode()
            await attachment.close()
            await session.close()  # the client goes away mid-turn

            first_pause.release()  # two tokens stream while nobody watches
            await second_pause.wait_reached(within=WAIT)

            session = await connect(kafka_bootstrap, topics)  # a new client process
            sessions.append(session)
            after: list[Streamed] = []
            resumed = await session.attach(loop, after=cursor)
            from_start: list[Streamed] = []
            rewound = await session.attach(loop, turn_start=True)
            await _read(resumed, after, tokens=2)  # the two missed, replayed
            await _read(rewound, from_start, tokens=4)
            second_pause.release()
            await _read(resumed, after, done=True)
            await _read(rewound, from_start, done=True)
            await resumed.close()
            await rewound.close()

            committed = "".join(ANSWER)
            terminal = after[-1].event
            assert isinstance(terminal, TurnDone)
            assert text_of(terminal.message.blocks) == committed
            assert _text(before) + _text(after) == committed
            seen = _coordinates(before) + _coordinates(after)
            assert len(seen) == len(set(seen)), seen
            journal = await session.replay_entries(loop, from_=start.events)
            ours = [
                i.event.header.event_id for i in before + after if i.cursor.kind == "e"
            ]
            assert ours == [e.event.header.event_id for e in journal][: len(ours)]
            assert journal[len(ours) - 1].event == terminal
            assert _text(from_start) == committed
            assert [
                type(i.event).__name__ for i in from_start if i.cursor.kind == "e"
            ] == [
                "TurnStarted",
                "StepDone",
                "TurnDone",
            ]

            other = Cursor(1 - start.partition, 0, 0).encode()
            with pytest.raises(InvalidCursorError) as refused:
                await session.attach(loop, after=other)
            assert refused.value.reason == "other_loop"
    finally:
        for s in sessions:
            await s.close()
        await delete_topic_set(kafka_bootstrap, prefix)


async def test_attach_after_expired_deltas_says_so_and_the_journal_has_the_answer(
    kafka_bootstrap: str,
) -> None:
    prefix = unique_prefix("attach-expired")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    loop = LoopId(uuid4())
    first_pause, second_pause = Pause(), Pause()
    models = Models(by_loop={loop: _paced(first_pause, second_pause)})
    service = service_for(
        kafka_bootstrap, topics, group_id=f"{prefix}g", models=models, txn_prefix=prefix
    )
    session = await connect(kafka_bootstrap, topics)
    try:
        async with running(service):
            attachment = await session.attach(loop)
            start = attachment.cursor
            await attachment.close()
            outcome = asyncio.create_task(
                session.submit_and_wait("hi", loop_id=loop, timeout=WAIT)
            )
            first_pause.release()
            second_pause.release()
            assert (await outcome).text == "".join(ANSWER)

            # Retention moves a partition's log start past old records; so does
            # DeleteRecords, at once (the broker checks retention every 5 min).
            tp = TopicPartition(topics.deltas, start.partition)
            admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
            await admin.start()
            try:
                ends = await session.attach(loop)
                end = ends.cursor.deltas
                await ends.close()
                assert end > start.deltas
                await admin.delete_records(
                    {tp: RecordsToDelete(end)}, timeout_ms=15_000
                )
            finally:
                await admin.close()

            items = []
            resumed = await session.attach(loop, after=start)
            async with asyncio.timeout(WAIT):
                async for item in resumed:
                    items.append(item)
                    if isinstance(item, Streamed) and isinstance(item.event, TurnDone):
                        break
            await resumed.close()
            notice = items[0]
            assert isinstance(notice, DeltasExpired), items
            assert (notice.requested, notice.earliest) == (start.deltas, end)
            rest = items[1:]
            assert all(isinstance(i, Streamed) for i in rest)
            assert not any(
                isinstance(i, Streamed) and isinstance(i.event, TokenDelta)
                for i in rest
            )
            steps = [
                i.event
                for i in rest
                if isinstance(i, Streamed) and isinstance(i.event, StepDone)
            ]
            assert [text_of(s.ai_message.blocks) for s in steps] == ["".join(ANSWER)]
    finally:
        await session.close()
        await delete_topic_set(kafka_bootstrap, prefix)


async def test_follow_of_a_command_sent_elsewhere_needs_its_loop_id(
    kafka_bootstrap: str,
) -> None:
    """Another session's command id without a loop id: refused, not a silent wait."""
    prefix = unique_prefix("follow-unknown")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    loop = LoopId(uuid4())
    models = Models(
        by_loop={loop: ScriptedModel([[TextChunk(text="ok"), StreamEnd()]])}
    )
    service = service_for(
        kafka_bootstrap, topics, group_id=f"{prefix}g", models=models, txn_prefix=prefix
    )
    sender = await connect(kafka_bootstrap, topics)
    other = await connect(kafka_bootstrap, topics)
    try:
        async with running(service):
            command_id = await sender.submit("hi", loop_id=loop)
            with pytest.raises(UnknownCommandError) as refused:
                async with asyncio.timeout(5):
                    await other.follow(command_id).outcome()
            assert refused.value.command_id == command_id
            assert refused.value.kind == "unknown_command"
            async with asyncio.timeout(WAIT):
                outcome = await other.follow(command_id, loop_id=loop).outcome()
            assert outcome.text == "ok"
    finally:
        await sender.close()
        await other.close()
        await delete_topic_set(kafka_bootstrap, prefix)


async def test_attach_resumes_across_a_kill_nine_takeover(kafka_bootstrap: str) -> None:
    """The cursor taken before the owner's SIGKILL resumes on the survivor's records.

    Two actor processes (the harness of ``test_crash_kill9``); the followed turn is
    held on its approval gate when the owner is killed, the client leaves with it.
    A new client attaches with the last cursor: the restore's ``TurnInterrupted``,
    then the next turn, each step's tokens equal to its committed text; no record
    twice, and the journal events seen are the loop's journal.
    """
    prefix = unique_prefix("attach-kill9")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=2)
    sessions: list[KafkaSession] = []
    try:
        async with _actors(kafka_bootstrap, prefix) as actors:
            first = await _spawn("first", kafka_bootstrap, prefix)
            actors.append(first)
            await assert_eventually(
                lambda: first.partitions == {0, 1}, timeout=60, message="not ready"
            )
            second = await _spawn("second", kafka_bootstrap, prefix)
            actors.append(second)

            def split() -> None:
                assert first.partitions is not None
                assert second.partitions is not None
                assert len(first.partitions) == len(second.partitions) == 1

            await assert_eventually(split, timeout=60, message="no split assignment")
            assert first.partitions is not None
            session = await connect(kafka_bootstrap, topics)
            sessions.append(session)
            loop = _loop_on(session, next(iter(first.partitions)))

            attachment = await session.attach(loop)
            start = attachment.cursor
            await session.submit("count these four words", loop_id=loop)
            before: list[Streamed] = []
            async with asyncio.timeout(60):
                async for item in attachment:  # held on the approval gate
                    assert isinstance(item, Streamed)
                    before.append(item)
                    if isinstance(item.event, GateOpened):
                        break
            cursor = attachment.cursor.encode()
            await attachment.close()
            await session.close()
            first.process.kill()  # SIGKILL: no handover, nothing flushed
            await first.process.wait()

            session = await connect(kafka_bootstrap, topics)
            sessions.append(session)
            await session.submit("add 2 3", loop_id=loop, no_fold=True)
            resumed = await session.attach(loop, after=cursor)
            after: list[Streamed] = []
            async with asyncio.timeout(120):
                async for item in resumed:
                    assert isinstance(item, Streamed)
                    after.append(item)
                    if isinstance(item.event, TurnDone):
                        break
            await resumed.close()

            seen = _coordinates(before) + _coordinates(after)
            assert len(seen) == len(set(seen)), seen
            events = [i.event for i in before + after]
            interrupted = [e for e in events if isinstance(e, TurnInterrupted)]
            assert [e.turn_index for e in interrupted] == [1]
            done = events[-1]
            assert isinstance(done, TurnDone)
            assert done.turn_index == 2
            steps = [e for e in events if isinstance(e, StepDone)]
            assert steps, events
            for step in steps:
                streamed = "".join(
                    e.chunk.text
                    for e in events
                    if isinstance(e, TokenDelta)
                    and isinstance(e.chunk, TextChunk)
                    and e.header.step_id == step.header.step_id
                )
                blocks = step.ai_message.blocks
                committed = "".join(b.text for b in blocks if isinstance(b, TextBlock))
                assert streamed == committed
            journal = await session.replay_entries(loop, from_=start.events)
            ours = [
                i.event.header.event_id for i in before + after if i.cursor.kind == "e"
            ]
            assert ours == [e.event.header.event_id for e in journal][: len(ours)]
    finally:
        for s in sessions:
            await s.close()
        await delete_topic_set(kafka_bootstrap, prefix)
