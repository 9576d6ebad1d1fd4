"""SseDecoder: the event-stream rules, however the bytes are split."""

from __future__ import annotations

import pytest

from turnstream.models._sse import ProtocolFault, SseDecoder, SseEvent

STREAM = (
    b"\xef\xbb\xbf: a comment\r\n"
    b"event: message_start\r\n"
    b'data: {"a": "caf\xc3\xa9"}\r\n'
    b"\r\n"
    b"id: 7\rretry: 10\rdata:first\rdata:  second\r\r"
    b"data\n\n"
    b"unknown: x\n\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [
    SseEvent(event="message_start", data='{"a": "café"}'),
    SseEvent(event="message", data="first\n second"),
    SseEvent(event="message", data=""),
    SseEvent(event="message", data="[DONE]"),
]


def decode_with(decoder: SseDecoder, pieces: tuple[bytes, ...]) -> list[SseEvent]:
    events = [event for piece in pieces for event in decoder.feed(piece)]
    decoder.close()
    return events


def decode(*pieces: bytes) -> list[SseEvent]:
    return decode_with(SseDecoder(), pieces)


def test_sse_decodes_every_line_ending_and_field() -> None:
    """CRLF, CR and LF endings; comments, id/retry and unknown fields ignored;
    multi-line data joined with newlines; a BOM dropped."""
    assert decode(STREAM) == EXPECTED


@pytest.mark.parametrize("split", range(1, len(STREAM)))
def test_sse_decodes_the_same_wherever_the_bytes_split(split: int) -> None:
    """Inside a CRLF pair, a UTF-8 sequence or a field name: same events."""
    assert decode(STREAM[:split], STREAM[split:]) == EXPECTED


def test_sse_decodes_byte_by_byte() -> None:
    """One byte per read still yields the same events."""
    assert decode(*(STREAM[i : i + 1] for i in range(len(STREAM)))) == EXPECTED


def test_sse_drops_an_event_incomplete_at_eof() -> None:
    """Without its blank line an event is never dispatched."""
    assert decode(b"data: one\n\ndata: two\n") == [
        SseEvent(event="message", data="one")
    ]


def test_sse_rejects_invalid_utf8() -> None:
    """Bytes that are not UTF-8 are a malformed stream."""
    with pytest.raises(ProtocolFault, match="invalid UTF-8"):
        SseDecoder().feed(b"data: \xff\n\n")


def test_sse_rejects_a_stream_ending_inside_a_utf8_sequence() -> None:
    """A cut multi-byte character is reported at close."""
    decoder = SseDecoder()
    decoder.feed(b"data: caf\xc3")

    with pytest.raises(ProtocolFault, match="invalid UTF-8"):
        decoder.close()


@pytest.mark.parametrize(
    "pieces",
    [
        pytest.param((b"data: " + b"x" * 64,), id="one-long-line"),
        pytest.param(
            (b"data: " + b"x" * 40 + b"\n", b"data: " + b"y" * 40), id="lines"
        ),
    ],
)
def test_sse_bounds_the_event_size(pieces: tuple[bytes, ...]) -> None:
    """An event (or unterminated line) over the limit is refused."""
    decoder = SseDecoder(max_event_chars=64)

    with pytest.raises(ProtocolFault, match="event too large"):
        decode_with(decoder, pieces)
