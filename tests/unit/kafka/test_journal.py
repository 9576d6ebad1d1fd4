"""The Kafka journal's bookkeeping, with the transactional writer faked out.

Pins when a state record is written (LoopStarted, TurnStarted, and every commit
that leaves the loop without an open turn), that nothing changes unless the writer
committed, what ``recover`` answers from memory and from an idle snapshot (no journal
read), and what a partition being handed over may still commit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest

from turnstream.content import AIMessage, TextBlock, UserMessage
from turnstream.events import (
    CancelReason,
    Cause,
    EnduringEvent,
    FailureInfo,
    FailureKind,
    Header,
    InputCancelled,
    LoopDeleted,
    LoopIdle,
    LoopStarted,
    RejectReason,
    StepDone,
    TurnDone,
    TurnFailed,
    TurnInterrupted,
    TurnRejected,
    TurnStarted,
)
from turnstream.ids import LoopId
from turnstream.kafka.actor.journal import PartitionJournal
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.faults import CommitFailedError, PartitionClosedError
from turnstream.kafka.reader import StateIndex
from turnstream.kafka.records import RESTORE_SNAPSHOT
from turnstream.kafka.state_records import split
from turnstream.runtime.effects import StagedRecord
from turnstream.state import LoopState
from turnstream.wire import default_codec

SESSION = uuid4()


class FakeWriter:
    """Records appends; ``fail`` makes the next append raise."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], LoopState | None]] = []
        self.added: list[tuple[str, list[UUID]]] = []
        self.erased: list[int] = []
        self.effects: list[StagedRecord] = []
        self.fail = False

    async def append(
        self,
        loop_id: UUID,
        events: Sequence[EnduringEvent],
        state: LoopState | None,
        *,
        on_commit: Callable[[LoopState | None], None] | None = None,
        added_ids: Sequence[UUID] = (),
        erase_history: int = 0,
        effects: Sequence[StagedRecord] = (),
    ) -> LoopState | None:
        self.effects.extend(effects)
        if self.fail:
            raise CommitFailedError(0, "boom", 1, retriable=True)
        self.calls.append(([e.type_name for e in events], state))
        self.added.append((events[0].type_name, list(added_ids)))
        self.erased.append(erase_history)
        written = (
            None
            if state is None
            else state.model_copy(update={"journal_offset": 10 * len(self.calls)})
        )
        if on_commit is not None:
            on_commit(written)
        return written


def journal_with(
    writer: FakeWriter, states: dict[UUID, LoopState] | None = None
) -> tuple[PartitionJournal, ServiceMetrics]:
    metrics = ServiceMetrics()
    journal = PartitionJournal(
        partition=0,
        writer=writer,  # type: ignore[arg-type]
        snapshots=StateIndex.of(default_codec(), (states or {}).values()),
        clients=None,  # type: ignore[arg-type] - never read in these tests
        codec=None,  # type: ignore[arg-type]
        events_topic="events",
        metrics=metrics,
    )
    return journal, metrics


def header(loop_id: UUID, **extra: Any) -> Header:
    return Header(
        event_id=uuid4(),
        session_id=SESSION,
        loop_id=loop_id,
        created_at=datetime.now(UTC),
        **extra,
    )


def turn(loop_id: UUID, index: int, command: UUID) -> tuple[UUID, list[EnduringEvent]]:
    turn_id = uuid4()
    answer = AIMessage(blocks=(TextBlock(text="a"),))
    return turn_id, [
        TurnStarted(
            header=header(loop_id, turn_id=turn_id, cause=Cause(command_id=command)),
            turn_index=index,
            message=UserMessage(blocks=(TextBlock(text="q"),)),
        ),
        StepDone(
            header=header(loop_id, turn_id=turn_id, step_id=uuid4()), messages=(answer,)
        ),
        TurnDone(
            header=header(loop_id, turn_id=turn_id), turn_index=index, message=answer
        ),
    ]


async def test_journal_writes_state_at_start_turn_start_and_when_closed() -> None:
    """StepDone inside a turn and a lone LoopIdle carry no state; the rest do."""
    writer = FakeWriter()
    journal, metrics = journal_with(writer)
    loop_id = LoopId(uuid4())
    command = uuid4()
    _, (started, step, done) = turn(loop_id, 1, command)
    for batch in (
        [LoopStarted(header=header(loop_id), model="m")],
        [started],
        [step],
        [done],
        [LoopIdle(header=header(loop_id))],
    ):
        await journal.append(loop_id, batch)
    written = [(names[0], state is not None) for names, state in writer.calls]
    assert written == [
        ("LoopStarted", True),
        ("TurnStarted", True),
        ("StepDone", False),
        ("TurnDone", True),
        ("LoopIdle", False),
    ]
    final = writer.calls[3][1]
    assert final is not None
    assert final.open_turn is None
    assert final.turn_index == 1
    assert len(final.messages) == 2  # the question and the committed step
    assert command in final.recent_command_ids
    assert writer.calls[1][1] is not None
    assert writer.calls[1][1].open_turn is not None
    assert journal.is_resolved(loop_id, command)
    assert metrics.turns_started == 1
    assert metrics.terminals["TurnDone"] == 1


async def test_journal_state_writes_carry_the_ids_answered_since_the_last() -> None:
    """A state write names the commands answered since the previous state write.

    Those are what its history record adds to the window of recent ids: the
    events committed without a state write in between count too.
    """
    writer = FakeWriter()
    journal, _ = journal_with(writer)
    loop_id = LoopId(uuid4())
    first, second = uuid4(), uuid4()
    _, (started, step, done) = turn(loop_id, 1, first)
    _, (started2, step2, done2) = turn(loop_id, 2, second)
    for batch in ([started], [step], [done], [started2, step2], [done2]):
        await journal.append(loop_id, batch)
    assert writer.added == [
        ("TurnStarted", [first]),
        ("StepDone", []),
        ("TurnDone", []),
        ("TurnStarted", [second]),
        ("TurnDone", []),
    ]


async def test_journal_recover_answers_from_memory_after_appends() -> None:
    """Events since the last state record are handed back with that state."""
    writer = FakeWriter()
    journal, _ = journal_with(writer)
    loop_id = LoopId(uuid4())
    _, (started, step, _done) = turn(loop_id, 1, uuid4())
    await journal.append(loop_id, [LoopStarted(header=header(loop_id), model="m")])
    await journal.append(loop_id, [started])
    await journal.append(loop_id, [step])
    recovery = await journal.recover(loop_id)
    assert recovery.snapshot is not None
    assert recovery.snapshot.journal_offset == 20  # written with TurnStarted
    assert [e.type_name for e in recovery.events] == ["StepDone"]


async def test_journal_failed_append_changes_nothing() -> None:
    """A commit that raised leaves the loop's committed view as it was."""
    writer = FakeWriter()
    journal, metrics = journal_with(writer)
    loop_id = LoopId(uuid4())
    await journal.append(loop_id, [LoopStarted(header=header(loop_id), model="m")])
    command = uuid4()
    _, (started, _step, _done) = turn(loop_id, 1, command)
    writer.fail = True
    with pytest.raises(CommitFailedError):
        await journal.append(loop_id, [started])
    assert not journal.is_resolved(loop_id, command)
    recovery = await journal.recover(loop_id)
    assert recovery.events == ()
    assert metrics.turns_started == 0


async def test_journal_idle_snapshot_restores_without_reading_the_journal() -> None:
    """An idle snapshot is complete: recover does not touch Kafka."""
    loop_id = LoopId(uuid4())
    resolved = uuid4()
    snapshot = LoopState(
        session_id=SESSION,
        loop_id=loop_id,
        turn_index=4,
        journal_offset=77,
        recent_command_ids=(resolved,),
    )
    journal, metrics = journal_with(FakeWriter(), {loop_id: snapshot})
    assert journal.known(loop_id)
    assert journal.open_turn_loops() == []
    recovery = await journal.recover(loop_id)
    assert recovery.snapshot == snapshot
    assert recovery.events == ()
    assert journal.is_resolved(loop_id, resolved)
    assert metrics.restores == {"snapshot": 1}
    unknown = LoopId(uuid4())
    assert not journal.known(unknown)
    assert (await journal.recover(unknown)).snapshot is None
    assert metrics.restores["new"] == 1


async def test_journal_open_or_oversized_snapshots_need_their_tail() -> None:
    """Open turns and replay markers (journal_offset -1) are restored eagerly."""
    open_loop, marker_loop, idle_loop = uuid4(), uuid4(), uuid4()
    states = {
        open_loop: LoopState(
            session_id=SESSION,
            loop_id=open_loop,
            turn_index=1,
            journal_offset=5,
            open_turn={"turn_id": uuid4(), "turn_index": 1},  # type: ignore[arg-type]
        ),
        marker_loop: LoopState(
            session_id=SESSION, loop_id=marker_loop, journal_offset=-1
        ),
        idle_loop: LoopState(session_id=SESSION, loop_id=idle_loop, journal_offset=9),
    }
    journal, _ = journal_with(FakeWriter(), states)
    assert sorted(journal.open_turn_loops()) == sorted([open_loop, marker_loop])


async def test_journal_handover_commits_only_the_end_of_running_turns() -> None:
    """While handing over: terminals and steps yes; cancellations and idles no."""
    writer = FakeWriter()
    journal, _ = journal_with(writer)
    loop_id = LoopId(uuid4())
    turn_id, (started, step, _done) = turn(loop_id, 1, uuid4())
    await journal.append(loop_id, [started])
    journal.close_for_handover()
    await journal.append(loop_id, [step])
    await journal.append(
        loop_id,
        [TurnInterrupted(header=header(loop_id, turn_id=turn_id), turn_index=1)],
    )
    refused = [
        [LoopIdle(header=header(loop_id))],
        [
            InputCancelled(
                header=header(
                    loop_id, turn_id=turn_id, cause=Cause(command_id=uuid4())
                ),
                reason=CancelReason.TURN_INTERRUPTED,
                message=UserMessage(blocks=(TextBlock(text="queued"),)),
                turn_index=1,
            )
        ],
    ]
    for events in refused:
        with pytest.raises(PartitionClosedError):
            await journal.append(loop_id, events)
    assert [names[0] for names, _ in writer.calls] == [
        "TurnStarted",
        "StepDone",
        "TurnInterrupted",
    ]


async def test_journal_drain_lets_running_turns_finish_but_starts_nothing() -> None:
    """While draining: a running turn's steps and terminal and LoopIdle commit; a
    new turn, a new loop, a rejection and a cancellation are refused (their inputs
    stay unanswered for the next owner)."""
    writer = FakeWriter()
    journal, _ = journal_with(writer)
    loop_id = LoopId(uuid4())
    turn_id, (started, step, done) = turn(loop_id, 1, uuid4())
    await journal.append(loop_id, [started])
    journal.close_for_drain()
    await journal.append(loop_id, [step])
    await journal.append(loop_id, [done])
    await journal.append(loop_id, [LoopIdle(header=header(loop_id))])
    _, (next_turn, _, _) = turn(loop_id, 2, uuid4())
    refused: list[list[EnduringEvent]] = [
        [next_turn],
        [LoopStarted(header=header(loop_id), model="demo")],
        [
            TurnRejected(
                header=header(loop_id, cause=Cause(command_id=uuid4())),
                reason=RejectReason.SHUTTING_DOWN,
            )
        ],
        [
            InputCancelled(
                header=header(
                    loop_id, turn_id=turn_id, cause=Cause(command_id=uuid4())
                ),
                reason=CancelReason.TURN_FAILED,
                message=UserMessage(blocks=(TextBlock(text="queued"),)),
                turn_index=1,
            )
        ],
    ]
    for events in refused:
        with pytest.raises(PartitionClosedError):
            await journal.append(loop_id, events)
    assert [names[0] for names, _ in writer.calls] == [
        "TurnStarted",
        "StepDone",
        "TurnDone",
        "LoopIdle",
    ]


def _turn_end_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    keys = ("loop_id", "turn_id", "outcome", "reason", "duration_s", "steps")
    return [
        {k: r.__dict__[k] for k in keys if k in r.__dict__}
        for r in caplog.records
        if r.name == "turnstream.kafka.actor.journal" and r.getMessage() == "turn ended"
    ]


async def test_journal_logs_one_line_per_turn_end_with_ids_outcome_and_steps(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each committed terminal logs once at INFO: ids, outcome, duration, steps.

    No content: neither the question nor the answer appears in the line.
    """
    caplog.set_level("INFO", logger="turnstream.kafka.actor.journal")
    writer = FakeWriter()
    journal, _ = journal_with(writer)
    loop_id = LoopId(uuid4())
    done_id, (started, step, done) = turn(loop_id, 1, uuid4())
    failed_id, (started2, step2, _) = turn(loop_id, 2, uuid4())
    start = started2.header.created_at
    assert start is not None
    failed = TurnFailed(
        header=header(loop_id, turn_id=failed_id).model_copy(
            update={"created_at": start + timedelta(seconds=2.5)}
        ),
        turn_index=2,
        error=FailureInfo(kind=FailureKind.TOOL_LIMIT, message="25 tool rounds"),
    )
    for batch in ([started], [step], [done], [started2], [step2, step2], [failed]):
        await journal.append(loop_id, batch)

    lines = _turn_end_lines(caplog)
    assert [line.pop("duration_s") >= 0 for line in lines[:1]] == [True]
    assert lines == [
        {
            "loop_id": str(loop_id),
            "turn_id": str(done_id),
            "outcome": "TurnDone",
            "steps": 1,
        },
        {
            "loop_id": str(loop_id),
            "turn_id": str(failed_id),
            "outcome": "TurnFailed",
            "reason": "tool_limit",
            "duration_s": 2.5,
            "steps": 2,
        },
    ]
    assert all(r.levelname == "INFO" for r in caplog.records)
    assert "25 tool rounds" not in caplog.text


async def test_journal_logs_an_interrupted_turn_started_elsewhere_without_duration(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A turn this owner did not see start still logs its end, with no duration."""
    caplog.set_level("INFO", logger="turnstream.kafka.actor.journal")
    writer = FakeWriter()
    journal, _ = journal_with(writer)
    loop_id = LoopId(uuid4())
    turn_id = uuid4()
    interrupted = TurnInterrupted(header=header(loop_id, turn_id=turn_id), turn_index=1)
    await journal.append(loop_id, [interrupted])
    assert _turn_end_lines(caplog) == [
        {
            "loop_id": str(loop_id),
            "turn_id": str(turn_id),
            "outcome": "TurnInterrupted",
            "steps": 0,
        }
    ]


async def test_journal_deletion_tombstones_every_stored_history_record() -> None:
    """LoopDeleted's state write erases every history record the partition
    held of the loop at the takeover -- an earlier lineage's beyond what its
    head names too -- and later writes of the deleted loop erase nothing.
    """
    codec = default_codec()
    loop_id = LoopId(uuid4())
    state = LoopState(
        session_id=SESSION,
        loop_id=loop_id,
        model="m",
        turn_index=1,
        messages=(
            UserMessage(blocks=(TextBlock(text="q"),)),
            AIMessage(blocks=(TextBlock(text="a"),)),
        ),
        journal_offset=5,
    )
    records = split(state, [])
    assert records.history is not None
    index = StateIndex(codec)
    index.put(loop_id, codec.marshal_state(records.head), RESTORE_SNAPSHOT)
    index.put_history(loop_id, 0, codec.marshal_state(records.history))
    for stale in (1, 2, 3):  # an earlier lineage's, past the head's count
        index.put_history(loop_id, stale, codec.marshal_state(records.history))
    writer = FakeWriter()
    journal = PartitionJournal(
        partition=0,
        writer=writer,  # type: ignore[arg-type]
        snapshots=index,
        clients=None,  # type: ignore[arg-type] - never read in this test
        codec=None,  # type: ignore[arg-type]
        events_topic="events",
        metrics=ServiceMetrics(),
    )
    recovery = await journal.recover(loop_id)
    assert recovery.snapshot is not None
    assert len(recovery.snapshot.messages) == 2
    delete = uuid4()
    await journal.append(
        loop_id, [LoopDeleted(header=header(loop_id, cause=Cause(command_id=delete)))]
    )
    late = uuid4()
    await journal.append(
        loop_id,
        [
            TurnRejected(
                header=header(loop_id, cause=Cause(command_id=late)),
                reason=RejectReason.LOOP_DELETED,
            )
        ],
    )
    assert writer.erased == [4, 0]
    written = [s for _names, s in writer.calls]
    assert all(s is not None and s.deleted and s.messages == () for s in written)
    assert journal.already_applied(loop_id, 0, delete)
