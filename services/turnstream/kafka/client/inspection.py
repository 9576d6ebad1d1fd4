"""What an operator reads across every partition: loop states and dead letters.

Owns :func:`read_loop_states` (the latest state of every loop on the compacted
loops topic, assembled from its head and history records by
:func:`~turnstream.kafka.reader.read_latest_states`) and
:func:`read_dead_letter_headers` (the dead letters' headers, never their
payload). ``turnstream loops list|show`` and ``turnstream dlq tail`` call them.
Each reads every partition to the end captured when its scan starts, under the
connection's timeouts. Never imports the actor or admin subpackages.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from uuid import UUID

from aiokafka import TopicPartition

from turnstream.kafka.clients import KafkaClients
from turnstream.kafka.reader import (
    DeadLetterEntry,
    JournalEntry,
    read_dead_letters,
    read_journal,
    read_latest_states,
    read_loop_head,
)
from turnstream.kafka.records import loop_key, partition_for
from turnstream.kafka.topology import TopicNames, partition_counts
from turnstream.state import LoopState
from turnstream.wire import Codec

__all__ = [
    "LoopStates",
    "read_dead_letter_headers",
    "read_journals",
    "read_loop_head_state",
    "read_loop_states",
]


@dataclass(frozen=True, slots=True)
class LoopStates:
    """The latest state of every loop on the loops topic.

    Attributes:
        states: loop id to its latest decodable state.
        unreadable: loops whose latest state record does not decode.
    """

    states: dict[UUID, LoopState]
    unreadable: frozenset[UUID]


async def read_loop_states(
    clients: KafkaClients, codec: Codec, topics: TopicNames
) -> LoopStates:
    """Every loop's latest state, from all partitions of the loops topic.

    Raises:
        ConfigError: the loops topic does not exist.
        KafkaAuthorizationError: an ACL denies Read on it.
        TransportError: a partition could not be read in time.
    """
    states: dict[UUID, LoopState] = {}
    unreadable: set[UUID] = set()
    for tp in await _partitions(clients, topics.loops):
        read = await read_latest_states(
            clients, codec, tp, TopicPartition(topics.history, tp.partition)
        )
        states.update(read.states)
        unreadable.update(read.unreadable)
    return LoopStates(states, frozenset(unreadable))


async def read_dead_letter_headers(
    clients: KafkaClients, topics: TopicNames
) -> list[DeadLetterEntry]:
    """Every committed dead letter (headers only), oldest first per partition.

    Raises:
        ConfigError: the dead-letter topic does not exist.
        KafkaAuthorizationError: an ACL denies Read on it.
        TransportError: a partition could not be read in time.
    """
    entries: list[DeadLetterEntry] = []
    for tp in await _partitions(clients, topics.dead_letters):
        entries += await read_dead_letters(clients, tp)
    return entries


async def read_journals(
    clients: KafkaClients,
    codec: Codec,
    topics: TopicNames,
    *,
    loops: Collection[UUID] | None = None,
) -> list[JournalEntry]:
    """Every committed event of every events partition (or of ``loops``), with headers.

    In journal order per partition (a loop's events are in one partition).

    Raises:
        ConfigError: the events topic does not exist.
        DecodeError: a selected record is not a valid event.
        KafkaAuthorizationError: an ACL denies Read on it.
        TransportError: a partition could not be read in time.
    """
    entries: list[JournalEntry] = []
    for tp in await _partitions(clients, topics.events):
        entries += await read_journal(clients, codec, tp, loops=loops)
    return entries


async def read_loop_head_state(
    clients: KafkaClients,
    codec: Codec,
    topics: TopicNames,
    loop_id: UUID,
    *,
    partitions: int,
) -> LoopState | None:
    """One loop's latest head state (no history: owner, turns, open turn, stopped).

    Scans the loop's partition of the compacted loops topic. ``partitions``:
    the co-partitioned topics' partition count.

    Raises:
        KafkaAuthorizationError: an ACL denies Read on it.
        TransportError: the partition could not be read in time.
    """
    partition = partition_for(loop_key(loop_id), partitions)
    return await read_loop_head(
        clients, codec, TopicPartition(topics.loops, partition), loop_id
    )


async def _partitions(clients: KafkaClients, topic: str) -> list[TopicPartition]:
    """Every partition of ``topic`` (``ConfigError`` if it does not exist).

    Raises ``KafkaAuthorizationError`` when an ACL denies Read on it.
    """
    count = (await partition_counts(clients, [topic], {topic: "Read"}))[topic]
    return [TopicPartition(topic, partition) for partition in range(count)]
