"""Kafka adapters: the only package that imports aiokafka.

A table of contents. This part holds the admin side:

- ``config``: ``KafkaConnection`` (bootstrap servers and per-call timeouts) and the
  bootstrap resolution from flags and ``KAFKA_BOOTSTRAP_SERVERS``;
- ``admin``: bounded admin sessions (built by ``KafkaClients``, so they take the
  same ``KafkaSecurity``), the broker readiness probe and the transactional round
  trip ``turnstream smoke`` runs;
- ``topics``: ``infra/topics.yaml`` and its idempotent ``apply_topics``;
  ``topic_changes``: waiting until created topics are visible, and the safe
  in-place config changes of ``topics apply --alter``;
- ``errors``: ``BrokerUnreachableError``, ``TopicCreateError``,
  ``TopicAlterError``, ``TopicConfigMismatchError``.

The loop-actor side (the runtime's ports on Kafka):

- ``security``: ``KafkaSecurity`` and ``Secret``; ``clients``: ``KafkaClients``,
  which builds every producer, consumer and admin client from one settings object;
- ``topology``: ``TopicNames`` and the co-partitioning check;
- ``service``: ``LoopActorService`` (consumer group member, rebalance handling) and
  ``ServiceSettings``; ``runner``: one owned partition; ``partition``: its
  transactional ``PartitionWriter``; ``offsets``: the command-offset ledger;
- ``journal``: the ``Journal`` port (state snapshots + journal tail);
  ``reader``: bounded partition scans; ``deltas``: the live-only ``LiveHub``;
- ``session_client``: ``KafkaSession``, the Session API over Kafka;
- ``metrics``: ``ServiceMetrics`` (readiness, counters, commit latency, lag);
  ``faults``/``records``: error classification, keys and dead-letter headers.

Limits to configure on the broker: a loop's state record holds its whole history,
so raise ``max.message.bytes`` of ``turnstream.loops.v1`` (and of
``turnstream.events.v1`` for large steps) to the producers' ``max_request_size``
(``clients.DEFAULT_MAX_REQUEST_BYTES``, 8 MiB + 64 KiB); a state larger than the
writer's ``state_max_bytes`` is stored as a "replay the journal" marker instead.

Nothing outside ``turnstream.kafka`` (and the composition roots and CLI that wire it)
may import aiokafka; the core never imports this package.
"""

from turnstream.kafka.admin import (
    ClusterInfo,
    RoundTrip,
    admin_session,
    broker_answers,
    check_broker,
    transactional_round_trip,
)
from turnstream.kafka.clients import KafkaClients
from turnstream.kafka.config import (
    BOOTSTRAP_ENV,
    DEFAULT_BOOTSTRAP,
    KafkaConnection,
    parse_bootstrap,
    resolve_bootstrap,
)
from turnstream.kafka.errors import (
    BrokerUnreachableError,
    ConfigMismatch,
    TopicAlterError,
    TopicConfigMismatchError,
    TopicCreateError,
)
from turnstream.kafka.faults import (
    CommitFailedError,
    PartitionClosedError,
    PartitionFencedError,
)
from turnstream.kafka.metrics import LatencyHistogram, ServiceMetrics
from turnstream.kafka.partition import PartitionWriter, WriterSettings
from turnstream.kafka.security import (
    KafkaSecurity,
    SaslMechanism,
    Secret,
    SecurityProtocol,
)
from turnstream.kafka.service import LoopActorService, ServiceSettings
from turnstream.kafka.session_client import KafkaSession
from turnstream.kafka.topic_changes import is_safe_drift
from turnstream.kafka.topics import (
    ApplyReport,
    DesiredTopic,
    TopicOutcome,
    TopicResult,
    TopicSetSpec,
    apply_topics,
    delete_topics,
    diff_topic,
    load_topic_set,
    parse_topic_set,
    resolve_topics,
)
from turnstream.kafka.topology import TopicNames

__all__ = [
    "BOOTSTRAP_ENV",
    "DEFAULT_BOOTSTRAP",
    "ApplyReport",
    "BrokerUnreachableError",
    "ClusterInfo",
    "CommitFailedError",
    "ConfigMismatch",
    "DesiredTopic",
    "KafkaClients",
    "KafkaConnection",
    "KafkaSecurity",
    "KafkaSession",
    "LatencyHistogram",
    "LoopActorService",
    "PartitionClosedError",
    "PartitionFencedError",
    "PartitionWriter",
    "RoundTrip",
    "SaslMechanism",
    "Secret",
    "SecurityProtocol",
    "ServiceMetrics",
    "ServiceSettings",
    "TopicAlterError",
    "TopicConfigMismatchError",
    "TopicCreateError",
    "TopicNames",
    "TopicOutcome",
    "TopicResult",
    "TopicSetSpec",
    "WriterSettings",
    "admin_session",
    "apply_topics",
    "broker_answers",
    "check_broker",
    "delete_topics",
    "diff_topic",
    "is_safe_drift",
    "load_topic_set",
    "parse_bootstrap",
    "parse_topic_set",
    "resolve_bootstrap",
    "resolve_topics",
    "transactional_round_trip",
]
