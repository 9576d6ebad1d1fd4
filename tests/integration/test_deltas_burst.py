"""A burst of token deltas is slowed to the broker's pace, not dropped.

200 conversations streaming at once used to overflow the delta buffer and lose
8-14 % of the tokens although the broker kept up. A full buffer now makes the
publisher wait for the sender (up to a second) instead of dropping.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from uuid import uuid4

import pytest
from tests.support.eventually import assert_eventually
from tests.support.kafka_harness import (
    apply_topic_set,
    clients_for,
    delete_topic_set,
    unique_prefix,
)

from turnstream.content import TextChunk
from turnstream.events import Header, TokenDelta
from turnstream.kafka.actor.deltas import DeltaPublisher
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.wire import default_codec

pytestmark = [pytest.mark.kafka]


async def test_a_burst_larger_than_the_buffer_loses_no_delta(
    kafka_bootstrap: str,
) -> None:
    """50 loops x 40 deltas published at once through an 8-slot buffer: all sent."""
    prefix = unique_prefix("deltas-burst")
    names = await apply_topic_set(kafka_bootstrap, prefix, partitions=3)
    metrics = ServiceMetrics()
    hub = DeltaPublisher(
        clients=clients_for(kafka_bootstrap),
        topic=names.deltas,
        codec=default_codec(),
        metrics=metrics,
        capacity=8,
    )
    await hub.start()
    sender = asyncio.create_task(hub.run())
    try:

        async def stream(loop: int) -> None:
            header = Header(
                event_id=uuid4(),
                session_id=uuid4(),
                loop_id=uuid4(),
                turn_id=uuid4(),
                step_id=uuid4(),
                created_at=datetime.now(UTC),
            )
            for i in range(40):
                await hub.publish(
                    TokenDelta(
                        header=header.model_copy(update={"event_id": uuid4()}),
                        turn_index=1,
                        chunk=TextChunk(text=f"{loop}:{i} "),
                    )
                )

        async with asyncio.timeout(60):
            await asyncio.gather(*(stream(n) for n in range(50)))
        await assert_eventually(lambda: metrics.deltas_sent == 2_000, timeout=30)
        assert metrics.deltas_dropped == 0
    finally:
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
        await delete_topic_set(kafka_bootstrap, prefix)
