"""Record keys, partitions and headers shared by every turnstream topic.

Owns the key convention (every topic is keyed by loop id, written as the
UUID's canonical text -- 36 lowercase ASCII characters -- so people and other
languages can read it), :func:`partition_for` (the partition a key belongs to:
Kafka's default partitioner, murmur2 of the key bytes as the Java client
computes it, so a Java or Go producer keyed by loop id agrees with ours), the
dead-letter headers -- full and bounded (:func:`bounded_dead_letter`, for a
record too large to dead-letter whole) -- and :func:`dead_letter_id` (the
stable pseudo command id a dead letter resolves in the offset ledger). Pure:
stdlib only; must not import aiokafka, the runtime or the wire codec.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from enum import StrEnum
from typing import Final
from uuid import UUID

__all__ = [
    "DLQ_KIND",
    "DLQ_OFFSET",
    "DLQ_PARTITION",
    "DLQ_REASON",
    "DLQ_SIZE",
    "DLQ_TOPIC",
    "DLQ_TRUNCATED",
    "HISTORY_POSITIONED",
    "PREFIX_BYTES",
    "RESTORE_SNAPSHOT",
    "RESTORE_TAIL",
    "STATE_HISTORY",
    "STATE_RESTORE",
    "DeadLetterKind",
    "bounded_dead_letter",
    "dead_letter_headers",
    "dead_letter_id",
    "loop_key",
    "murmur2",
    "parse_loop_key",
    "partition_for",
]

DLQ_REASON: Final = "ts-dlq-reason"
DLQ_KIND: Final = "ts-dlq-kind"
DLQ_TOPIC: Final = "ts-dlq-topic"
DLQ_PARTITION: Final = "ts-dlq-partition"
DLQ_OFFSET: Final = "ts-dlq-offset"
DLQ_SIZE: Final = "ts-dlq-size"
DLQ_TRUNCATED: Final = "ts-dlq-truncated"
STATE_RESTORE: Final = "ts-restore"
"""Header of a state record: what its loop needs when a new owner takes the
partition over, so a takeover classifies every loop without decoding one."""
RESTORE_SNAPSHOT: Final = b"snapshot"
"""The record alone restores its loop (no open turn): decoded on the loop's
next command, never at a takeover."""
RESTORE_TAIL: Final = b"tail"
"""An open turn, or a replay marker: the loop is restored at the takeover."""
STATE_HISTORY: Final = "ts-history"
"""Header of a head record saying how its history records are found."""
HISTORY_POSITIONED: Final = b"offsets"
"""The head names its history records' offsets (or has none): a takeover reads
heads only and fetches a loop's history records by position when it needs
them. A head without the header may need a scan of the history partition."""
PREFIX_BYTES: Final = 1024
"""How many leading bytes of a record a bounded dead letter keeps."""
_MAX_REASON = 512
_MAX_KEY = 64


class DeadLetterKind(StrEnum):
    """Why a command was dead-lettered (the ``ts-dlq-kind`` header)."""

    UNDECODABLE = "undecodable"
    """No value, not a command of this schema set."""
    BAD_KEY = "bad_key"
    """The key is not the canonical text of the command's loop id."""
    MISROUTED = "misrouted"
    """The key belongs to another partition than the one the record is on."""
    UNRESTORABLE = "unrestorable"
    """The command's loop cannot be restored from its journal."""


_DLQ_NAMESPACE: Final = UUID("5d1c3c8e-8b0f-4a34-9a53-0f5c1d2b7e61")


@functools.lru_cache(maxsize=65_536)
def loop_key(loop_id: UUID) -> bytes:
    """The record key for ``loop_id`` (its canonical text, ASCII).

    Remembered for the most recent loops: every record of a turn (~25 of
    them: deltas, events, states, offsets) is keyed, and ``str(UUID)`` costs
    more than the cache lookup.
    """
    return str(loop_id).encode("ascii")


def parse_loop_key(key: bytes | None) -> UUID | None:
    """The loop id a key names, or ``None`` for a missing or malformed key."""
    if not key or len(key) > 64:
        return None
    try:
        return UUID(key.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash of ``data`` as a signed 32-bit int (the Java client's)."""
    mask = 0xFFFFFFFF
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    tail = length % 4
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives ``key`` (positive murmur2)."""
    if partitions < 1:
        raise ValueError("a topic has at least one partition")
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def dead_letter_headers(
    original: Sequence[tuple[str, bytes]],
    *,
    reason: str,
    topic: str,
    partition: int,
    offset: int,
    kind: DeadLetterKind = DeadLetterKind.UNDECODABLE,
) -> list[tuple[str, bytes]]:
    """The original headers plus where the record came from and why it failed.

    ``reason`` must already be safe to store (it comes from a typed error that
    never quotes payload bytes); it is cut to 512 characters.
    """
    return [
        *((name, value) for name, value in original if not name.startswith("ts-dlq-")),
        (DLQ_KIND, kind.value.encode("ascii")),
        (DLQ_REASON, reason[:_MAX_REASON].encode("utf-8", "replace")),
        (DLQ_TOPIC, topic.encode("utf-8")),
        (DLQ_PARTITION, str(partition).encode("ascii")),
        (DLQ_OFFSET, str(offset).encode("ascii")),
    ]


def bounded_dead_letter(
    *,
    key: bytes | None,
    value: bytes,
    reason: str,
    kind: DeadLetterKind,
    topic: str,
    partition: int,
    offset: int,
) -> tuple[bytes | None, bytes, list[tuple[str, bytes]]]:
    """A dead letter that fits any topic: key, value prefix and headers, bounded.

    For a record whose full dead letter (value plus original headers) is larger
    than the dead-letter topic accepts: it keeps the first
    :data:`PREFIX_BYTES` of the value, at most 64 bytes of the key, none of the
    original headers, and says so (``ts-dlq-truncated``, ``ts-dlq-size``).

    Returns:
        ``(key, value, headers)`` to write.
    """
    headers = [
        *dead_letter_headers(
            (),
            reason=reason,
            topic=topic,
            partition=partition,
            offset=offset,
            kind=kind,
        ),
        (DLQ_SIZE, str(len(value)).encode("ascii")),
        (DLQ_TRUNCATED, b"true"),
    ]
    return (None if key is None else key[:_MAX_KEY]), value[:PREFIX_BYTES], headers


def dead_letter_id(topic: str, partition: int, offset: int) -> UUID:
    """A stable id for the record at ``topic/partition/offset``."""
    return uuid.uuid5(_DLQ_NAMESPACE, f"{topic}/{partition}/{offset}")
