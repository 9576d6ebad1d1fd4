"""One transaction of a partition writer: what it sends, and how it commits.

Owns :class:`TransactionBuilder`, the partition's transactional producer and
the body of each of its transactions, and the requests a transaction carries
(:class:`Append`, :class:`DeadLetter`). A transaction holds, in arrival order,
each request's events (to ``events``, explicit partition) or dead letter, the
records its steps' tool calls staged (to their own topics, by key), each
requested state record -- written as a head and a history record
(:mod:`~turnstream.kafka.state_records`), on offsets predicted from the
previous commit when known
(:class:`~turnstream.kafka.actor.offset_prediction.OffsetPrediction`) -- and
``send_offsets_to_transaction`` with the committable command offset. What a
failed transaction means, and what is done about it, is the writer's
(:mod:`~turnstream.kafka.actor.writer`); :attr:`TransactionBuilder.phase`
tells it how far the transaction got.

Part of ``turnstream.kafka`` (the only aiokafka importer). Imports the wire
codec to encode state records.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final
from uuid import UUID

from aiokafka import TopicPartition

from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.actor.offset_prediction import (
    OffsetPrediction,
    offset_ranges,
    planned_ranges,
)
from turnstream.kafka.actor.offsets import CommandOffsets
from turnstream.kafka.reader import head_headers
from turnstream.kafka.records import loop_key
from turnstream.kafka.state_records import (
    StateRecords,
    erased_history_keys,
    history_key,
    split,
)
from turnstream.kafka.topology import TopicNames
from turnstream.runtime.effects import StagedRecord
from turnstream.runtime.tracing import TraceContexts
from turnstream.state import LoopState
from turnstream.wire import Codec, EncodeError

__all__ = [
    "Append",
    "DeadLetter",
    "MemberCancelled",
    "Mispredicted",
    "Outcome",
    "Phase",
    "Request",
    "TransactionBuilder",
    "gather_all",
    "resolves",
]

_STATE_OVERHEAD: Final = 1024


def _reply() -> asyncio.Future[LoopState | None]:
    # Made when the request is: inside the writer's running loop.
    return asyncio.get_running_loop().create_future()


@dataclass(slots=True, kw_only=True, eq=False)
class Append:
    """One ``PartitionWriter.append``: a loop's events (and state)."""

    loop_id: UUID
    payloads: tuple[tuple[bytes, list[tuple[str, bytes]]], ...]
    state: LoopState | None
    resolves: tuple[UUID, ...]
    reply: asyncio.Future[LoopState | None] = field(default_factory=_reply)
    started: float = field(default_factory=time.monotonic)
    on_commit: Callable[[LoopState | None], None] | None = None
    added_ids: tuple[UUID, ...] = ()
    erase_history: int = 0
    effects: tuple[StagedRecord, ...] = ()


@dataclass(slots=True, kw_only=True, eq=False)
class DeadLetter:
    """One ``PartitionWriter.dead_letter``: an undecodable command."""

    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]
    resolves: UUID
    reply: asyncio.Future[LoopState | None] = field(default_factory=_reply)
    started: float = field(default_factory=time.monotonic)


Request = Append | DeadLetter


class Phase(StrEnum):
    """How far the current transaction got."""

    IDLE = "idle"
    OPEN = "open"
    COMMITTING = "committing"


@dataclass(slots=True)
class Outcome:
    """What a transaction wrote, and a record to probe its commit with."""

    states: dict[int, LoopState] = field(default_factory=dict)
    offset: int | None = None
    probe: TopicPartition | None = None
    probe_offset: int | None = None


@dataclass(slots=True)
class SentStates:
    """What :meth:`TransactionBuilder._send_states` handed to the producer."""

    history: list[asyncio.Future[Any]] = field(default_factory=list)
    planned_history: list[int] = field(default_factory=list)
    erased: list[asyncio.Future[Any]] = field(default_factory=list)
    futures: list[asyncio.Future[Any]] = field(default_factory=list)


class MemberCancelled(Exception):
    """A request's caller gave up before the commit: retry without it."""


class Mispredicted(Exception):
    """The events did not land on the predicted offsets: write them again."""


@dataclass(eq=False, repr=False, kw_only=True)
class TransactionBuilder:
    """The partition's transactional producer and the body of its transactions.

    Args:
        partition: the commands partition (= events, loops, history partition).
        topics: the topic set.
        group_id: the consumer group whose offsets the transactions commit.
        codec: encodes the state records.
        metrics: counters to update.
        ledger: the partition's command-offset ledger.
        state_max_bytes: a larger history record is replaced by a marker.
        traces: the carried trace contexts of open turns, recorded on the
            heads of their loops for the next owner (``None``: none kept).
    """

    partition: int
    topics: TopicNames
    group_id: str
    codec: Codec
    metrics: ServiceMetrics
    ledger: CommandOffsets
    state_max_bytes: int
    traces: TraceContexts | None = None
    producer: Any = field(init=False, default=None)
    """The transactional producer (``None``: not started, or being rebuilt)."""
    phase: Phase = field(init=False, default=Phase.IDLE)
    """How far the current transaction got."""
    _commands_tp: TopicPartition = field(init=False)
    _events_tp: TopicPartition = field(init=False)
    _prediction: OffsetPrediction = field(init=False, default_factory=OffsetPrediction)

    def __post_init__(self) -> None:
        self._commands_tp = TopicPartition(self.topics.commands, self.partition)
        self._events_tp = TopicPartition(self.topics.events, self.partition)

    def _trace_origin(self, head: LoopState) -> str | None:
        turn = head.open_turn
        if turn is None or self.traces is None:
            return None
        return self.traces.origin(turn.turn_id)

    async def _send(self, topic: str, value: bytes | None, **kwargs: Any) -> Any:
        """Hand one record to the producer; return its delivery future.

        Every delivery future gets a callback that retrieves its exception, so
        a transaction that fails half-way leaves no unobserved exception behind.
        """
        delivery = await self.producer.send(topic, value, **kwargs)
        delivery.add_done_callback(_observe)
        return delivery

    async def commit(self, batch: list[Request], outcome: Outcome) -> None:
        """Write ``batch`` (and the committable offset) in one transaction.

        What was written is kept in ``outcome``; :attr:`phase` tells a
        failure's recovery how far the transaction got.

        Raises:
            MemberCancelled: a caller gave up before the commit (aborted).
            Mispredicted: records did not land where predicted (aborted).
        """
        producer = self.producer
        predicted, history_at = self._prediction.take()
        self.phase = Phase.OPEN
        await producer.begin_transaction()
        event_futures, other_futures = await self._send_events(batch)
        resolving = [u for r in batch for u in resolves(r)]
        target = self.ledger.committable(resolving)
        if predicted is None:
            offsets = [await gather_all(sent) for sent in event_futures]
            states = await self._send_states(
                batch, offset_ranges(offsets), target, outcome, history_at
            )
        else:
            planned = planned_ranges(_event_counts(batch), predicted)
            states = await self._send_states(
                batch, planned, target, outcome, history_at
            )
            offsets = [await gather_all(sent) for sent in event_futures]
            if offset_ranges(offsets) != planned:
                await self._mispredicted()
        other_futures += states.futures
        history_offsets = [m.offset for m in await gather_all(states.history)]
        if history_offsets != states.planned_history:
            await self._mispredicted()
        history_offsets += [m.offset for m in await gather_all(states.erased)]
        for metas in offsets:
            if metas and outcome.probe is None:
                outcome.probe, outcome.probe_offset = self._events_tp, metas[0].offset
        written = await gather_all(other_futures)
        if outcome.probe is None and written:
            outcome.probe = TopicPartition(written[0].topic, written[0].partition)
            outcome.probe_offset = written[0].offset
        committed = self.ledger.committed
        if target is not None and (committed is None or target > committed):
            await producer.send_offsets_to_transaction(
                {self._commands_tp: target}, self.group_id
            )
            outcome.offset = target
        if any(r.reply.cancelled() for r in batch):
            await producer.abort_transaction()
            self.phase = Phase.IDLE
            raise MemberCancelled
        self.phase = Phase.COMMITTING
        await producer.commit_transaction()
        self.phase = Phase.IDLE
        self._prediction.committed(
            events_at=predicted,
            offsets=offsets,
            history_at=history_at,
            history_offsets=history_offsets,
        )

    async def _mispredicted(self) -> None:
        """Records did not land where predicted: abort, write again the slow way."""
        await self.producer.abort_transaction()
        self.phase = Phase.IDLE
        self.metrics.offset_mispredictions += 1
        raise Mispredicted

    async def _send_events(
        self, batch: list[Request]
    ) -> tuple[list[list[asyncio.Future[Any]]], list[asyncio.Future[Any]]]:
        """Hand each request's events (or dead letter) to the producer.

        Returns each request's event delivery futures, and the dead letters'.
        """
        event_futures: list[list[asyncio.Future[Any]]] = []
        other_futures: list[asyncio.Future[Any]] = []
        for request in batch:
            sent, others = await self._send_request(request)
            event_futures.append(sent)
            other_futures += others
        return event_futures, other_futures

    async def _send_request(
        self, request: Request
    ) -> tuple[list[asyncio.Future[Any]], list[asyncio.Future[Any]]]:
        """Hand one request's records to the producer; (events, others) futures."""
        if isinstance(request, DeadLetter):
            return [], [
                await self._send(
                    self.topics.dead_letters,
                    request.value,
                    key=request.key,
                    headers=request.headers,
                )
            ]
        key = loop_key(request.loop_id)
        events = [
            await self._send(
                self.topics.events,
                value,
                key=key,
                partition=self.partition,
                headers=headers,
            )
            for value, headers in request.payloads
        ]
        # Staged effects: partitioned by their key, as any producer places them.
        effects = [
            await self._send(
                effect.topic, effect.value, key=effect.key, headers=list(effect.headers)
            )
            for effect in request.effects
        ]
        return events, effects

    async def _send_states(
        self,
        batch: list[Request],
        ranges: list[range],
        target: int | None,
        outcome: Outcome,
        history_at: int | None,
    ) -> SentStates:
        """Hand each request's state records to the producer.

        ``ranges[i]``: the offsets of request ``i``'s events, known or planned.
        The history records go first; each head names where its history
        record lands: predicted from ``history_at`` when known (checked before
        the commit), else learnt by waiting for the history records' delivery
        (one more round trip). The states written are kept in ``outcome.states``.
        """
        sent = SentStates()
        split_up: list[tuple[int, StateRecords]] = []
        erased: list[bytes] = []
        for index, (request, events) in enumerate(zip(batch, ranges, strict=True)):
            if not isinstance(request, Append) or request.state is None:
                continue
            state = request.state.model_copy(
                update={
                    "journal_offset": events.stop
                    if events
                    else request.state.journal_offset,
                    "command_offset": target if target is not None else -1,
                }
            )
            if state.history_records > 0 and state.history_first_offset < 0:
                # A lineage whose records' offsets are unknown (written before
                # heads named them): start it over, so readers fetch by offset.
                state = state.model_copy(update={"history_length": -1})
            records, data = self._history_value(split(state, request.added_ids))
            erased.extend(erased_history_keys(request.loop_id, request.erase_history))
            if data is not None:
                assert records.history is not None  # noqa: S101 - data is its value
                number = records.history.history_records - 1
                sent.history.append(
                    await self._send(
                        self.topics.history,
                        data,
                        key=history_key(records.head.loop_id, number),
                        partition=self.partition,
                        headers=self.codec.kafka_headers(records.history),
                    )
                )
            split_up.append((index, records))
        if history_at is not None:
            sent.planned_history = list(
                range(history_at, history_at + len(sent.history))
            )
        else:
            metas = await gather_all(sent.history)
            sent.planned_history = [m.offset for m in metas]
        placed = iter(sent.planned_history)
        for index, records in split_up:
            written = (
                records if records.history is None else records.placed(next(placed))
            )
            outcome.states[index] = written.kept
            head = written.head
            sent.futures.append(
                await self._send(
                    self.topics.loops,
                    self.codec.marshal_state(head),
                    key=loop_key(head.loop_id),
                    partition=self.partition,
                    headers=head_headers(self.codec, head, self._trace_origin(head)),
                )
            )
        # Tombstones of deleted loops' history records: after the records
        # heads name, so they never shift a predicted offset.
        for key in erased:
            sent.erased.append(
                await self._send(
                    self.topics.history, None, key=key, partition=self.partition
                )
            )
        return sent

    def _history_value(
        self, records: StateRecords
    ) -> tuple[StateRecords, bytes | None]:
        """The records to write, and the history record's value (if any)."""
        history = records.history
        if history is None:
            return records, None
        limit = self.state_max_bytes - _STATE_OVERHEAD
        try:
            data = self.codec.marshal_state(history)
        except EncodeError:
            data = b""
        if data and len(data) <= limit:
            return records, data
        # Too large for the history topic: a head that sends restore to a full
        # replay of the journal (never a stale state), and the next write
        # starts the history over.
        unknown = {"history_first_offset": -1, "history_last_offset": -1}
        head = records.head.model_copy(
            update={"journal_offset": -1, "history_length": -1, **unknown}
        )
        kept = records.kept.model_copy(
            update={"history_length": -1, "history_records": 0, **unknown}
        )
        return StateRecords(head, None, kept), None


def _event_counts(batch: Sequence[Request]) -> list[int]:
    return [len(r.payloads) if isinstance(r, Append) else 0 for r in batch]


def _observe(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


async def gather_all(futures: Sequence[asyncio.Future[Any]]) -> list[Any]:
    """Every result, or the first failure once all have settled."""
    results = await asyncio.gather(*futures, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def resolves(request: Request) -> tuple[UUID, ...]:
    """The command and record ids ``request`` answers."""
    if isinstance(request, Append):
        return request.resolves
    return (request.resolves,)
