"""The codec's fast path for one event topic: generated writers and reader.

Owns :class:`FastPath`: for a topic's *current* schema, the frame prefix, one
generated writer per event class (:mod:`~turnstream.wire._accel.event_writer`) and
one generated reader of its frames (:mod:`~turnstream.wire._accel.event_reader`).
Both only ever answer for what they fully understand and return ``None``
otherwise, so the :class:`~turnstream.wire.Codec` runs its generic path
(``to_record``/``from_record`` and fastavro), which stays the authority for
every error and every older schema. Imports value types and the generators;
never fastavro.
"""

from __future__ import annotations

from turnstream.events import EventBase
from turnstream.wire._accel.event_reader import compile_event_reader
from turnstream.wire._accel.event_writer import compile_event_writers
from turnstream.wire.framing import HEADER_SIZE, frame
from turnstream.wire.schemas import TopicSchema

__all__ = ["FastPath"]


class FastPath:
    """Generated encode and decode of one topic's events.

    Args:
        schema: the topic's current (writer) schema, an event envelope.
        classes: the event classes the topic carries; others are not written
            here (the codec refuses them with its own typed error).
    """

    __slots__ = ("_prefix", "_reader", "writers")

    def __init__(
        self, schema: TopicSchema, classes: frozenset[type[EventBase]]
    ) -> None:
        self._prefix = frame(schema.fingerprint, b"")
        writers = compile_event_writers(schema.parsed, self._prefix)
        self.writers = {cls: fn for cls, fn in writers.items() if cls in classes}
        """Writer of whole frames, by exact event class."""
        self._reader = compile_event_reader(
            schema.parsed, HEADER_SIZE, frozenset(cls.__name__ for cls in classes)
        )

    def write(self, event: EventBase) -> bytes | None:
        """The frame of ``event``, or None when the generic path must write it."""
        writer = self.writers.get(type(event))
        if writer is None:
            return None
        try:
            return writer(event)
        except Exception:  # noqa: BLE001 - the generic path decides
            # The writer raises on anything it does not expect (a naive
            # datetime, an integer beyond a long, a subclass, ...); the
            # generic path writes the same bytes or names the error.
            return None

    def read(self, data: bytes) -> EventBase | None:
        """The event of a current-schema frame, or None for the generic path.

        Every failure (malformed input, a broken model rule, another
        fingerprint) is None: errors are the generic path's to raise.
        """
        if self._reader is None or data[:HEADER_SIZE] != self._prefix:
            return None
        try:
            return self._reader(data)
        except Exception:  # noqa: BLE001 - the generic path decides
            return None
