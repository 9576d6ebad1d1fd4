"""Bounded reads of one partition: snapshots, journal tails, commit probes.

Owns the partition scans restore and the session client need, each with its
own short-lived, manually assigned consumer that reads up to the end captured
when the scan starts (the last stable offset under ``read_committed``), so a
scan always ends:

* :func:`read_latest_states`: the latest ``LoopState`` per loop of one
  compacted loops partition;
* :func:`read_journal`: events of one events partition from an offset,
  optionally only those of some loops (filtered by key before decoding);
* :func:`record_visible`: whether the record at one offset is visible
  ``read_committed`` (used to settle a commit whose answer was lost).

Every call runs under the connection's timeouts. A fetch an ACL denies raises
:class:`~turnstream.kafka.errors.KafkaAuthorizationError` (``Read`` on the
topic), never a retriable transport error. Part of ``turnstream.kafka``;
imports the wire codec; never the runtime's actor.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError, TopicAuthorizationFailedError
from aiokafka.protocol.fetch import FetchRequest

from turnstream.errors import DecodeError, TransportError
from turnstream.events import EnduringEvent
from turnstream.kafka.clients import KafkaClients, start_client, stop_client
from turnstream.kafka.faults import transport_error
from turnstream.kafka.records import parse_loop_key
from turnstream.state import LoopState
from turnstream.wire import Codec

__all__ = [
    "JournalEntry",
    "SnapshotRead",
    "read_journal",
    "read_latest_states",
    "record_visible",
]

_FETCH_MS = 200


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One journal record: where it is and what it holds.

    Attributes:
        offset: the record's offset in its events partition.
        loop_id: the loop named by the key.
        event: the decoded event.
    """

    offset: int
    loop_id: UUID
    event: EnduringEvent


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
    # "earliest": a default "latest" reset started by assign() can race a seek
    # to the beginning and win; an offset before the log start resets to it.
    consumer = clients.consumer(
        "reader", read_committed=read_committed, auto_offset_reset="earliest"
    )
    await start_client(
        consumer,
        seconds=seconds,
        operation="start reader",
        security=clients.security,
    )
    try:
        consumer.assign([tp])
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
    while await _position(consumer, tp, seconds) < end:
        async with asyncio.timeout(seconds):
            batch = await consumer.getmany(tp, timeout_ms=_FETCH_MS)
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


async def read_latest_states(
    clients: KafkaClients, codec: Codec, tp: TopicPartition
) -> SnapshotRead:
    """The latest state per loop of the compacted loops partition ``tp``.

    Raises:
        KafkaAuthorizationError: an ACL denies Read on the topic.
        TransportError: the partition could not be read in time.
    """
    states: dict[UUID, LoopState] = {}
    unreadable: set[UUID] = set()

    def take(record: Any) -> bool:
        loop_id = parse_loop_key(record.key)
        if loop_id is None:
            return True  # not ours: the loops topic is keyed by loop id
        if record.value is None:  # a tombstone deletes the loop's state
            states.pop(loop_id, None)
            unreadable.discard(loop_id)
            return True
        try:
            state = codec.unmarshal_state(record.value)
        except DecodeError:
            states.pop(loop_id, None)
            unreadable.add(loop_id)
            return True
        if state.loop_id != loop_id:
            states.pop(loop_id, None)
            unreadable.add(loop_id)
            return True
        states[loop_id] = state
        unreadable.discard(loop_id)
        return True

    end = await _scan(clients, tp, None, take)
    return SnapshotRead(states, frozenset(unreadable), end)


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
        entries.append(JournalEntry(record.offset, loop_id, event))
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
