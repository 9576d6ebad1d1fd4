"""Effects a tool call stages as records, committed with the step that ran it.

Owns :class:`StagedRecord` (one record for a topic outside the loop's own),
:class:`EffectStage` (a call's staging buffer, behind
:meth:`~turnstream.runtime.ports.ToolContext.stage_record`) and
:func:`check_topic_name`. A tool whose effect *is* a record (an order event, a
notification request) stages it instead of sending it; the runtime hands the
records of every call that returned to the journal with the ``StepDone`` that
records those calls' results, in the same commit. On Kafka that commit is one
transaction, so a ``read_committed`` consumer sees the effect if and only if
it sees the step: a crash before the commit leaves neither, and a resumed turn
commits the step -- and its effects -- once.

Rules: a call that raises or times out has its staged records dropped (its
result is an error, nothing of it took effect); a call stages only while it
runs; a topic must be a legal Kafka topic name, and the journal may refuse
more (the Kafka journal refuses its own topic set). Pure: imports only the
error tree.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from turnstream.runtime.errors import EffectError

__all__ = [
    "MAX_STAGED_RECORDS",
    "EffectStage",
    "StagedRecord",
    "check_topic_name",
]

MAX_STAGED_RECORDS = 1000
"""Records one call may stage (a bound, not a target)."""

_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


def check_topic_name(topic: str) -> None:
    """Refuse a name Kafka would not accept as a topic.

    Raises:
        EffectError: ``invalid_topic``.
    """
    if not _TOPIC.fullmatch(topic) or topic in {".", ".."}:
        raise EffectError("invalid_topic")


@dataclass(frozen=True, slots=True, kw_only=True)
class StagedRecord:
    """One record a tool call staged: written with its step, or never.

    Attributes:
        topic: where it goes (a legal topic name, not the journal's own).
        key: the record key (also picks the partition); ``None``: none.
        value: the record value; ``None``: a tombstone.
        headers: record headers, in order.
    """

    topic: str
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


class EffectStage:
    """One call's staged records; only that call's task writes it.

    Args:
        check: the journal's own refusal of a topic (raises
            :class:`EffectError`), run when a record is staged.
    """

    def __init__(self, check: Callable[[str], None] | None = None) -> None:
        self._check = check
        self._records: list[StagedRecord] = []
        self._open = True

    @property
    def records(self) -> tuple[StagedRecord, ...]:
        """What the call staged, in order."""
        return tuple(self._records)

    def stage(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> None:
        """Add one record (see :meth:`ToolContext.stage_record`).

        Raises:
            EffectError: ``closed`` (the call is over), ``invalid_topic``,
                ``reserved_topic``, ``invalid_record`` or ``too_many``.
        """
        if not self._open:
            raise EffectError("closed")
        check_topic_name(topic)
        if self._check is not None:
            self._check(topic)
        if not (key is None or isinstance(key, bytes)) or not (
            value is None or isinstance(value, bytes)
        ):
            raise EffectError("invalid_record")
        pairs = tuple(headers)
        if not all(
            isinstance(name, str) and isinstance(data, bytes) for name, data in pairs
        ):
            raise EffectError("invalid_record")
        if len(self._records) >= MAX_STAGED_RECORDS:
            raise EffectError("too_many")
        self._records.append(
            StagedRecord(topic=topic, key=key, value=value, headers=pairs)
        )

    def close(self, *, keep: bool) -> tuple[StagedRecord, ...]:
        """End staging; the records to commit (none unless ``keep``)."""
        self._open = False
        if not keep:
            self._records.clear()
        return tuple(self._records)
