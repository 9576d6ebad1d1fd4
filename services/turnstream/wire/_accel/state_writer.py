"""Loop-state snapshots that encode each history message once.

Owns :class:`EncodedHistory` (one loop's memo: its history messages and recent
command ids with their encoded bytes) and :class:`StateWriter` (the
``LoopState`` writer of one writer schema, compiled in parts: runs of plain
fields, and the items of the two long arrays, ``messages`` and
``recent_command_ids``).

Why: a snapshot carries the loop's whole history, and the service writes one
at every turn's start and end. Encoding it from scratch made a turn's cost
grow with the conversation (about 2 ms per snapshot at 250 turns, 29 ms at
1,000, measured with ``bench/state_bench.py``, in git before 83e0b1f). History
messages are frozen and a fold only appends to the tuple, so the memo keeps
the bytes of the messages it has seen, matched by identity, and a snapshot
encodes only the messages added since the last one; the rest is copied. The
window of recent command ids (up to 1,024) is memoised by id the same way.

The bytes are exactly those of the generic writer: an Avro record is its
fields' encodings in order, and an array block is its count, its items'
encodings and a zero. ``tests/unit/wire/test_state_writer.py`` pins that.

With ``TURNSTREAM_CODEC=generic`` the codec writes every snapshot whole on
its generic path and leaves the memo untouched. Part of
``turnstream.wire._accel``; imports the record mappings and the compiled
writer, nothing of the runtime.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

from turnstream.content import Conversation
from turnstream.state import LoopState
from turnstream.wire import to_record
from turnstream.wire._accel import native_plan
from turnstream.wire._accel.compiled import Writer, compile_schema, write_long

__all__ = ["EncodedHistory", "StateWriter"]

_MESSAGES = "messages"
_IDS = "recent_command_ids"
_MEMOISED = (_MESSAGES, _IDS)


class EncodedHistory:
    """One loop's memo: its history messages and recent command ids, encoded.

    Held by whoever writes the loop's snapshots, one per loop, and touched by
    one task at a time. It never changes what is written, only how much of it
    is encoded again: a message is reused only while it is the very object
    encoded before, at the same position, for the same writer schema; a
    command id by its value (the window of recent ids slides, so positions
    move).
    """

    __slots__ = ("_encoded", "_fingerprint", "_ids", "_messages")

    def __init__(self) -> None:
        self._fingerprint = b""
        self._messages: tuple[Conversation, ...] = ()
        self._encoded: list[bytes] = []
        self._ids: dict[int, bytes] = {}

    @property
    def size(self) -> int:
        """Messages remembered."""
        return len(self._encoded)

    def _schema(self, fingerprint: bytes) -> None:
        if fingerprint != self._fingerprint:
            self._fingerprint, self._messages, self._encoded = fingerprint, (), []
            self._ids = {}

    def messages(
        self,
        fingerprint: bytes,
        messages: tuple[Conversation, ...],
        encode: Callable[[Conversation], bytes],
    ) -> Sequence[bytes]:
        """The encoded items of ``messages``, encoding only the unseen ones.

        Raises what ``encode`` raises; the memo is then left as it was.
        """
        self._schema(fingerprint)
        known = self._messages
        same = 0
        limit = min(len(known), len(messages))
        if all(map(operator.is_, known[:limit], messages)):
            same = limit  # the usual case, checked at C speed
        else:
            while known[same] is messages[same]:
                same += 1
        fresh = [encode(message) for message in messages[same:]]
        items = self._encoded[:same] if same < len(self._encoded) else self._encoded
        items += fresh
        self._messages, self._encoded = messages, items
        return items

    def ids(
        self, fingerprint: bytes, ids: tuple[UUID, ...], encode: Writer
    ) -> Sequence[bytes]:
        """The encoded items of ``ids``; the memo keeps only these afterwards."""
        self._schema(fingerprint)
        known = self._ids
        current: dict[int, bytes] = {}
        items = []
        for command_id in ids:
            key = command_id.int  # UUID.__hash__ is Python code; int's is not
            item = known.get(key)
            if item is None:
                buf = bytearray()
                encode(buf, command_id)
                item = bytes(buf)
            current[key] = item
            items.append(item)
        self._ids = current
        return items


class StateWriter:
    """Writes a ``LoopState`` body, its long arrays from an :class:`EncodedHistory`.

    Args:
        fingerprint: the writer schema's fingerprint (the memo is per schema).
        parsed: the parsed ``LoopState`` schema (named types inlined).
        native: encode history messages with the C plans where they are built.
    """

    def __init__(self, fingerprint: bytes, parsed: Any, *, native: bool = True) -> None:
        self.fingerprint = fingerprint
        # The fields in order, as runs of plainly compiled fields and the two
        # memoised arrays. One table of named types across all parts, compiled
        # in field order, so later fields can refer to types defined earlier.
        named: dict[str, Any] = {}
        self._parts: list[tuple[str, Writer]] = []
        # Set with the messages part, the only one that encodes messages.
        self._message: Writer
        self._native_message: native_plan.Plan | None = None
        run: list[Any] = []
        for field in parsed["fields"]:
            if field["name"] in _MEMOISED:
                self._flush(run, named)
                item = compile_schema(field["type"]["items"], named)
                self._parts.append((field["name"], item))
                if field["name"] == _MESSAGES:
                    self._message = item
                    self._native_message = (
                        native_plan.item_plan(parsed, field["type"]["items"])
                        if native
                        else None
                    )
            else:
                run.append(field)
        self._flush(run, named)

    def _encode_message(self, message: Conversation) -> bytes:
        # The native plan first (same bytes); whatever it declines, the
        # compiled writer writes or raises on.
        plan = self._native_message
        if plan is not None:
            # The snapshot's size is checked whole, by the codec.
            data = native_plan.write(plan, message, sys.maxsize)
            if data is not None:
                return data
        buf = bytearray()
        self._message(buf, to_record.message_branch(message))
        return bytes(buf)

    def _flush(self, run: list[Any], named: dict[str, Any]) -> None:
        if run:
            name = f"_StatePart{len(self._parts)}"
            part = {"type": "record", "name": name, "fields": list(run)}
            self._parts.append(("", compile_schema(part, named)))
            run.clear()

    def write(self, out: bytearray, state: LoopState, history: EncodedHistory) -> None:
        """Append ``state``'s body to ``out``.

        Raises:
            ValueError, TypeError, OverflowError, UnicodeError, KeyError: a value
                the schema cannot carry (the codec reports them).
        """
        record = to_record.loop_state_scalars(state)
        for name, writer in self._parts:
            if not name:
                writer(out, record)
                continue
            if name == _MESSAGES:
                items = history.messages(
                    self.fingerprint, state.messages, self._encode_message
                )
            else:
                items = history.ids(self.fingerprint, state.recent_command_ids, writer)
            if items:
                write_long(out, len(items))
                out += b"".join(items)
            out.append(0)
