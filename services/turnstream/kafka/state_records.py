"""How a loop's state is laid out on the compacted loops topic: a head and its history.

Owns :func:`split` (what one state write sends) and :func:`assemble` (the
state a reader rebuilds). A loop's state is written as

* one **head** record, keyed by the loop id: every field of
  :class:`~turnstream.state.LoopState` but the history (``messages`` and
  ``recent_command_ids`` empty), with ``history_length`` (messages in the
  history) and ``history_records`` (how many history records hold them);
* **history records**, keyed ``<loop id>/<n>`` (n = 0, 1, ...): each holds
  the messages and resolved command ids that one state write added, with
  ``history_start`` (the position of its first message); its other fields
  repeat the head it was written with.

Each head also says where its history records are in the history partition
(``history_first_offset`` and ``history_last_offset``) and each history record
where the one before it is (``history_previous_offset``), so a reader fetches a
loop's records by position -- one range read, or a walk back from the last --
instead of scanning the partition for their keys: a takeover reads the heads
only (:meth:`StateRecords.placed` fills the offsets in once the writer knows
where the new record lands). ``-1`` means not known: the reader falls back to
finding the records by key.

So a write costs what changed since the previous one, never the whole
conversation: a turn's two writes carry its input, its steps' messages and
two small heads. Every record of one write is in one transaction with the
events that made it true, and compaction keeps every history record (each
key is written once per lineage) and the latest head.

A **deleted** loop (``LoopState.deleted``, after ``LoopDeleted``) is written
as its head alone, a small *deleted marker* without history
(``history_length`` and ``history_records`` 0): every later owner finds it
and refuses the loop's input. The write that commits ``LoopDeleted`` also
tombstones the loop's history records (:func:`erased_history_keys`), so
compaction removes them; the marker replaces the last head.

A *lineage* starts at position 0 whenever the writer does not know what is
already stored (a loop restored by replaying its journal, or from a record
written before this layout, whose ``history_length`` is ``-1``): its first
history record then holds the whole history and the window of recent command
ids, and any older history records past the head's count are ignored.
Histories only grow, so a stale record can never be mistaken for a newer one.

Pure: imports value types and the runtime's window of recent command ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from uuid import UUID

from turnstream.content import Conversation
from turnstream.runtime.input_queue import SEEN_WINDOW
from turnstream.state import LoopState

__all__ = [
    "StateRecords",
    "assemble",
    "deleted_marker",
    "erased_history_keys",
    "history_key",
    "parse_history_key",
    "split",
]

_SEPARATOR = "/"


@dataclass(frozen=True, slots=True)
class StateRecords:
    """What one state write sends, and what its writer keeps.

    Attributes:
        head: the head record's value.
        history: the history record this write adds (``None``: nothing new),
            stored under ``history_key(loop_id, head.history_records - 1)``.
        kept: the whole state with its layout fields brought up to date (what
            the loop's owner folds its next events onto).
    """

    head: LoopState
    history: LoopState | None
    kept: LoopState

    def placed(self, offset: int) -> StateRecords:
        """The records once the history record's offset is known.

        The head and the kept state name ``offset`` as the last history
        record (and as the first one when it starts a lineage).
        """
        if self.history is None:
            return self
        starts = self.history.history_records == 1
        update = {
            "history_last_offset": offset,
            "history_first_offset": (
                offset if starts else self.kept.history_first_offset
            ),
        }
        return StateRecords(
            self.head.model_copy(update=update),
            self.history,
            self.kept.model_copy(update=update),
        )


def split(state: LoopState, added_ids: Sequence[UUID]) -> StateRecords:
    """The records of one write of ``state``.

    Args:
        state: the loop's whole state; its ``history_length`` and
            ``history_records`` say what earlier writes already stored.
        added_ids: the command ids resolved since the previous write, in the
            order the fold appended them to ``recent_command_ids``.
    """
    if state.deleted:
        marker = deleted_marker(state)
        return StateRecords(marker, None, marker)
    stored = state.history_length
    previous = state.history_last_offset
    if 0 <= stored <= len(state.messages):
        start, count, ids = stored, state.history_records, tuple(added_ids)
    else:  # a new lineage: the whole history and window in record 0
        start, count, ids, previous = 0, 0, state.recent_command_ids, -1
    added = state.messages[start:]
    total = len(state.messages)
    history = None
    if added or ids:
        count += 1
        history = state.model_copy(
            update={
                "messages": added,
                "recent_command_ids": ids,
                "history_length": total,
                "history_records": count,
                "history_start": start,
                "history_first_offset": -1,
                "history_last_offset": -1,
                "history_previous_offset": previous if count > 1 else -1,
            }
        )
    layout: dict[str, int] = {
        "history_length": total,
        "history_records": count,
        "history_start": 0,
        "history_previous_offset": -1,
    }
    if count == 0 or (history is not None and count == 1):  # a lineage starts
        layout |= {"history_first_offset": -1, "history_last_offset": -1}
    head = state.model_copy(update={"messages": (), "recent_command_ids": (), **layout})
    return StateRecords(head, history, state.model_copy(update=layout))


def deleted_marker(state: LoopState) -> LoopState:
    """The head record of a deleted loop: who it was, nothing it said."""
    return state.model_copy(
        update={
            "messages": (),
            "recent_command_ids": (),
            "open_turn": None,
            "deleted": True,
            "stopped": True,
            "history_length": 0,
            "history_records": 0,
            "history_start": 0,
            "history_first_offset": -1,
            "history_last_offset": -1,
            "history_previous_offset": -1,
        }
    )


def erased_history_keys(loop_id: UUID, records: int) -> list[bytes]:
    """The keys of ``loop_id``'s history records ``0 .. records - 1``.

    Tombstoned (value ``None``) by the write that deletes the loop.
    """
    return [history_key(loop_id, number) for number in range(records)]


def assemble(head: LoopState, history: Mapping[int, LoopState]) -> LoopState | None:
    """The whole state from a head and the loop's history records by number.

    Returns ``None`` when the records the head names are missing or do not
    line up (the loop is then replayed from its journal).
    """
    if head.history_length < 0:
        return head  # written before this layout: the record is whole
    messages: list[Conversation] = []
    recent: tuple[UUID, ...] = ()
    for number in range(head.history_records):
        record = history.get(number)
        if (
            record is None
            or record.loop_id != head.loop_id
            or record.history_start != len(messages)
        ):
            return None
        messages.extend(record.messages)
        # As the fold does, write by write: dedupe, keep the newest window.
        ids = dict.fromkeys((*recent, *record.recent_command_ids))
        recent = tuple(ids)[-SEEN_WINDOW:]
    if len(messages) != head.history_length:
        return None
    return head.model_copy(
        update={"messages": tuple(messages), "recent_command_ids": recent}
    )


def history_key(loop_id: UUID, number: int) -> bytes:
    """The key of ``loop_id``'s history record ``number``."""
    return f"{loop_id}{_SEPARATOR}{number}".encode("ascii")


def parse_history_key(key: bytes | None) -> tuple[UUID, int] | None:
    """The loop and number a history record's key names (``None``: not one)."""
    if not key or len(key) > 64:
        return None
    try:
        loop, _, number = key.decode("ascii").partition(_SEPARATOR)
        if not number.isdigit():
            return None
        return UUID(loop), int(number)
    except (UnicodeDecodeError, ValueError):
        return None
