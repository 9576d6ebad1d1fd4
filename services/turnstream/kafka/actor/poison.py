"""Poison command records: which records must not run, and their dead letters.

Owns :class:`Poison`, :func:`check_command` (a record runs only if it decodes
to a command, is keyed by the canonical text of that command's loop id, and
sits on the partition that key belongs to -- anything else would give a loop a
second writer or a second spelling of itself) and :func:`dead_letter` (the
full record; if the dead-letter topic refuses it as it is, a bounded one; if
even that is refused, the offset is given up and counted, so a poison record
never holds the committed offset). Every record settled so is logged once,
with its partition, offset and reason, never its content; the lines are
rate-limited per process (a burst, then one per interval carrying how many
were held back). Used by the partition runner; imports the writer, the shared
record helpers and the wire codec.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from turnstream.commands import AnyCommand
from turnstream.errors import DecodeError, TransportError
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.actor.writer import PartitionWriter
from turnstream.kafka.faults import CommitFailedError
from turnstream.kafka.records import (
    DeadLetterKind,
    bounded_dead_letter,
    dead_letter_headers,
    dead_letter_id,
    loop_key,
    parse_loop_key,
    partition_for,
)
from turnstream.wire import Codec

__all__ = ["Poison", "check_command", "dead_letter"]

_log = logging.getLogger(__name__)


class DeadLetterLog:
    """One warning per dead letter, at most ``burst`` per ``interval`` seconds.

    Lines beyond that are held back and counted; the next line let through
    carries ``suppressed=N``.
    """

    def __init__(
        self,
        *,
        burst: int = 20,
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._burst = burst
        self._interval = interval
        self._clock = clock
        self._window = -interval
        self._sent = 0
        self._held = 0

    def note(
        self, *, topic: str, partition: int, offset: int, kind: DeadLetterKind
    ) -> None:
        """Log one dead-lettered record (no key, value or reason text)."""
        now = self._clock()
        if now - self._window >= self._interval:
            self._window, self._sent = now, 0
        if self._sent >= self._burst:
            self._held += 1
            return
        self._sent += 1
        extra: dict[str, object] = {
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "reason": kind.value,
        }
        if self._held:
            extra["suppressed"] = self._held
            self._held = 0
        _log.warning("record dead-lettered", extra=extra)


_DEAD_LETTER_LOG = DeadLetterLog()


class Poison(Exception):
    """A record that must not run: why, as a dead-letter kind and reason."""

    def __init__(self, kind: DeadLetterKind, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


def check_command(codec: Codec, record: Any, partitions: int) -> AnyCommand:
    """The record's command, checked against its key and partition.

    A command runs only on the partition its loop's key belongs to, keyed by the
    canonical text of its loop id: anything else would give the loop a second
    writer (another partition's owner) or a second spelling of itself.

    Raises:
        Poison: no value, not a command, a key that is not the canonical
            text of the command's loop id, or a record on another partition.
    """
    if record.value is None:
        raise Poison(DeadLetterKind.UNDECODABLE, "the record has no value")
    try:
        command = codec.unmarshal_command(record.value)
    except DecodeError as exc:
        raise Poison(DeadLetterKind.UNDECODABLE, str(exc)) from None
    key = loop_key(command.loop_id)
    if record.key != key:
        named = parse_loop_key(record.key)
        reason = (
            "the record key does not name its loop"
            if named != command.loop_id
            else "the record key is not the canonical (lowercase) text of its loop id"
        )
        raise Poison(DeadLetterKind.BAD_KEY, f"bad_key: {reason}")
    home = partition_for(key, partitions)
    if home != record.partition:
        raise Poison(
            DeadLetterKind.MISROUTED,
            f"misrouted: the loop's key belongs to partition {home}, "
            f"the record was on {record.partition}",
        )
    return command


async def dead_letter(
    writer: PartitionWriter,
    metrics: ServiceMetrics,
    record: Any,
    *,
    kind: DeadLetterKind,
    reason: str,
    topic: str,
    partition: int,
) -> bool:
    """Dead-letter ``record``; ``False`` if a transient failure left it unsettled.

    The full record first; if the dead-letter topic refuses it as it is (too
    large), a bounded one (reason, size, offset, key, a prefix of the bytes);
    if even that is refused, the offset is given up (``dead_letters_dropped``).
    On ``False`` the caller rebuilds the partition, so the record is read again.
    """
    value = record.value or b""
    record_id = dead_letter_id(topic, partition, record.offset)
    where = {"topic": topic, "partition": partition, "offset": record.offset}
    full = (
        record.key,
        value,
        dead_letter_headers(
            list(record.headers or ()), reason=reason, kind=kind, **where
        ),
    )
    bounded = bounded_dead_letter(
        key=record.key, value=value, reason=reason, kind=kind, **where
    )
    for attempt, (key, body, headers) in enumerate((full, bounded)):
        try:
            await writer.dead_letter(
                key=key,
                value=body,
                headers=headers,
                offset=record.offset,
                record_id=record_id,
            )
        except CommitFailedError as exc:
            if exc.is_retriable:
                return False
            _log.warning(
                "dead letter refused; writing a bounded one"
                if attempt == 0
                else "bounded dead letter refused; the record is dropped",
                extra={**where, "cause": exc.cause, "bytes": len(value)},
            )
            continue
        except TransportError:
            return False
        if attempt == 1:
            metrics.dead_letters_truncated += 1
        _DEAD_LETTER_LOG.note(**where, kind=kind)
        return True
    # Refused even bounded: the offset must not hold the partition.
    metrics.dead_letters_dropped += 1
    writer.note_abandoned(record.offset, record_id)
    _DEAD_LETTER_LOG.note(**where, kind=kind)
    return True
