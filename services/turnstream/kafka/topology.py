"""The topics a loop-actor service uses, and the co-partitioning check.

Owns :class:`TopicNames` (commands, events, loops, history, deltas and
dead-letter topic names, with the prefix/suffix form tests use) and
:func:`check_copartitioned`, run once at start-up: the commands, events,
loops and history topics must have the same partition count, because a loop's
commands, journal and state must share one partition number (the service
writes events and state to the partition its commands arrived on). A mismatch is a
:class:`~turnstream.errors.ConfigError`.

Part of ``turnstream.kafka``; must not import the runtime or the wire codec.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from aiokafka.errors import KafkaError

from turnstream.errors import ConfigError
from turnstream.kafka.clients import KafkaClients, started_admin
from turnstream.kafka.diagnose import principal
from turnstream.kafka.errors import KafkaAuthorizationError
from turnstream.kafka.faults import transport_error

__all__ = [
    "COMMAND_RECORD_OVERHEAD",
    "MAX_COMMAND_BYTES",
    "TopicNames",
    "check_copartitioned",
    "partition_counts",
]

MAX_COMMAND_BYTES: Final = 1_048_576
"""The commands topic's ``max.message.bytes`` (infra/topics.yaml): 1 MiB.

The largest record a client may send; an input near it is refused by the
client before sending (:class:`~turnstream.errors.CommandTooLargeError`).
"""

COMMAND_RECORD_OVERHEAD: Final = 128
"""Bytes a record batch of one record adds to its key, value and headers
(a 61-byte batch header plus the record's varints), rounded up."""

_UNKNOWN_TOPIC = 3
_TOPIC_AUTHORIZATION_FAILED = 29


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicNames:
    """The topic set of one deployment.

    Attributes:
        commands: commands to loops, keyed by loop id.
        events: the enduring journal (delete policy, no retention limit).
        loops: the latest state per loop (compacted): its head.
        history: the history records of each loop's state (compacted; keyed
            ``<loop id>/<n>``, see :mod:`turnstream.kafka.state_records`).
        deltas: live-only events (lossy).
        dead_letters: commands that could not be decoded.
    """

    commands: str = "turnstream.commands.v1"
    events: str = "turnstream.events.v1"
    loops: str = "turnstream.loops.v1"
    history: str = "turnstream.history.v1"
    deltas: str = "turnstream.deltas.v1"
    dead_letters: str = "turnstream.commands.dlq.v1"

    @classmethod
    def with_affixes(cls, *, prefix: str = "", suffix: str = "") -> TopicNames:
        """The default names with ``prefix``/``suffix`` (as ``topics apply`` makes)."""
        base = cls()
        return cls(
            commands=f"{prefix}{base.commands}{suffix}",
            events=f"{prefix}{base.events}{suffix}",
            loops=f"{prefix}{base.loops}{suffix}",
            history=f"{prefix}{base.history}{suffix}",
            deltas=f"{prefix}{base.deltas}{suffix}",
            dead_letters=f"{prefix}{base.dead_letters}{suffix}",
        )

    def co_partitioned(self) -> tuple[str, str, str]:
        """The topics that must share a partition count (and ``history``)."""
        return (self.commands, self.events, self.loops)


async def partition_counts(
    clients: KafkaClients,
    topics: Sequence[str],
    needs: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """The partition count of each topic.

    Args:
        clients: builds the admin client.
        topics: the topic names.
        needs: per topic, the grant the caller needs on it (``Read``,
            ``Write``, ``Read and Write``): a topic an ACL hides lacks that
            grant (either implies Describe), so the denial names it, not
            Describe.

    Raises:
        ConfigError: a topic does not exist.
        KafkaAuthorizationError: an ACL hides a topic (Describe, implied by
            Read or Write).
        TransportError: the broker could not be asked.
    """
    seconds = clients.connection.request_timeout
    async with started_admin(clients, seconds=seconds) as admin:
        try:
            async with asyncio.timeout(seconds):
                described = await admin.describe_topics(list(topics))
        except (TimeoutError, KafkaError, OSError) as exc:
            raise transport_error(
                "describe topics", exc, security=clients.security
            ) from exc
    counts: dict[str, int] = {}
    for entry in described:
        name = str(entry["topic"])
        if int(entry["error_code"]) == _TOPIC_AUTHORIZATION_FAILED:
            raise KafkaAuthorizationError(
                principal=principal(clients.security),
                permission=(needs or {}).get(name, "Describe"),
                resource_type="Topic",
                resource=name,
                operation="describe topics",
            )
        if int(entry["error_code"]) == _UNKNOWN_TOPIC or not entry["partitions"]:
            raise ConfigError(
                "topics", f"topic {name} does not exist (run `turnstream topics apply`)"
            )
        if int(entry["error_code"]) != 0:
            raise ConfigError("topics", f"topic {name}: error {entry['error_code']}")
        counts[name] = len(entry["partitions"])
    return counts


async def check_copartitioned(clients: KafkaClients, topics: TopicNames) -> int:
    """Return the shared partition count of commands, events, loops and history.

    Raises:
        ConfigError: a topic is missing or the counts differ.
        TransportError: the broker could not be asked.
    """
    counts = await partition_counts(
        clients,
        topics.co_partitioned(),
        {
            topics.commands: "Read",
            topics.events: "Read and Write",
            topics.loops: "Read and Write",
        },
    )
    distinct = set(counts.values())
    if len(distinct) != 1:
        listing = ", ".join(f"{name}={count}" for name, count in counts.items())
        raise ConfigError(
            "topics",
            "commands, events and loops topics must have the same partition "
            f"count (co-partitioned by loop id); found {listing}",
        )
    shared = distinct.pop()
    history = await partition_counts(
        clients, [topics.history], {topics.history: "Read and Write"}
    )
    if history[topics.history] != shared:
        raise ConfigError(
            "topics",
            f"{topics.history} must have the loops topic's partition count "
            f"({shared}); found {history[topics.history]}",
        )
    return shared
