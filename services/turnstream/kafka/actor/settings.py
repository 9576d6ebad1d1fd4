"""How the loop-actor service takes part in its consumer group.

Owns :class:`ServiceSettings`, the group, topic and timing settings of
:class:`~turnstream.kafka.actor.service.LoopActorService` (which re-exports
it). Its own module so the service's parts
(:mod:`~turnstream.kafka.actor.membership` and the modules that share it) read
the settings without importing the service. Part of ``turnstream.kafka``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from turnstream.kafka.actor.writer_settings import WriterSettings
from turnstream.kafka.topology import TopicNames

__all__ = ["ServiceSettings"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceSettings:
    """How the service takes part in its consumer group.

    Attributes:
        group_id: the consumer group (also part of the transactional ids).
        topics: the topic set.
        txn_prefix: prefix of every transactional id.
        group_instance_id: a static member id (``None``: dynamic membership).
            A static member that restarts within the session timeout takes its
            partitions back with no rebalance; one that stops does not leave
            the group, so its partitions wait for it up to the session timeout
            (unless ``leave_on_stop``).
        leave_on_stop: a static member going away for good: once its
            partitions are handed over on a planned stop, it leaves the group,
            so the others take them at once instead of after the session
            timeout. Off for a restart in place (its replacement, with the same
            instance id, takes them back with no rebalance).
        session_timeout_ms: how long the group waits for a silent member
            before reassigning its partitions (the broker allows 6000 and up).
            With the restore, this bounds the takeover after a crash.
        heartbeat_interval_ms: heartbeat period; also how soon a member learns
            that a rebalance started.
        rebalance_timeout_ms: how long a rebalance waits for members to
            rejoin (they rejoin at once: revoking only pauses).
        max_poll_interval_ms: longest gap between fetches before leaving.
        poll_timeout_ms: how long one fetch waits for records.
        max_poll_records: records taken per fetch.
        writer: the partition writers' settings.
        stop_timeout: seconds one loop may take to stop on a handover.
        delta_capacity: ephemeral events buffered for the deltas producer (a
            full buffer makes streaming turns wait up to a second, then drop).
        lag_interval: seconds between consumer-lag updates.
        drain_timeout: on a planned stop, seconds running turns may take to
            finish before they are interrupted and the partitions handed over.
        health_interval: seconds between broker reachability checks.
        retry_backoff_max: longest wait between attempts to start the consumer
            or to take a failed partition over again (doubling with jitter).
        max_resident_loops: loops the process keeps live (actor and decoded
            state), shared evenly by its partitions; beyond that the least
            recently used idle loops are passivated (kept encoded, restored
            on their next command).
    """

    group_id: str = "turnstream-loop-actor"
    topics: TopicNames = field(default_factory=TopicNames)
    txn_prefix: str = "turnstream"
    group_instance_id: str | None = None
    leave_on_stop: bool = False
    session_timeout_ms: int = 8_000
    heartbeat_interval_ms: int = 1_000
    rebalance_timeout_ms: int = 10_000
    max_poll_interval_ms: int = 300_000
    poll_timeout_ms: int = 250
    max_poll_records: int = 200
    writer: WriterSettings = field(default_factory=WriterSettings)
    stop_timeout: float = 15.0
    delta_capacity: int = 8192
    lag_interval: float = 5.0
    drain_timeout: float = 30.0
    health_interval: float = 2.0
    retry_backoff_max: float = 5.0
    max_resident_loops: int = 10_000
