"""A hub stream's own rules, without a broker: order, no duplicate, drop when full.

The hub hands every stream of a loop the same items; a stream skips what is at or
before its own position (a catch-up already gave it, or a cursor from a process
ahead of this hub), yields the cursor it would resume from, and is dropped, with
that cursor, when its queue is full.
"""

from __future__ import annotations

from uuid import uuid4

import pytest

from turnstream.content import TextChunk
from turnstream.events import Header, TokenDelta
from turnstream.kafka.client import Cursor, HubStream, StreamDropped, Streamed


class _Hub:
    """What a stream needs of its hub: to be forgotten."""

    def __init__(self) -> None:
        self.forgotten: list[HubStream] = []

    def forget(self, stream: HubStream) -> None:
        self.forgotten.append(stream)


def _delta(text: str, events: int, deltas: int) -> Streamed:
    event = TokenDelta(header=Header(), turn_index=1, chunk=TextChunk(text=text))
    return Streamed(event, Cursor(0, events, deltas, "d"))


def _stream(hub: _Hub, start: Cursor, queue: int = 10) -> HubStream:
    # A stub hub: the stream calls nothing but forget() on it.
    return HubStream(hub, uuid4(), start, None, queue)  # type: ignore[arg-type]


async def test_items_at_or_before_the_start_are_skipped() -> None:
    hub = _Hub()
    stream = _stream(hub, Cursor(0, 5, 3))
    for live in (_delta("a", 5, 2), _delta("b", 5, 3), _delta("c", 5, 4)):
        stream.offer(live)
    await stream.close()
    texts = []
    async for item in stream:
        assert isinstance(item, Streamed)
        assert isinstance(item.event, TokenDelta)
        assert isinstance(item.event.chunk, TextChunk)
        texts.append(item.event.chunk.text)
    assert texts == ["c"]
    assert stream.cursor == Cursor(0, 5, 4, "d")


async def test_a_stream_ahead_of_the_hub_yields_its_own_cursor() -> None:
    """Started at events 9 while the hub stands at 5: resuming must not go back."""
    hub = _Hub()
    stream = _stream(hub, Cursor(0, 9, 3))
    stream.offer(_delta("x", 5, 4))
    item = await anext(stream)
    assert item.cursor == Cursor(0, 9, 4, "d")


async def test_a_full_queue_drops_the_stream_with_its_resume_cursor() -> None:
    hub = _Hub()
    stream = _stream(hub, Cursor(0, 0, 0), queue=2)
    stream.offer(_delta("a", 0, 1))
    first = await anext(stream)
    for n in range(2, 5):
        stream.offer(_delta(str(n), 0, n))
    with pytest.raises(StreamDropped) as dropped:
        await anext(stream)
    assert dropped.value.cursor == first.cursor == Cursor(0, 0, 1, "d")
    assert hub.forgotten == [stream]
    assert dropped.value.kind == "stream_dropped"
