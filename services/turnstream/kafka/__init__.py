"""Kafka adapters: the only package that imports aiokafka.

A table of contents, by role -- open the folder of the job at hand:

- ``client/``: what an application needs to talk to loops -- ``KafkaSession``
  (submit, interrupt, answer gates, subscribe, replay, ``submit_and_wait``),
  ``Turn``/``TurnOutcome`` (one input followed to its end) and
  ``JournalConsumer`` (every loop's journal for downstream services); the
  public surface over it is ``turnstream.client``;
- ``actor/``: the loop-actor service -- ``LoopActorService`` (group member),
  ``PartitionRunner`` (one owned partition), ``PartitionWriter`` (its
  transactions), ``CommandOffsets``, ``PartitionJournal``, ``DeltaPublisher``,
  ``ServiceMetrics``;
- ``admin/``: brokers and topics -- readiness probe, ``turnstream smoke``'s
  round trip, ``infra/topics.yaml`` and ``apply_topics``.

Shared by all three, beside them:

- ``connection``: ``KafkaConnection`` (bootstrap servers and per-call
  timeouts) and the bootstrap resolution from flags and
  ``KAFKA_BOOTSTRAP_SERVERS``; ``security``: ``KafkaSecurity`` and ``Secret``;
  ``clients``: ``KafkaClients``, which builds every producer, consumer and
  admin client from one settings object; ``backoff``: exponential backoff with
  jitter and the reconnect gate every client built there gets;
- ``topology``: ``TopicNames`` and the co-partitioning check; ``records``:
  record keys and dead-letter headers; ``reader``: bounded partition scans;
- ``errors``: typed admin, login, TLS and ACL errors; ``faults``:
  classification of aiokafka errors (retriable, fenced, permanent, denied) and
  the partition errors; ``diagnose``: why a connection failed (refused login,
  untrusted certificate, wrong protocol) and which permission an ACL denied.

Limits to configure on the broker: a loop's state record holds its whole history,
so raise ``max.message.bytes`` of ``turnstream.loops.v1`` (and of
``turnstream.events.v1`` for large steps) to the producers' ``max_request_size``
(``clients.DEFAULT_MAX_REQUEST_BYTES``, 8 MiB + 64 KiB); a state larger than the
writer's ``state_max_bytes`` is stored as a "replay the journal" marker instead.

Nothing outside ``turnstream.kafka`` (and the composition roots and CLI that wire it)
may import aiokafka; the core never imports this package (import-linter checks both).
"""

from turnstream.kafka.actor.metrics import LatencyHistogram, ServiceMetrics
from turnstream.kafka.actor.service import LoopActorService, ServiceSettings
from turnstream.kafka.actor.writer import PartitionWriter, WriterSettings
from turnstream.kafka.admin import (
    ClusterInfo,
    RoundTrip,
    admin_session,
    broker_answers,
    check_broker,
    transactional_round_trip,
)
from turnstream.kafka.admin.topic_changes import is_safe_drift
from turnstream.kafka.admin.topics import (
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
from turnstream.kafka.client.session import KafkaSession
from turnstream.kafka.clients import KafkaClients
from turnstream.kafka.connection import (
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
from turnstream.kafka.security import (
    KafkaSecurity,
    SaslMechanism,
    Secret,
    SecurityProtocol,
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
