"""The administration side of the Kafka adapters: brokers, topics and ACLs.

A table of contents:

- ``probe``: bounded admin sessions (built by ``KafkaClients``, so they take
  the same ``KafkaSecurity``), the broker readiness probe and the
  transactional round trip ``turnstream smoke`` runs;
- ``topics``: ``infra/topics.yaml`` and its idempotent :func:`apply_topics`;
- ``topic_changes``: waiting until created topics are visible, and the safe
  in-place config changes of ``topics apply --alter``;
- ``topic_check``: the settings ``actor run`` verifies on every start (journal
  not compacted, state compacted, size limits, min ISR);
- ``acls``: the least-privilege ACLs of the actor, client and analytics roles
  and :func:`~turnstream.kafka.admin.acls.apply_acls` (``turnstream acls``).

Imports the shared modules of :mod:`turnstream.kafka`; never the actor or
client subpackages.
"""

from turnstream.kafka.admin.probe import (
    ClusterInfo,
    RoundTrip,
    admin_session,
    broker_answers,
    check_broker,
    group_members,
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

__all__ = [
    "ApplyReport",
    "ClusterInfo",
    "DesiredTopic",
    "RoundTrip",
    "TopicOutcome",
    "TopicResult",
    "TopicSetSpec",
    "admin_session",
    "apply_topics",
    "broker_answers",
    "check_broker",
    "delete_topics",
    "diff_topic",
    "group_members",
    "is_safe_drift",
    "load_topic_set",
    "parse_topic_set",
    "resolve_topics",
    "transactional_round_trip",
]
