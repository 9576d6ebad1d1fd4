"""Record keys and headers shared by every turnstream topic.

Owns the key convention (every topic is keyed by loop id, written as the
UUID's canonical text in ASCII so people and other languages can read it),
the dead-letter headers, and :func:`dead_letter_id` (the stable pseudo command
id a dead letter resolves in the offset ledger). Pure: stdlib only; must not
import aiokafka, the runtime or the wire codec.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Final
from uuid import UUID

__all__ = [
    "DLQ_OFFSET",
    "DLQ_PARTITION",
    "DLQ_REASON",
    "DLQ_TOPIC",
    "dead_letter_headers",
    "dead_letter_id",
    "loop_key",
    "parse_loop_key",
]

DLQ_REASON: Final = "ts-dlq-reason"
DLQ_TOPIC: Final = "ts-dlq-topic"
DLQ_PARTITION: Final = "ts-dlq-partition"
DLQ_OFFSET: Final = "ts-dlq-offset"
_MAX_REASON = 512
_DLQ_NAMESPACE: Final = UUID("5d1c3c8e-8b0f-4a34-9a53-0f5c1d2b7e61")


def loop_key(loop_id: UUID) -> bytes:
    """The record key for ``loop_id`` (its canonical text, ASCII)."""
    return str(loop_id).encode("ascii")


def parse_loop_key(key: bytes | None) -> UUID | None:
    """The loop id a key names, or ``None`` for a missing or malformed key."""
    if not key or len(key) > 64:
        return None
    try:
        return UUID(key.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None


def dead_letter_headers(
    original: Sequence[tuple[str, bytes]],
    *,
    reason: str,
    topic: str,
    partition: int,
    offset: int,
) -> list[tuple[str, bytes]]:
    """The original headers plus where the record came from and why it failed.

    ``reason`` must already be safe to store (it comes from a typed error that
    never quotes payload bytes); it is cut to 512 characters.
    """
    return [
        *((name, value) for name, value in original if not name.startswith("ts-dlq-")),
        (DLQ_REASON, reason[:_MAX_REASON].encode("utf-8", "replace")),
        (DLQ_TOPIC, topic.encode("utf-8")),
        (DLQ_PARTITION, str(partition).encode("ascii")),
        (DLQ_OFFSET, str(offset).encode("ascii")),
    ]


def dead_letter_id(topic: str, partition: int, offset: int) -> UUID:
    """A stable id for the record at ``topic/partition/offset``."""
    return uuid.uuid5(_DLQ_NAMESPACE, f"{topic}/{partition}/{offset}")
