"""Stopping a client: bounded, and only a real cancellation propagates."""

from __future__ import annotations

import asyncio

import pytest

from turnstream.kafka.clients import stop_client


class _InnerClient:
    def __init__(self) -> None:
        self.closed = False

    async def close(self) -> None:
        self.closed = True


class _StrayCancelConsumer:
    """Stops like aiokafka's consumer during an outage: a cancelled inner
    fetch is awaited unguarded, so its ``CancelledError`` escapes ``stop``."""

    def __init__(self) -> None:
        self._client = _InnerClient()

    async def stop(self) -> None:
        inner = asyncio.create_task(asyncio.sleep(10))
        await asyncio.sleep(0)
        inner.cancel()
        await inner


async def test_stop_client_survives_a_cancelled_inner_task() -> None:
    """A CancelledError not aimed at the caller is a failed stop, not an exit."""
    consumer = _StrayCancelConsumer()
    await stop_client(consumer, seconds=5)
    assert consumer._client.closed


async def test_stop_client_lets_the_callers_cancellation_through() -> None:
    """Cancelling the task that stops a client still cancels it."""
    started = asyncio.Event()

    class _Slow:
        async def stop(self) -> None:
            started.set()
            await asyncio.sleep(10)

    task = asyncio.create_task(stop_client(_Slow(), seconds=30))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
