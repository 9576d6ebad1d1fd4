"""Oversized input: refused by the client, unsent, with the limit named."""

from __future__ import annotations

from collections.abc import AsyncIterator
from uuid import uuid4

import pytest
import pytest_asyncio
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    apply_topic_set,
    collect_garbage,
    connect,
    delete_topic_set,
    unique_prefix,
)

from turnstream.commands import SubmitInput
from turnstream.content import TextBlock, UserMessage
from turnstream.errors import CommandNotConfirmedError, CommandTooLargeError
from turnstream.ids import LoopId
from turnstream.kafka.client.sender import record_size
from turnstream.kafka.client.session import KafkaSession
from turnstream.kafka.records import loop_key
from turnstream.kafka.topology import MAX_COMMAND_BYTES
from turnstream.wire import default_codec

pytestmark = [pytest.mark.kafka]


@pytest_asyncio.fixture
async def session(kafka_bootstrap: str) -> AsyncIterator[KafkaSession]:
    prefix = unique_prefix("size")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    client = await connect(kafka_bootstrap, topics)
    try:
        yield client
    finally:
        await client.close()
        await delete_topic_set(kafka_bootstrap, prefix)


def _size_of(session: KafkaSession, loop_id: LoopId, text: str) -> int:
    command = SubmitInput(
        command_id=uuid4(),
        session_id=session.session_id,
        loop_id=loop_id,
        created_at=session._clock.now(),
        message=UserMessage(blocks=(TextBlock(text=text),)),
    )
    codec = default_codec()
    return record_size(
        codec.marshal_command(command), loop_key(loop_id), codec.kafka_headers(command)
    )


async def test_an_input_over_the_limit_is_refused_unsent_naming_the_limit(
    session: KafkaSession,
) -> None:
    """A 2 MB input raises CommandTooLargeError (not "it may still arrive --
    retry with the same command id", which could never succeed).
    """
    with pytest.raises(CommandTooLargeError) as info:
        await session.submit("x" * 2_000_000)
    error = info.value
    assert not isinstance(error, CommandNotConfirmedError)
    assert (error.kind, error.limit, error.retriable) == (
        "command_too_large",
        MAX_COMMAND_BYTES,
        False,
    )
    assert error.size > 2_000_000
    assert f"limit of {MAX_COMMAND_BYTES} bytes" in str(error)
    assert "retry" not in str(error)


async def test_an_input_at_the_limit_is_accepted_by_the_broker(
    session: KafkaSession,
) -> None:
    """The client's size is an upper bound: a record it counts at exactly the
    limit is one the commands topic (max.message.bytes) takes.
    """
    loop_id = LoopId(uuid4())
    text = "x" * (MAX_COMMAND_BYTES - _size_of(session, loop_id, ""))
    while (size := _size_of(session, loop_id, text)) > MAX_COMMAND_BYTES:
        text = text[: len(text) - (size - MAX_COMMAND_BYTES)]
    assert size == MAX_COMMAND_BYTES
    assert await session.submit(text, loop_id=loop_id)
    with pytest.raises(CommandTooLargeError):
        await session.submit(text + "x", loop_id=loop_id)
