"""The runtime's ``Journal`` port on Kafka, for the loops of one partition.

Owns :class:`PartitionJournal`: per loop, the committed state (the last state
written or restored, plus the events committed since, folded with the
runtime's :func:`~turnstream.runtime.fold.fold_loop` only when a state record
is due) and the ids of the commands it answered (to skip redelivered ones).
``append`` hands one commit to the partition's
:class:`~turnstream.kafka.actor.writer.PartitionWriter` (one transaction) and
changes nothing here unless it committed; ``recover`` answers from memory,
else from the loop's latest state record found at assignment (kept undecoded
until the loop's first command: :class:`~turnstream.kafka.reader.StateIndex`),
else from the journal.

When the loop's state is written: with ``LoopStarted``, with ``TurnStarted``,
and with every commit after which the loop has no open turn (a terminal, a
rejection or cancellation while idle) -- except a commit of only ``LoopIdle``,
which folds to nothing restore needs. Hence the invariant restore relies on: if
a loop's latest snapshot has no open turn (and a real ``journal_offset``),
nothing committed after it changes the loop's fold, so it is restored from the
snapshot alone; otherwise only the events after ``journal_offset`` are read (one
turn's worth). A snapshot with ``journal_offset == -1`` (too large to store)
means "replay the journal". Per turn that is two state writes (its start and
its terminal), each a small head plus a history record of what changed since
the previous write (:mod:`~turnstream.kafka.state_records`): the messages and
the ids of the commands answered since.

The commit of ``LoopDeleted`` writes the deleted loop's marker head and
tombstones every history record of the loop that may be stored: up to the
highest record number the takeover's index held of it (every lineage's, also
those past its head's count) or written since.

While the partition is being handed over (:meth:`PartitionJournal.close_for_handover`)
only what ends a running turn may still be committed; inputs that were merely
queued stay unanswered, so the next owner reads and runs them. While it drains
before a planned stop (:meth:`PartitionJournal.close_for_drain`) running turns
go on as usual, but nothing starts a turn or answers an input: those inputs too
are left for the next owner.

Part of ``turnstream.kafka``; imports the runtime's fold, inbox window and
ports (adapters sit above the runtime); from aiokafka only ``TopicPartition``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import InitVar, dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from aiokafka import TopicPartition

from turnstream.events import (
    EnduringEvent,
    GateResolved,
    InputCancelled,
    LoopDeleted,
    LoopIdle,
    LoopStarted,
    StepDone,
    TurnDone,
    TurnFailed,
    TurnInterrupted,
    TurnRejected,
    TurnStarted,
)
from turnstream.ids import CommandId, LoopId
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.actor.writer import PartitionWriter
from turnstream.kafka.clients import KafkaClients
from turnstream.kafka.faults import PartitionClosedError
from turnstream.kafka.reader import StateIndex, read_journal
from turnstream.runtime.effects import StagedRecord
from turnstream.runtime.fold import fold_loop
from turnstream.runtime.input_queue import SEEN_WINDOW, SeenCommands
from turnstream.runtime.ports import Recovery
from turnstream.runtime.progress import CommandProgress
from turnstream.state import LoopState
from turnstream.wire import Codec, EncodeError

__all__ = ["PartitionJournal"]

_log = logging.getLogger(__name__)

# What a partition being handed over may still commit: the end of a running
# turn (its truncated step, its terminal, its abandoned gates).
_HANDOVER_TYPES = (StepDone, TurnDone, TurnFailed, TurnInterrupted, GateResolved)

# What a draining partition refuses: starting a turn or a loop, and answering
# an input without running it (the next owner runs it instead).
_DRAIN_REFUSED = (LoopStarted, TurnStarted, TurnRejected, InputCancelled)


@dataclass(slots=True)
class _LoopView:
    """The committed side of one loop, as this partition's writer knows it."""

    base: LoopState | None
    unfolded: list[EnduringEvent] = field(default_factory=list)
    open_turn: bool = False
    resolved: SeenCommands = field(default_factory=SeenCommands)
    turn_started_at: datetime | None = None
    # How many history records of the loop may be stored (every lineage's):
    # what deleting the loop tombstones.
    history_records: int = 0


@dataclass(eq=False, repr=False, kw_only=True)
class PartitionJournal:
    """The ``Journal`` port for the loops whose commands land on one partition.

    Args:
        partition: the partition number shared by commands, events and loops.
        writer: the partition's transactional writer.
        snapshots: the latest state records the loops partition held at
            assignment (undecoded).
        clients: builds consumers for journal reads.
        codec: decodes journal records.
        events_topic: the journal topic.
        metrics: counters to update.
    """

    partition: int
    writer: PartitionWriter
    snapshots: StateIndex
    clients: KafkaClients
    codec: Codec
    events_topic: InitVar[str]
    metrics: ServiceMetrics
    _events_tp: TopicPartition = field(init=False)
    _views: dict[UUID, _LoopView] = field(init=False, default_factory=dict)
    # Parked loops with history records beyond their state's (an earlier
    # lineage's): kept so that a deletion still tombstones them.
    _stale_history: dict[UUID, int] = field(init=False, default_factory=dict)
    _handover: bool = field(init=False, default=False)
    _draining: bool = field(init=False, default=False)

    def __post_init__(self, events_topic: str) -> None:
        self._events_tp = TopicPartition(events_topic, self.partition)

    # ----------------------------------------------------------- queries

    def known(self, loop_id: UUID) -> bool:
        """Whether ``loop_id`` has committed anything on this partition."""
        return loop_id in self._views or self.snapshots.known(loop_id)

    def open_turn_loops(self) -> list[UUID]:
        """Loops whose latest snapshot has an open turn (or must be replayed)."""
        return [i for i in self.snapshots.tail_loops() if i not in self._views]

    def is_resolved(self, loop_id: UUID, command_id: UUID) -> bool:
        """Whether ``command_id`` was already answered durably for ``loop_id``.

        Only loops already recovered (or appended to) are consulted; call
        :meth:`recover` first for a loop seen for the first time.
        """
        view = self._views.get(loop_id)
        return view is not None and command_id in view.resolved

    def already_applied(self, loop_id: UUID, offset: int, command_id: UUID) -> bool:
        """Whether the command at ``offset`` already took effect for ``loop_id``.

        True for a command at or before the loop's durable mark of applied
        commands that is not a pending input (see
        :mod:`turnstream.runtime.progress`), and for a command answered since
        the snapshot or among the recently resolved ids (a client's retry).
        Only loops already recovered (or appended to) are consulted; call
        :meth:`recover` first for a loop seen for the first time.
        """
        view = self._views.get(loop_id)
        if view is None:
            return False
        if command_id in view.resolved:
            return True
        base = view.base
        return base is not None and CommandProgress(
            base.applied_command_offset, base.pending_command_offsets
        ).covers(offset)

    def parkable(self, loop_id: UUID) -> bool:
        """Whether ``loop_id`` is settled: idle, its latest state written."""
        view = self._views.get(loop_id)
        return (
            view is not None
            and view.base is not None
            and not view.open_turn
            and all(isinstance(e, LoopIdle) for e in view.unfolded)
        )

    def park(self, loop_id: UUID) -> bool:
        """Let go of a settled loop whose actor stopped; ``False`` if it is not.

        Its state goes back to the partition's state index, encoded, so its
        next command restores it from there: what stays in memory is bytes,
        not the decoded history (a ``LoopIdle`` committed since the state
        write changes nothing a restore needs).
        """
        if not self.parkable(loop_id):
            return False
        base = self._views[loop_id].base
        assert base is not None  # noqa: S101 - parkable() checked it
        try:
            self.snapshots.park(base)
        except EncodeError:
            return False
        view = self._views.pop(loop_id)
        if view.history_records > base.history_records:
            self._stale_history[loop_id] = view.history_records
        return True

    def check_effect_topic(self, topic: str) -> None:
        """Refuse a staged record for the topic set's own topics (``EffectTopics``).

        Raises:
            EffectError: ``reserved_topic``.
        """
        self.writer.check_effect_topic(topic)

    def close_for_handover(self) -> None:
        """From now on commit only what ends running turns (see module docstring)."""
        self._handover = True

    def close_for_drain(self) -> None:
        """From now on start no turn and answer no input (see module docstring)."""
        self._draining = True

    # ------------------------------------------------------- the Journal port

    async def append(
        self,
        loop_id: LoopId,
        events: Sequence[EnduringEvent],
        progress: CommandProgress | None = None,
        effects: Sequence[StagedRecord] = (),
    ) -> None:
        """Commit ``events`` in one transaction; raise if not committed.

        A state record written with them carries ``progress`` (else the last
        one stored), so the mark of applied commands moves atomically with the
        events that made it true. ``effects`` go in the same transaction.

        Raises:
            EffectError: an effect names a reserved topic (nothing is written).
        """
        if not events:
            return
        for effect in effects:
            self.check_effect_topic(effect.topic)
        if self._handover and not all(isinstance(e, _HANDOVER_TYPES) for e in events):
            raise PartitionClosedError(self.partition)
        if self._draining and any(isinstance(e, _DRAIN_REFUSED) for e in events):
            raise PartitionClosedError(self.partition)
        view = self._views.get(loop_id)
        if view is None:
            view = _LoopView(base=None)
            self._views[loop_id] = view
        open_after = view.open_turn
        for event in events:
            if isinstance(event, TurnStarted):
                open_after = True
            elif event.ends_turn():
                open_after = False
        opens = any(isinstance(e, LoopStarted | TurnStarted) for e in events)
        settles = not open_after and not all(isinstance(e, LoopIdle) for e in events)
        due = opens or settles
        state = fold_loop([*view.unfolded, *events], view.base) if due else None
        if state is not None and progress is not None:
            state = state.model_copy(
                update={
                    "applied_command_offset": progress.applied,
                    "pending_command_offsets": progress.pending,
                }
            )

        def committed(written: LoopState | None) -> None:
            # Runs for every committed append, even one whose caller stopped
            # waiting: the view always equals what Kafka holds.
            _log_turn_ends(loop_id, view, events)
            view.open_turn = open_after
            _remember(view, events)
            if written is not None:
                view.base, view.unfolded = written, []
                view.history_records = (
                    0
                    if written.deleted
                    else max(view.history_records, written.history_records)
                )
            else:
                view.unfolded.extend(events)
            self.metrics.committed(events)

        added = () if state is None else _replies([*view.unfolded, *events])
        erase = 0
        if state is not None and any(isinstance(e, LoopDeleted) for e in events):
            erase = max(view.history_records, _records(view.base))
        await self.writer.append(
            loop_id,
            events,
            state,
            on_commit=committed,
            added_ids=added,
            erase_history=erase,
            effects=effects,
        )

    async def recover(self, loop_id: LoopId) -> Recovery:
        """The loop's snapshot and the events after it (see module docstring).

        Raises:
            DecodeError: a journal record of the loop is not a valid event.
            TransportError: the journal could not be read in time.
        """
        view = self._views.get(loop_id)
        if view is not None:
            return Recovery(view.base, tuple(view.unfolded))
        snapshot = await self.snapshots.load(loop_id)
        origin = self.snapshots.take_trace_origin(loop_id)
        if snapshot is not None and snapshot.open_turn is not None:
            traces = self.writer.traces
            if traces is not None:
                traces.adopt(snapshot.open_turn.turn_id, origin)
        if snapshot is not None and snapshot.journal_offset >= 0:
            if snapshot.open_turn is None:
                events: list[EnduringEvent] = []
                how = "snapshot"
            else:
                tail = await read_journal(
                    self.clients,
                    self.codec,
                    self._events_tp,
                    start=snapshot.journal_offset,
                    loops=(loop_id,),
                )
                events = [entry.event for entry in tail]
                how = "snapshot+tail"
            base: LoopState | None = snapshot
        elif self.known(loop_id):
            history = await read_journal(
                self.clients, self.codec, self._events_tp, loops=(loop_id,)
            )
            events, base, how = [entry.event for entry in history], None, "replay"
        else:
            events, base, how = [], None, "new"
        self.metrics.restores[how] += 1
        view = _LoopView(
            base=base, unfolded=list(events), history_records=self._stored(loop_id)
        )
        if base is not None:
            view.resolved = _seen(base)
            view.open_turn = base.open_turn is not None
        self._keep_view(loop_id, view, events)
        return Recovery(base, tuple(events))

    def _keep_view(
        self, loop_id: UUID, view: _LoopView, events: Sequence[EnduringEvent]
    ) -> None:
        """Keep ``view`` of a recovered loop, ``events`` (its tail) folded in."""
        for event in events:
            if isinstance(event, TurnStarted):
                view.open_turn = True
            elif event.ends_turn():
                view.open_turn = False
        _remember(view, events)
        self._views[loop_id] = view
        self.snapshots.forget(loop_id)

    def _stored(self, loop_id: UUID) -> int:
        """How many history records of ``loop_id`` may be on the partition."""
        return max(
            self.snapshots.history_count(loop_id),
            self._stale_history.pop(loop_id, 0),
        )

    async def prefetch(self, loop_ids: Iterable[UUID]) -> dict[UUID, Recovery]:
        """Recover several loops with one scan of the journal tail.

        Used at assignment for the loops that need their tails (open turns):
        one read from the smallest ``journal_offset`` instead of one per loop.
        """
        wanted = [i for i in loop_ids if i not in self._views]
        snapshots = {i: await self.snapshots.load(i) for i in wanted}
        starts = [
            s.journal_offset
            for s in snapshots.values()
            if s is not None and s.journal_offset >= 0
        ]
        if len(wanted) > 1 and len(starts) == len(wanted):
            tail = await read_journal(
                self.clients,
                self.codec,
                self._events_tp,
                start=min(starts),
                loops=wanted,
            )
            for loop_id in wanted:
                snapshot = snapshots[loop_id]
                assert snapshot is not None  # noqa: S101 - every wanted loop has a start
                events = [
                    e.event
                    for e in tail
                    if e.loop_id == loop_id and e.offset >= snapshot.journal_offset
                ]
                view = _LoopView(
                    base=snapshot,
                    unfolded=events,
                    resolved=_seen(snapshot),
                    open_turn=snapshot.open_turn is not None,
                    history_records=self._stored(loop_id),
                )
                self._keep_view(loop_id, view, events)
                self.metrics.restores["snapshot+tail"] += 1
        return {i: await self.recover(LoopId(i)) for i in wanted}


def _records(state: LoopState | None) -> int:
    return 0 if state is None else state.history_records


def _seen(state: LoopState) -> SeenCommands:
    return SeenCommands((CommandId(c) for c in state.recent_command_ids), SEEN_WINDOW)


def _replies(events: Iterable[EnduringEvent]) -> list[UUID]:
    """The command ids ``events`` answer, in order (what the fold records)."""
    return [r for r in (e.reply_to() for e in events) if r is not None]


def _log_turn_ends(
    loop_id: LoopId, view: _LoopView, events: Sequence[EnduringEvent]
) -> None:
    """One INFO line per committed terminal: ids, outcome, duration, steps.

    Never content. Steps are the turn's ``StepDone`` events since its
    ``TurnStarted`` state write (all of them: that write is the last before the
    terminal); the duration is left out for a turn started under another owner.
    """
    seen = [*view.unfolded, *events]
    for event in events:
        if isinstance(event, TurnStarted):
            view.turn_started_at = event.header.created_at
            continue
        if not isinstance(event, TurnDone | TurnFailed | TurnInterrupted):
            continue
        turn_id = event.header.turn_id
        fields: dict[str, Any] = {
            "loop_id": str(loop_id),
            "turn_id": str(turn_id),
            "outcome": event.type_name,
            "steps": sum(
                1
                for e in seen
                if isinstance(e, StepDone) and e.header.turn_id == turn_id
            ),
        }
        if isinstance(event, TurnFailed):
            fields["reason"] = event.error.kind.value
        started, ended = view.turn_started_at, event.header.created_at
        if started is not None and ended is not None:
            fields["duration_s"] = round(max((ended - started).total_seconds(), 0), 3)
        view.turn_started_at = None
        _log.info("turn ended", extra=fields)


def _remember(view: _LoopView, events: Iterable[EnduringEvent]) -> None:
    for replied in _replies(events):
        view.resolved.add(CommandId(replied))
