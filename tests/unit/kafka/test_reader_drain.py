"""A partition scan that stops moving fails instead of polling for ever."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import TopicPartition

from turnstream.kafka.reader import _drain

TP = TopicPartition("t", 0)


class StuckConsumer:
    """A consumer whose position never reaches the end (nothing to fetch)."""

    def __init__(self, position: int) -> None:
        self.at = position
        self.fetches = 0

    async def position(self, _tp: TopicPartition) -> int:
        return self.at

    async def getmany(self, _tp: TopicPartition, timeout_ms: int) -> dict[Any, Any]:
        self.fetches += 1
        await asyncio.sleep(timeout_ms / 1000)
        return {}


async def test_drain_fails_when_the_position_stops_moving() -> None:
    consumer = StuckConsumer(position=3)
    async with asyncio.timeout(5):  # the old loop polled until this fired
        with pytest.raises(TimeoutError, match="no progress at offset 3 of 10"):
            await _drain(consumer, TP, 10, lambda _r: True, seconds=0.5)
    assert consumer.fetches >= 2


async def test_drain_of_a_caught_up_position_returns_without_fetching() -> None:
    consumer = StuckConsumer(position=10)
    await _drain(consumer, TP, 10, lambda _r: True, seconds=0.5)
    assert consumer.fetches == 0
