"""Server-sent events decoding and the adapters' internal fault.

Owns :class:`SseDecoder` (bytes in, complete :class:`SseEvent` values out, per
the WHATWG event-stream rules), :class:`ProtocolFault` and
:func:`bounded_reason`. ProtocolFault is the one exception the request mappers
and stream parsers raise; the transport turns it into
:class:`turnstream.errors.ProviderError` at a single boundary, where secrets
are redacted. Pure: stdlib only; must not import httpx, aiokafka, fastavro or
faust.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

__all__ = [
    "DEFAULT_MAX_EVENT_CHARS",
    "MAX_REASON_CHARS",
    "ProtocolFault",
    "SseDecoder",
    "SseEvent",
    "bounded_reason",
]

# One event (or one unterminated line) larger than this is refused: a provider
# never sends multi-megabyte deltas, and an unbounded buffer is a memory hazard.
DEFAULT_MAX_EVENT_CHARS = 8 * 1024 * 1024

MAX_REASON_CHARS = 200
"""Longest provider error message carried into a fault's reason."""

_EOL = re.compile(r"\r\n|\r|\n")


class ProtocolFault(Exception):
    """A request that cannot be mapped or a stream that breaks the protocol.

    ``reason`` is short and fixed-form (never request or response content
    beyond a provider's bounded error message); ``status`` is an HTTP status
    when the provider gave one.
    """

    def __init__(self, reason: str, status: int | None = None) -> None:
        self.reason = reason
        self.status = status
        super().__init__(reason)


def bounded_reason(text: str) -> str:
    """``text`` on one printable line of at most :data:`MAX_REASON_CHARS`."""
    line = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    if len(line) > MAX_REASON_CHARS:
        return line[: MAX_REASON_CHARS - 1] + "…"
    return line


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One dispatched event: its type (``"message"`` by default) and data."""

    event: str
    data: str


class SseDecoder:
    """Incremental event-stream decoder.

    Accepts bytes split anywhere (inside a line, a CRLF pair or a UTF-8
    sequence). ``id`` and ``retry`` fields and comments are ignored; an event
    still incomplete at end of input is dropped, as the standard requires, so a
    cut stream can never yield a half-received event.
    """

    def __init__(self, *, max_event_chars: int = DEFAULT_MAX_EVENT_CHARS) -> None:
        self._max = max_event_chars
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="strict")
        self._pending = ""
        self._at_start = True
        self._event = ""
        self._data: list[str] = []
        self._size = 0

    def feed(self, data: bytes) -> list[SseEvent]:
        """Decode ``data`` and return the events it completes.

        Raises:
            ProtocolFault: invalid UTF-8, or an event over the size limit.
        """
        try:
            text = self._utf8.decode(data)
        except UnicodeDecodeError:
            raise ProtocolFault("malformed stream (invalid UTF-8)") from None
        if self._at_start and text:
            self._at_start = False
            text = text.removeprefix("\ufeff")
        buf = self._pending + text
        events: list[SseEvent] = []
        start = 0
        while (match := _EOL.search(buf, start)) is not None:
            # A CR at the very end may be the first half of a CRLF pair.
            if match.group() == "\r" and match.end() == len(buf):
                break
            event = self._line(buf[start : match.start()])
            if event is not None:
                events.append(event)
            start = match.end()
        self._pending = buf[start:]
        if len(self._pending) + self._size > self._max:
            raise ProtocolFault("malformed stream (event too large)")
        return events

    def close(self) -> None:
        """Mark the end of input.

        Raises:
            ProtocolFault: the input ended inside a UTF-8 sequence.
        """
        try:
            self._utf8.decode(b"", final=True)
        except UnicodeDecodeError:
            raise ProtocolFault("malformed stream (invalid UTF-8)") from None

    def _line(self, line: str) -> SseEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        field, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
            self._size += len(value) + 1
        elif field == "event":
            self._event = value
        return None

    def _dispatch(self) -> SseEvent | None:
        event = (
            SseEvent(event=self._event or "message", data="\n".join(self._data))
            if self._data
            else None
        )
        self._event = ""
        self._data = []
        self._size = 0
        return event
