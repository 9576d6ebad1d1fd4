"""Helpers shared by the model-client tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from turnstream.errors import ProviderError
from turnstream.runtime.model_client import ModelEvent

API_KEY = "sk-test-TOPSECRET-0123456789abcdef"


async def collect(stream: AsyncIterator[ModelEvent]) -> list[ModelEvent]:
    """Every item of ``stream``."""
    return [event async for event in stream]


async def collect_failure(
    stream: AsyncIterator[ModelEvent],
) -> tuple[list[ModelEvent], ProviderError]:
    """The items before ``stream`` failed, and its ProviderError."""
    received: list[ModelEvent] = []

    async def consume() -> None:
        async for event in stream:
            received.append(event)

    with pytest.raises(ProviderError) as caught:
        await consume()
    return received, caught.value


def assert_no_secret(*texts: str) -> None:
    """The API key appears in none of ``texts``."""
    for text in texts:
        assert API_KEY not in text
        assert "TOPSECRET" not in text
