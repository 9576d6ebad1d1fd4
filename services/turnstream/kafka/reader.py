"""Bounded reads of one partition: snapshots, journal tails, commit probes.

Owns the partition scans restore and the session client need, each with its
own short-lived, manually assigned consumer that reads up to the end captured
when the scan starts (the last stable offset under ``read_committed``), so a
scan always ends:

* :func:`read_state_index`: the latest head record per loop of one
  compacted loops partition, kept undecoded (:class:`StateIndex`): a takeover
  decodes only the loops that need their journal tail, every other loop is
  decoded on its next command, its history records fetched then by the
  offsets its head names (:class:`HistoryReader`);
* :func:`read_latest_states`: the same, every loop decoded (tools, tests);
* :func:`read_journal`: events of one events partition from an offset,
  optionally only those of some loops (filtered by key before decoding);
* :func:`record_visible`: whether the record at one offset is visible
  ``read_committed`` (used to settle a commit whose answer was lost);
* :func:`read_dead_letters`: the dead-letter headers of one dead-letter
  partition (``turnstream dlq tail``), never the payload.

Every call runs under the connection's timeouts. A fetch an ACL denies raises
:class:`~turnstream.kafka.errors.KafkaAuthorizationError` (``Read`` on the
topic), never a retriable transport error. Part of ``turnstream.kafka``;
imports the wire codec; never the runtime's actor.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError, TopicAuthorizationFailedError
from aiokafka.protocol.fetch import FetchRequest

from turnstream.errors import DecodeError, TransportError
from turnstream.events import EnduringEvent
from turnstream.kafka.clients import KafkaClients, stop_client
from turnstream.kafka.faults import transport_error
from turnstream.kafka.records import (
    HISTORY_POSITIONED,
    RESTORE_SNAPSHOT,
    RESTORE_TAIL,
    STATE_HISTORY,
    STATE_RESTORE,
    parse_loop_key,
)
from turnstream.kafka.state_records import assemble, parse_history_key
from turnstream.runtime.tracing import TRACE_ORIGIN
from turnstream.state import LoopState
from turnstream.wire import Codec

__all__ = [
    "DeadLetterEntry",
    "HistoryFetch",
    "HistoryReader",
    "JournalEntry",
    "SnapshotRead",
    "StateIndex",
    "head_headers",
    "read_dead_letters",
    "read_journal",
    "read_latest_states",
    "read_loop_head",
    "read_state_index",
    "record_visible",
]

_FETCH_MS = 200
# A start past any partition's end: the scan reads nothing but checks Read.
_END = 1 << 62
# The headers ``records.dead_letter_headers`` adds (kind, reason, where from).
_DLQ_PREFIX = "ts-dlq-"


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One journal record: where it is and what it holds.

    Attributes:
        offset: the record's offset in its events partition.
        loop_id: the loop named by the key.
        event: the decoded event.
        headers: the record's headers (its ``traceparent`` among them).
    """

    offset: int
    loop_id: UUID
    event: EnduringEvent
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class SnapshotRead:
    """The latest state of each loop of one loops partition.

    Attributes:
        states: loop id to its latest decodable state.
        unreadable: loops whose *latest* record could not be decoded (restore
            must replay their journal instead).
        end_offset: where the scan stopped.
    """

    states: dict[UUID, LoopState]
    unreadable: frozenset[UUID]
    end_offset: int


async def _scan(
    clients: KafkaClients,
    tp: TopicPartition,
    start: int | None,
    handle: Callable[[Any], Awaitable[bool] | bool],
    *,
    read_committed: bool = True,
) -> int:
    """Feed ``handle`` every record from ``start`` to the end; return the end.

    ``handle`` returns ``False`` to stop early.
    """
    seconds = clients.connection.request_timeout
    consumer = await _start_reader(clients, tp, read_committed=read_committed)
    try:
        first = max(start or 0, 0)
        consumer.seek(tp, first)
        async with asyncio.timeout(seconds):
            end = int((await consumer.end_offsets([tp]))[tp])
        if end <= first:
            # Nothing to read, so nothing fetched: ask for Read anyway, or a
            # takeover of an empty partition would hide a missing grant.
            await _check_read(consumer, tp, first, seconds)
        await _drain(consumer, tp, end, handle, seconds)
    except (TimeoutError, KafkaError, OSError) as exc:
        # A denied fetch stays a typed, non-retriable denial naming Read on
        # the topic: a takeover that cannot read must stop, not retry.
        raise transport_error(
            f"read {tp.topic}[{tp.partition}]",
            exc,
            security=clients.security,
            permission="Read",
            resource=tp.topic,
        ) from exc
    finally:
        await stop_client(consumer, seconds=seconds)
    return end


async def _start_reader(
    clients: KafkaClients, tp: TopicPartition, *, read_committed: bool
) -> Any:
    """A started consumer manually assigned ``tp``.

    "earliest": a default "latest" reset started by assign() can race a seek
    to the beginning and win; an offset before the log start resets to it.
    """
    consumer = clients.consumer(
        "reader", read_committed=read_committed, auto_offset_reset="earliest"
    )
    await clients.start(
        consumer, operation="start reader", seconds=clients.connection.request_timeout
    )
    try:
        consumer.assign([tp])
    except BaseException:
        await stop_client(consumer, seconds=clients.connection.request_timeout)
        raise
    return consumer


async def _check_read(
    consumer: Any, tp: TopicPartition, offset: int, seconds: float
) -> None:
    """One fetch of ``tp`` that waits for no data: raise if Read is denied.

    A consumer fetches only what it has to read; this request answers at
    once either way (``max_wait`` 0), with the partition's error code.
    """
    client = consumer._client
    node = client.cluster.leader_for_partition(tp)
    if node is None or node < 0:
        return  # no leader known: the next read finds out
    request = FetchRequest(0, 0, 1, 1, [(tp.topic, [(tp.partition, offset, 1)])])
    async with asyncio.timeout(seconds):
        response = await client.send(node, request)
    for _topic, partitions in response.topics:
        for _partition, error_code, *_ in partitions:
            if error_code == TopicAuthorizationFailedError.errno:
                raise TopicAuthorizationFailedError(tp.topic)


async def _drain(
    consumer: Any,
    tp: TopicPartition,
    end: int,
    handle: Callable[[Any], Awaitable[bool] | bool],
    seconds: float,
) -> None:
    # Every fetch is bounded, and so is the scan: one that stops moving for
    # ``seconds`` fails (the caller retries with a new consumer) instead of
    # polling an unmoving position for ever.
    position = await _position(consumer, tp, seconds)
    moved = asyncio.get_running_loop().time()
    while position < end:
        async with asyncio.timeout(seconds):
            batch = await consumer.getmany(tp, timeout_ms=_FETCH_MS)
        now = await _position(consumer, tp, seconds)
        clock = asyncio.get_running_loop().time()
        if now > position:
            position, moved = now, clock
        elif clock - moved > seconds:
            raise TimeoutError(f"no progress at offset {position} of {end}")
        for record in batch.get(tp, ()):
            if record.offset >= end:
                return
            outcome = handle(record)
            if not isinstance(outcome, bool):
                outcome = await outcome
            if not outcome:
                return


async def _position(consumer: Any, tp: TopicPartition, seconds: float) -> int:
    async with asyncio.timeout(seconds):
        return int(await consumer.position(tp))


HistoryFetch = Callable[[LoopState], Awaitable[dict[int, bytes]]]
"""Reads a head's history records by position: record number to value."""


async def _no_fetch(head: LoopState) -> dict[int, bytes]:
    return {}


class StateIndex:
    """The latest head record of each loop of one loops partition, undecoded.

    A takeover keeps each loop's latest head as bytes -- older records of the
    same key, which compaction has not removed yet, are dropped as the scan
    passes them -- and decodes only what it must act on at once: the loops
    whose record's ``ts-restore`` header says ``tail`` (an open turn or a
    replay marker), and records written without the header. Every other loop
    is decoded when its next command arrives (:meth:`load`) and then left to
    its owner (:meth:`forget`), so a takeover costs one pass over the heads,
    not one decode per record ever written.

    A loop's history records stay on Kafka: :meth:`load` fetches them by the
    offsets its head names (``fetch``). Only heads written without those
    offsets (the ``ts-history`` header absent) have their history records
    kept here, from a scan of the history partition (:meth:`put_history`).

    Attributes:
        end_offset: where the scan stopped.
    """

    __slots__ = (
        "_codec",
        "_fetch",
        "_history",
        "_origins",
        "_records",
        "_tail",
        "_unpositioned",
        "_unreadable",
        "_whole",
        "end_offset",
    )

    def __init__(
        self, codec: Codec, end_offset: int = 0, fetch: HistoryFetch = _no_fetch
    ) -> None:
        self._codec = codec
        self._fetch = fetch
        self._records: dict[UUID, bytes] = {}
        self._history: dict[UUID, dict[int, bytes]] = {}
        # Loops whose head does not say where its history records are.
        self._unpositioned: set[UUID] = set()
        # Loops their owner let go of: one record holds the whole state.
        self._whole: set[UUID] = set()
        self._tail: set[UUID] = set()
        self._unreadable: set[UUID] = set()
        # The carried ``traceparent`` of the open turn a head names, if any.
        self._origins: dict[UUID, bytes] = {}
        self.end_offset = end_offset

    @classmethod
    def of(cls, codec: Codec, states: Collection[LoopState]) -> StateIndex:
        """An index holding ``states`` (as a scan of them would)."""
        index = cls(codec)
        for state in states:
            index.put(state.loop_id, codec.marshal_state(state), restore_hint(state))
        return index

    def __len__(self) -> int:
        return len(self._records) + len(self._unreadable)

    def put(
        self,
        loop_id: UUID,
        value: bytes | None,
        hint: bytes | None,
        *,
        positioned: bool = False,
        trace_origin: bytes | None = None,
    ) -> None:
        """Take one head record of the partition (later records win).

        Args:
            loop_id: the loop the key names.
            value: the record's value (``None``: a tombstone).
            hint: the record's ``ts-restore`` header (``None``: absent).
            positioned: the record's ``ts-history`` header says its history
                records are found by the offsets it names.
            trace_origin: the record's ``ts-trace-origin`` header: the
                ``traceparent`` the submit of its open turn carried.
        """
        self._unreadable.discard(loop_id)
        self._whole.discard(loop_id)
        if trace_origin is None:
            self._origins.pop(loop_id, None)
        else:
            self._origins[loop_id] = trace_origin
        if value is None:  # the loop was deleted: its history goes too
            self._records.pop(loop_id, None)
            self._history.pop(loop_id, None)
            self._tail.discard(loop_id)
            self._unpositioned.discard(loop_id)
            return
        self._records[loop_id] = value
        if positioned:
            self._unpositioned.discard(loop_id)
        else:
            self._unpositioned.add(loop_id)
        if hint == RESTORE_SNAPSHOT:
            self._tail.discard(loop_id)
        elif hint == RESTORE_TAIL:
            self._tail.add(loop_id)
        else:
            self._classify(loop_id, value)

    def take_trace_origin(self, loop_id: UUID) -> bytes | None:
        """The carried ``traceparent`` of the open turn of ``loop_id``'s head, once."""
        return self._origins.pop(loop_id, None)

    @property
    def unpositioned(self) -> frozenset[UUID]:
        """Loops whose history records must be found by key (a history scan)."""
        return frozenset(self._unpositioned)

    def put_history(self, loop_id: UUID, number: int, value: bytes | None) -> None:
        """Take one history record of the partition (later records win)."""
        if value is None:
            self._history.get(loop_id, {}).pop(number, None)
        else:
            self._history.setdefault(loop_id, {})[number] = value

    def _classify(self, loop_id: UUID, value: bytes) -> None:
        """Decode a record written without the hint to learn what it needs."""
        state = self._decode_one(loop_id, value)
        if state is None:
            del self._records[loop_id]
            self._tail.discard(loop_id)
            self._unreadable.add(loop_id)
        elif restore_hint(state) == RESTORE_TAIL:
            self._tail.add(loop_id)
        else:
            self._tail.discard(loop_id)

    def known(self, loop_id: UUID) -> bool:
        """Whether the partition held a state record of ``loop_id``."""
        return loop_id in self._records or loop_id in self._unreadable

    def loops(self) -> list[UUID]:
        """The loops whose latest record is held (readable so far)."""
        return list(self._records)

    @property
    def unreadable(self) -> frozenset[UUID]:
        """Loops whose latest record could not be decoded (replayed instead)."""
        return frozenset(self._unreadable)

    def tail_loops(self) -> list[UUID]:
        """Loops a takeover restores at once: open turns, then unreadable ones."""
        return [*sorted(self._tail), *sorted(self._unreadable)]

    async def load(self, loop_id: UUID) -> LoopState | None:
        """``loop_id``'s latest state, decoded (``None``: none, or unreadable).

        An unreadable record (undecodable, naming another loop, or history
        records missing or not lining up) makes the loop one that restore
        replays from its journal.

        Raises:
            KafkaAuthorizationError: an ACL denies Read on the history topic.
            TransportError: its history records could not be read in time.
        """
        value = self._records.get(loop_id)
        if value is None:
            return None
        state = await self._decode(loop_id, value)
        if state is None and self._records.get(loop_id) is value:
            del self._records[loop_id]
            self._tail.discard(loop_id)
            self._unreadable.add(loop_id)
        return state

    def park(self, state: LoopState) -> None:
        """Keep the state of a loop its owner lets go of (idle), encoded.

        Its next command decodes it again, as any loop not yet seen. When
        every message of ``state`` is in history records whose offsets it
        names, only its head is kept (the history is fetched again then).

        Raises:
            EncodeError: the state cannot be encoded (the owner keeps it).
        """
        loop_id = state.loop_id
        stored = (
            state.history_length == len(state.messages)
            and state.history_records > 0
            and state.history_first_offset >= 0
            and state.history_last_offset >= 0
        )
        if stored:
            head = state.model_copy(update={"messages": (), "recent_command_ids": ()})
            self._records[loop_id] = self._codec.marshal_state(head)
            self._whole.discard(loop_id)
            self._unpositioned.discard(loop_id)
        else:
            self._records[loop_id] = self._codec.marshal_state(state)
            self._whole.add(loop_id)
        self._history.pop(loop_id, None)
        self._tail.discard(loop_id)
        self._unreadable.discard(loop_id)

    def history_count(self, loop_id: UUID) -> int:
        """One past the highest history record number held of ``loop_id``.

        Counts every lineage's records still on the partition, not only those
        the loop's head names: what deleting the loop must tombstone.
        """
        numbers = self._history.get(loop_id)
        return max(numbers) + 1 if numbers else 0

    def forget(self, loop_id: UUID) -> None:
        """Drop ``loop_id``'s records: its owner now keeps the loop's state."""
        self._records.pop(loop_id, None)
        self._history.pop(loop_id, None)
        self._whole.discard(loop_id)
        self._tail.discard(loop_id)
        self._unreadable.discard(loop_id)
        self._unpositioned.discard(loop_id)

    async def _decode(self, loop_id: UUID, value: bytes) -> LoopState | None:
        """The whole state: the head, with its history records when it has some."""
        head = self._decode_one(loop_id, value)
        if (
            head is None
            or head.history_length < 0
            or head.history_records == 0
            or loop_id in self._whole
        ):
            return head
        if loop_id in self._unpositioned or head.history_last_offset < 0:
            stored = self._history.get(loop_id, {})
        else:
            stored = await self._fetch(head)
        history: dict[int, LoopState] = {}
        for number in range(head.history_records):
            data = stored.get(number)
            record = None if data is None else self._decode_one(loop_id, data)
            if record is None:
                return None
            history[number] = record
        return assemble(head, history)

    def _decode_one(self, loop_id: UUID, value: bytes) -> LoopState | None:
        try:
            state = self._codec.unmarshal_state(value)
        except DecodeError:
            return None
        return state if state.loop_id == loop_id else None


def restore_hint(state: LoopState) -> bytes:
    """The ``ts-restore`` header value for a state record holding ``state``."""
    if state.open_turn is not None or state.journal_offset < 0:
        return RESTORE_TAIL
    return RESTORE_SNAPSHOT


def head_headers(
    codec: Codec, head: LoopState, trace_origin: str | None = None
) -> list[tuple[str, bytes]]:
    """The headers of a head record, as the partition writer sends them.

    The codec's, how a takeover restores the loop (``ts-restore``), that the
    head names its history records' offsets (``ts-history``), and, for an
    open turn whose submit carried one, that ``traceparent``
    (``ts-trace-origin``): the next owner's spans of the turn join its trace.
    """
    headers = [
        *codec.kafka_headers(head),
        (STATE_RESTORE, restore_hint(head)),
        (STATE_HISTORY, HISTORY_POSITIONED),
    ]
    if trace_origin is not None and head.open_turn is not None:
        headers.append((TRACE_ORIGIN, trace_origin.encode("ascii")))
    return headers


def _header(record: Any, name: str) -> bytes | None:
    for key, value in record.headers or ():
        if key == name:
            return bytes(value)
    return None


_DENSE_SPAN = 4096
_SPARSE_FACTOR = 4
"""A loop's history records spanning fewer than ``_DENSE_SPAN`` offsets (or
``_SPARSE_FACTOR`` per record) are read in one pass; sparser ones are fetched
one by one."""


class HistoryReader:
    """One history partition's records, fetched by the offsets heads name.

    Records close together (a loop that talked for a while) are read in one
    pass from the first to the last; records far apart (a loop used now and
    then among many) are fetched by walking back from the last record, each
    naming the offset of the one before it. Either way the reads touch the
    loop's records, never the whole partition. One consumer, started on the
    first fetch and kept until :meth:`close`, serves every fetch in turn, so a
    loop's first command after a takeover costs a fetch, not a new connection.

    Args:
        clients: builds the consumer.
        codec: decodes the records walked through (their previous offsets).
        tp: the history partition.
    """

    def __init__(self, clients: KafkaClients, codec: Codec, tp: TopicPartition) -> None:
        self._clients = clients
        self._codec = codec
        self._tp = tp
        self._consumer: Any = None
        self._lock = asyncio.Lock()

    async def fetch(self, head: LoopState) -> dict[int, bytes]:
        """``head``'s history records by number (missing ones left out).

        Raises:
            KafkaAuthorizationError: an ACL denies Read on the history topic.
            TransportError: the partition could not be read in time.
        """
        first, last, count = (
            head.history_first_offset,
            head.history_last_offset,
            head.history_records,
        )
        if first < 0 or last < first:
            return {}
        seconds = self._clients.connection.request_timeout
        async with self._lock:
            try:
                consumer = await self._open()
                if last - first < max(_DENSE_SPAN, _SPARSE_FACTOR * count):
                    return await self._span(consumer, head.loop_id, first, last)
                return await self._walk(consumer, head.loop_id, last, count)
            except (TimeoutError, KafkaError, OSError) as exc:
                await self._reset(seconds)
                raise transport_error(
                    f"read {self._tp.topic}[{self._tp.partition}]",
                    exc,
                    security=self._clients.security,
                    permission="Read",
                    resource=self._tp.topic,
                ) from exc

    async def close(self) -> None:
        """Stop the consumer, if one was started."""
        async with self._lock:
            await self._reset(self._clients.connection.request_timeout)

    async def _open(self) -> Any:
        if self._consumer is None:
            self._consumer = await _start_reader(
                self._clients, self._tp, read_committed=True
            )
        return self._consumer

    async def _reset(self, seconds: float) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await stop_client(consumer, seconds=seconds)

    async def _span(
        self, consumer: Any, loop_id: UUID, first: int, last: int
    ) -> dict[int, bytes]:
        found: dict[int, bytes] = {}
        consumer.seek(self._tp, first)
        async for record in self._records(consumer, last):
            numbered = parse_history_key(record.key)
            if numbered is not None and numbered[0] == loop_id and record.value:
                found[numbered[1]] = record.value
        return found

    async def _walk(
        self, consumer: Any, loop_id: UUID, last: int, count: int
    ) -> dict[int, bytes]:
        """Follow ``history_previous_offset`` from ``last``: one fetch per record."""
        found: dict[int, bytes] = {}
        offset = last
        while offset >= 0 and len(found) < count:
            consumer.seek(self._tp, offset)
            record = None
            async for candidate in self._records(consumer, offset):
                record = candidate if candidate.offset == offset else None
            numbered = None if record is None else parse_history_key(record.key)
            if record is None or numbered is None or numbered[0] != loop_id:
                break  # compacted away or not the loop's: incomplete
            found[numbered[1]] = record.value
            try:
                previous = self._codec.unmarshal_state(
                    record.value
                ).history_previous_offset
            except DecodeError:
                break
            if previous >= offset:
                break
            offset = previous
        return found

    async def _records(self, consumer: Any, last: int) -> AsyncIterator[Any]:
        """Records from the consumer's position up to ``last`` (inclusive).

        Ends early when the partition holds nothing more (records compacted
        away at the end); each fetch is bounded by the request timeout.
        """
        seconds = self._clients.connection.request_timeout
        while True:
            async with asyncio.timeout(seconds):
                batch = await consumer.getmany(self._tp, timeout_ms=_FETCH_MS)
            records = batch.get(self._tp, ())
            for record in records:
                if record.offset > last:
                    return
                yield record
                if record.offset == last:
                    return
            if not records:
                async with asyncio.timeout(seconds):
                    if await consumer.position(self._tp) > last:
                        return


async def read_state_index(
    clients: KafkaClients,
    codec: Codec,
    tp: TopicPartition,
    history: TopicPartition,
    fetch: HistoryFetch = _no_fetch,
) -> StateIndex:
    """The latest head record per loop of one partition of the state topics.

    The history partition is scanned only when some head does not name its
    history records' offsets (written before heads did), and then only those
    loops' records are kept.

    Args:
        clients: builds the consumers.
        codec: decodes what must be decoded at once.
        tp: the compacted loops partition (the heads).
        history: the same partition of the compacted history topic.
        fetch: reads a loop's history records by the offsets its head names
            (:meth:`HistoryReader.fetch`).

    Raises:
        KafkaAuthorizationError: an ACL denies Read on a topic.
        TransportError: a partition could not be read in time.
    """
    index = StateIndex(codec, fetch=fetch)

    def take_head(record: Any) -> bool:
        loop_id = parse_loop_key(record.key)
        if loop_id is not None:  # else not ours: the topic is keyed by loop id
            index.put(
                loop_id,
                record.value,
                _header(record, STATE_RESTORE),
                positioned=_header(record, STATE_HISTORY) == HISTORY_POSITIONED,
                trace_origin=_header(record, TRACE_ORIGIN),
            )
        return True

    # Both partitions are written by this partition's owner only, which is
    # this process from now on: the two scans see the same committed writes.
    index.end_offset = await _scan(clients, tp, None, take_head)
    wanted = index.unpositioned
    if wanted:

        def take_history(record: Any) -> bool:
            numbered = parse_history_key(record.key)
            if numbered is not None and numbered[0] in wanted:
                index.put_history(*numbered, record.value)
            return True

        await _scan(clients, history, None, take_history)
    else:
        # No history read: still ask for Read, or a takeover would hide a
        # missing grant until a loop's first command.
        await _scan(clients, history, _END, lambda _record: False)
    return index


async def read_latest_states(
    clients: KafkaClients,
    codec: Codec,
    tp: TopicPartition,
    history: TopicPartition,
) -> SnapshotRead:
    """The latest state per loop of one partition of the state topics, decoded.

    Raises:
        TransportError: a partition could not be read in time.
    """
    reader = HistoryReader(clients, codec, history)
    try:
        index = await read_state_index(clients, codec, tp, history, reader.fetch)
        states: dict[UUID, LoopState] = {}
        for loop_id in index.loops():
            state = await index.load(loop_id)
            if state is not None:
                states[loop_id] = state
    finally:
        await reader.close()
    return SnapshotRead(states, index.unreadable, index.end_offset)


async def read_loop_head(
    clients: KafkaClients, codec: Codec, tp: TopicPartition, loop_id: UUID
) -> LoopState | None:
    """``loop_id``'s latest head record on its loops partition, decoded.

    The head alone (no history records): who owns the loop (``session_id``),
    its turn count, whether a turn is open or the loop stopped. ``None`` when
    the partition holds no readable head of the loop (a loop whose first
    turn has not committed yet has none).

    Raises:
        KafkaAuthorizationError: an ACL denies Read on the topic.
        TransportError: the partition could not be read in time.
    """
    latest: list[bytes | None] = [None]

    def take(record: Any) -> bool:
        if parse_loop_key(record.key) == loop_id:
            latest[0] = record.value
        return True

    await _scan(clients, tp, None, take)
    value = latest[0]
    if value is None:
        return None
    try:
        state = codec.unmarshal_state(value)
    except DecodeError:
        return None
    return state if state.loop_id == loop_id else None


async def read_journal(
    clients: KafkaClients,
    codec: Codec,
    tp: TopicPartition,
    *,
    start: int = 0,
    loops: Collection[UUID] | None = None,
) -> list[JournalEntry]:
    """Committed events of ``tp`` from ``start`` to the last stable offset.

    Args:
        clients: builds the consumer.
        codec: decodes the events.
        tp: the events partition.
        start: the first offset to read.
        loops: only these loops' records are decoded and returned (all if None).

    Raises:
        DecodeError: a selected record is not a valid event (fail closed).
        KafkaAuthorizationError: an ACL denies Read on the topic.
        TransportError: the partition could not be read in time.
    """
    wanted = None if loops is None else set(loops)
    entries: list[JournalEntry] = []

    def take(record: Any) -> bool:
        loop_id = parse_loop_key(record.key)
        if loop_id is None or (wanted is not None and loop_id not in wanted):
            return True
        event = codec.unmarshal_event(record.value)
        if event.header.loop_id != loop_id:
            raise DecodeError("event", "record key names another loop")
        entries.append(
            JournalEntry(record.offset, loop_id, event, tuple(record.headers or ()))
        )
        return True

    await _scan(clients, tp, start, take)
    return entries


async def record_visible(
    clients: KafkaClients, tp: TopicPartition, offset: int
) -> bool:
    """Whether the record at ``offset`` of ``tp`` is visible ``read_committed``.

    Call it only after the transaction that wrote the record has ended (e.g.
    after a fresh producer with the same transactional id initialised).

    Raises:
        TransportError: the partition could not be read in time.
    """
    found: list[int] = []

    def take(record: Any) -> bool:
        found.append(record.offset)
        return False

    end = await _scan(clients, tp, offset, take)
    if not found and end <= offset:
        raise TransportError(
            f"probe {tp.topic}[{tp.partition}]",
            "the transaction is still open",
            retriable=True,
        )
    return bool(found) and found[0] == offset


@dataclass(frozen=True, slots=True)
class DeadLetterEntry:
    """One dead letter, without its payload.

    Attributes:
        partition: its dead-letter partition.
        offset: its offset there.
        timestamp_ms: when it was written (the record timestamp).
        headers: its ``ts-dlq-*`` headers (kind, reason, and the topic,
            partition and offset of the command it came from), decoded.
    """

    partition: int
    offset: int
    timestamp_ms: int
    headers: dict[str, str]


async def read_dead_letters(
    clients: KafkaClients, tp: TopicPartition, *, start: int = 0
) -> list[DeadLetterEntry]:
    """The committed dead letters of ``tp`` from ``start``; headers only.

    Raises:
        KafkaAuthorizationError: an ACL denies Read on the topic.
        TransportError: the partition could not be read in time.
    """
    entries: list[DeadLetterEntry] = []

    def take(record: Any) -> bool:
        headers = {
            name: bytes(value).decode("utf-8", "replace")
            for name, value in record.headers or ()
            if name.startswith(_DLQ_PREFIX)
        }
        entries.append(
            DeadLetterEntry(tp.partition, record.offset, record.timestamp, headers)
        )
        return True

    await _scan(clients, tp, start, take)
    return entries
