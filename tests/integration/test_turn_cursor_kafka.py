"""Resume with ``attach`` from a ``Turn``'s or a subscription's cursor, on the broker.

One in-process loop-actor service; the loop's model is scripted with two pauses, so
the test decides where the turn stands when the client leaves and when it comes back.
A client reads part of the turn through ``submit_turn`` (a ``Turn``) or through a
live subscription, keeps its cursor, closes its session (a client restart); two
tokens stream while nobody watches; a new session attaches with the cursor. The
tokens of both halves make the committed answer exactly, in order (the answer's
tokens are all different, so a token seen twice or lost shows), and the journal
events of both halves are the turn's journal, each once.
"""

from __future__ import annotations

import asyncio
from uuid import uuid4

import pytest
from tests.integration.test_attach_kafka import ANSWER, WAIT, _paced, _read
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    Models,
    apply_topic_set,
    collect_garbage,
    collect_garbage_late,
    connect,
    delete_topic_set,
    loop_filter,
    running,
    service_for,
    unique_prefix,
)

from turnstream.content import TextChunk, text_of
from turnstream.events import AnyEvent, TokenDelta, TurnDone
from turnstream.ids import LoopId
from turnstream.kafka.client import Cursor, KafkaSession, Streamed
from turnstream.kafka.topology import TopicNames
from turnstream.testing import Pause

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(180)]


def _tokens(events: list[AnyEvent]) -> list[str]:
    return [
        e.chunk.text
        for e in events
        if isinstance(e, TokenDelta) and isinstance(e.chunk, TextChunk)
    ]


async def _resume_and_check(
    kafka_bootstrap: str,
    topics: TopicNames,
    loop: LoopId,
    *,
    cursor: str,
    before: list[AnyEvent],
    pauses: tuple[Pause, Pause],
    sessions: list[KafkaSession],
) -> None:
    """Let two tokens stream unwatched, attach from ``cursor``, check both halves."""
    first_pause, second_pause = pauses
    first_pause.release()  # two tokens stream while nobody watches
    await second_pause.wait_reached(within=WAIT)
    session = await connect(kafka_bootstrap, topics)  # a new client process
    sessions.append(session)
    resumed = await session.attach(loop, after=cursor)
    items: list[Streamed] = []
    await _read(resumed, items, tokens=2)  # the two missed, replayed
    second_pause.release()
    await _read(resumed, items, done=True)
    await resumed.close()
    after = [i.event for i in items]

    committed = "".join(ANSWER)
    terminal = after[-1]
    assert isinstance(terminal, TurnDone)
    assert text_of(terminal.message.blocks) == committed
    assert _tokens(before) + _tokens(after) == list(ANSWER)
    seen = [e for e in before + after if e.is_enduring()]
    ids = [e.header.event_id for e in seen]
    assert len(ids) == len(set(ids)), [e.type_name for e in seen]
    journal = await session.replay_entries(loop)
    turn_id = terminal.header.turn_id
    ours = [e.event for e in journal if e.event.header.turn_id == turn_id]
    assert [e.type_name for e in ours] == ["TurnStarted", "StepDone", "TurnDone"]
    assert [e for e in seen if e.header.turn_id == turn_id] == ours


async def test_attach_from_a_turn_cursor_gets_exactly_the_rest(
    kafka_bootstrap: str,
) -> None:
    """``submit_turn``, read two tokens, leave; ``attach(after=turn.cursor)``."""
    prefix = unique_prefix("turn-cursor")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=2)
    loop = LoopId(uuid4())
    pauses = (Pause(), Pause())
    models = Models(by_loop={loop: _paced(*pauses)})
    service = service_for(
        kafka_bootstrap, topics, group_id=f"{prefix}g", models=models, txn_prefix=prefix
    )
    sessions: list[KafkaSession] = []
    try:
        async with running(service):
            session = await connect(kafka_bootstrap, topics)
            sessions.append(session)
            turn = await session.submit_turn("hi", loop_id=loop, tokens=True)
            start = turn.cursor
            assert start is not None
            assert start.partition == session.partition_of(loop)
            before: list[AnyEvent] = []
            async with asyncio.timeout(WAIT):
                async for event in turn:
                    before.append(event)
                    if len(_tokens(before)) == 2:
                        break
            await pauses[0].wait_reached(within=WAIT)
            assert turn.cursor is not None
            cursor = turn.cursor.encode()
            assert Cursor.decode(cursor).events > start.events  # past TurnStarted
            turn.close()
            await session.close()  # the client goes away mid-turn
            await _resume_and_check(
                kafka_bootstrap,
                topics,
                loop,
                cursor=cursor,
                before=before,
                pauses=pauses,
                sessions=sessions,
            )
    finally:
        for s in sessions:
            await s.close()
        await delete_topic_set(kafka_bootstrap, prefix)


async def test_attach_from_a_subscription_cursor_gets_exactly_the_rest(
    kafka_bootstrap: str,
) -> None:
    """``subscribe_events``, read two tokens, leave; ``attach(after=cursor_for)``."""
    prefix = unique_prefix("sub-cursor")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=2)
    loop = LoopId(uuid4())
    pauses = (Pause(), Pause())
    models = Models(by_loop={loop: _paced(*pauses)})
    service = service_for(
        kafka_bootstrap, topics, group_id=f"{prefix}g", models=models, txn_prefix=prefix
    )
    sessions: list[KafkaSession] = []
    try:
        async with running(service):
            session = await connect(kafka_bootstrap, topics)
            sessions.append(session)
            subscription = session.subscribe_events(loop_filter(loop))
            assert subscription.cursor is None
            start = subscription.cursor_for(loop)
            assert start is not None
            await session.submit("hi", loop_id=loop)
            before: list[AnyEvent] = []
            async with asyncio.timeout(WAIT):
                async for event in subscription:
                    before.append(event)
                    if len(_tokens(before)) == 2:
                        break
            await pauses[0].wait_reached(within=WAIT)
            # Whatever the reader fetched meanwhile (a TurnStarted read after
            # the tokens) was not taken: the cursor stays where reading stopped.
            cursor = subscription.cursor_for(loop)
            assert cursor is not None
            assert cursor == subscription.cursor
            subscription.close()
            await session.close()  # the client goes away mid-turn
            await _resume_and_check(
                kafka_bootstrap,
                topics,
                loop,
                cursor=cursor.encode(),
                before=before,
                pauses=pauses,
                sessions=sessions,
            )
    finally:
        for s in sessions:
            await s.close()
        await delete_topic_set(kafka_bootstrap, prefix)
