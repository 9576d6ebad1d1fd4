"""The command-offset ledger: what is safe to commit for a commands partition."""

from __future__ import annotations

from uuid import uuid4

import pytest

from turnstream.kafka.actor.offsets import CommandOffsets


def test_offsets_nothing_read_means_nothing_to_commit() -> None:
    """Before any record, there is no committable offset."""
    ledger = CommandOffsets()
    assert ledger.committable() is None
    assert not ledger.needs_commit()


def test_offsets_processed_commands_advance_to_the_next_offset() -> None:
    """Processed commands (interrupts, duplicates) commit past themselves."""
    ledger = CommandOffsets()
    ledger.processed(4)
    ledger.processed(5)
    assert ledger.committable() == 6


def test_offsets_an_unanswered_input_holds_the_offset_back() -> None:
    """A queued input is re-read after a crash: the offset stops at it."""
    ledger = CommandOffsets()
    waiting = uuid4()
    ledger.processed(0)
    ledger.awaiting(1, waiting)
    ledger.processed(2)
    ledger.processed(3)
    assert ledger.committable() == 1
    ledger.resolve([waiting])
    assert ledger.committable() == 4


def test_offsets_the_answering_transaction_moves_the_offset_atomically() -> None:
    """``committable(resolving)`` counts answers inside the same transaction."""
    ledger = CommandOffsets()
    first, second = uuid4(), uuid4()
    ledger.awaiting(7, first)
    ledger.awaiting(9, second)
    assert ledger.committable([first]) == 9
    assert ledger.committable([first, second]) == 10
    assert ledger.committable() == 7  # nothing changed until resolve()


def test_offsets_the_smallest_unanswered_offset_wins() -> None:
    """Answers may come out of order across loops; the smallest pending holds."""
    ledger = CommandOffsets()
    a, b, c = uuid4(), uuid4(), uuid4()
    ledger.awaiting(1, a)
    ledger.awaiting(2, b)
    ledger.awaiting(3, c)
    ledger.resolve([b, c])
    assert ledger.committable() == 1
    assert ledger.pending == 1


def test_offsets_a_repeated_command_id_keeps_its_first_offset() -> None:
    """The same command read twice is answered once; the later copy is processed."""
    ledger = CommandOffsets()
    command = uuid4()
    ledger.awaiting(3, command)
    ledger.awaiting(8, command)
    assert ledger.committable() == 3
    ledger.resolve([command])
    assert ledger.committable() == 9


def test_offsets_needs_commit_compares_with_the_committed_offset() -> None:
    """An offsets-only transaction is due only when the target moved ahead."""
    ledger = CommandOffsets()
    ledger.processed(0)
    assert ledger.needs_commit()
    ledger.mark_committed(1)
    assert not ledger.needs_commit()
    ledger.mark_committed(0)  # never moves back
    assert ledger.committed == 1


def test_offsets_negative_offsets_are_refused() -> None:
    """Kafka offsets are never negative."""
    with pytest.raises(ValueError, match="negative"):
        CommandOffsets().processed(-1)


# --------------------------------------------------------------------------
# Property: the committable offset is the first unsettled one
# --------------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

# What happens to each offset, read in order: processed at once; an input that
# waits for its answer; a poison record whose dead letter is written; or one
# whose dead letter (full and bounded) is refused, so it is abandoned.
_FATES = st.sampled_from(["processed", "answered", "dead_lettered", "abandoned"])


@settings(max_examples=300, deadline=None)
@given(
    fates=st.lists(_FATES, min_size=1, max_size=40),
    order=st.randoms(use_true_random=False),
)
def test_offsets_committable_never_lags_a_settled_prefix(
    fates: list[str], order: object
) -> None:
    """Any interleaving of accepted, answered, dead-lettered and failed-to-dead-letter
    offsets: the committable offset is always the first unsettled offset (or the
    next one to read), so it never stays behind a settled one and never passes an
    unsettled one.
    """
    import random

    assert isinstance(order, random.Random)
    ledger = CommandOffsets()
    unsettled: dict[int, object] = {}
    for offset, fate in enumerate(fates):
        if fate == "processed":
            ledger.processed(offset)
            continue
        ident = uuid4()
        ledger.awaiting(offset, ident)  # an input, or a dead letter in flight
        unsettled[offset] = (fate, ident)
    settle = list(unsettled)
    order.shuffle(settle)
    settled: set[int] = set()

    def check() -> None:
        waiting = [o for o in unsettled if o not in settled]
        expected = min(waiting) if waiting else len(fates)
        assert ledger.committable() == expected
        assert ledger.pending == len(waiting)

    check()
    for offset in settle:
        fate, ident = unsettled[offset]  # type: ignore[misc]
        if fate == "abandoned":
            ledger.processed(offset)  # what PartitionWriter.note_abandoned does
        ledger.resolve([ident])  # type: ignore[list-item]
        settled.add(offset)
        check()
