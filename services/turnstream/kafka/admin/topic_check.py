"""The topic settings a loop actor's correctness depends on, checked at start-up.

Owns :func:`unsafe_settings` (pure: which of a topic's declared settings that
correctness depends on the broker's topic breaks) and :func:`verify_topics`
(read the topics, raise :class:`UnsafeTopicSettingsError` naming each
difference and its fix). ``turnstream actor run`` calls it on every start, with
or without ``--ensure-topics``: a compacted journal silently erases history, an
uncompacted state topic grows forever, and a size limit below the declared one
refuses records the actor must write.

What is checked, from the declared set (``infra/topics.yaml``):

- the journal (events): ``cleanup.policy``, ``retention.ms``,
  ``retention.bytes`` and ``max.message.bytes``;
- the state topics (loops and history): ``cleanup.policy`` and
  ``max.message.bytes``;
- the dead-letter topic: ``max.message.bytes``;
- every durable topic: ``min.insync.replicas`` at least RF - 1 (the rule of
  ``topics.yaml``, from the topic's own replication factor, so a single-broker
  topic with replication factor 1 always passes).

``max.message.bytes`` and ``min.insync.replicas`` may exceed the declared value.
The comparison is ``topics.diff_topic``'s. A principal without DescribeConfigs
on the topics (the actor role's ACLs do not grant it) gets an INFO line and
no check, as the broker probe tolerates the same denial; a topic an ACL hides
entirely is skipped, left to the service's start-up, which names the grant.

Part of ``turnstream.kafka``, the only package allowed to import aiokafka.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from turnstream.errors import ConfigError
from turnstream.kafka.admin.probe import admin_session, bounded
from turnstream.kafka.admin.topic_changes import (
    describe_topic_configs,
    is_safe_drift,
    topic_layout,
)
from turnstream.kafka.admin.topics import DesiredTopic, diff_topic
from turnstream.kafka.connection import KafkaConnection
from turnstream.kafka.errors import ConfigMismatch
from turnstream.kafka.security import KafkaSecurity
from turnstream.kafka.topology import TopicNames

__all__ = ["UnsafeTopicSettingsError", "unsafe_settings", "verify_topics"]

_log = logging.getLogger("turnstream.kafka.admin.topic_check")

_MIN_ISR: Final = "min.insync.replicas"
_AT_LEAST: Final = frozenset({"max.message.bytes", _MIN_ISR})
_JOURNAL_KEYS: Final = (
    "cleanup.policy",
    "retention.ms",
    "retention.bytes",
    "max.message.bytes",
)
_STATE_KEYS: Final = ("cleanup.policy", "max.message.bytes")
_DLQ_KEYS: Final = ("max.message.bytes",)
_UNKNOWN_TOPIC: Final = 3
_TOPIC_AUTHORIZATION_FAILED: Final = 29


class UnsafeTopicSettingsError(ConfigError):
    """Existing topics break settings the actor's correctness depends on.

    Attributes:
        mismatches: every differing setting (at least one).
    """

    kind = "unsafe_topic_settings"

    def __init__(self, mismatches: tuple[ConfigMismatch, ...]) -> None:
        if not mismatches:
            raise ValueError("UnsafeTopicSettingsError needs at least one mismatch")
        self.mismatches = mismatches
        fixes = "; ".join(f"{m} ({_fix(m)})" for m in mismatches)
        super().__init__(
            "topic settings",
            f"{len(mismatches)} topic setting(s) would lose or refuse data: {fixes}",
        )


def _fix(mismatch: ConfigMismatch) -> str:
    if is_safe_drift(mismatch):
        return "fix: `turnstream topics apply --alter`"
    return "fix: recreate the topic, `turnstream topics apply` declares it"


def checked_keys(names: TopicNames) -> dict[str, tuple[str, ...]]:
    """Per topic name, the declared config keys the actor verifies."""
    return {
        names.events: _JOURNAL_KEYS,
        names.loops: _STATE_KEYS,
        names.history: _STATE_KEYS,
        names.dead_letters: _DLQ_KEYS,
    }


def _enough(mismatch: ConfigMismatch) -> bool:
    if mismatch.key not in _AT_LEAST or mismatch.actual is None:
        return False
    try:
        return int(mismatch.actual) >= int(mismatch.expected)
    except ValueError:
        return False


def unsafe_settings(
    declared: DesiredTopic,
    keys: Collection[str],
    *,
    partitions: int,
    replication_factor: int,
    configs: Mapping[str, str | None],
) -> tuple[ConfigMismatch, ...]:
    """The checked settings of one topic that the broker's topic breaks. Pure.

    Args:
        declared: the declared topic (its replication factor is not used).
        keys: the declared config keys to check (``min.insync.replicas`` is
            added for a durable topic).
        partitions: the broker's partition count (checked elsewhere).
        replication_factor: the broker's replication factor.
        configs: the broker's values for (at least) those keys.
    """
    config = {k: v for k, v in declared.config.items() if k in keys}
    narrowed = DesiredTopic(
        declared.name, partitions, None, config, declared.durable
    ).with_replication(replication_factor)
    found = diff_topic(
        narrowed,
        partitions=partitions,
        replication_factor=replication_factor,
        configs=configs,
    )
    return tuple(m for m in found if not _enough(m))


async def verify_topics(
    conn: KafkaConnection,
    declared: Sequence[DesiredTopic],
    names: TopicNames,
    *,
    security: KafkaSecurity | None = None,
) -> None:
    """Raise unless the actor's topics keep the settings it depends on.

    Args:
        conn: where Kafka is, and the per-call timeouts.
        declared: the declared topic set (``resolve_topics`` of topics.yaml,
            with the deployment's prefix and suffix).
        names: the deployment's topic names.
        security: protocol, SASL and TLS settings.

    Raises:
        UnsafeTopicSettingsError: a checked setting differs (exit 2).
        ConfigError: a checked topic does not exist.
        KafkaAuthorizationError: an ACL hides a topic.
        TransportError: a call failed or timed out.
    """
    keys = checked_keys(names)
    wanted = [t for t in declared if t.name in keys or t.durable]
    if not wanted:
        return
    async with admin_session(conn, security=security) as admin:
        layout = await _replication(admin, conn, [t.name for t in wanted])
        # A topic an ACL hides is the service's to report, naming the grant
        # it needs (Read or Write), as it does at start-up.
        wanted = [t for t in wanted if t.name in layout]
        if not wanted:
            return
        configs = await _configs(
            admin, conn, {t.name: (*keys.get(t.name, ()), _MIN_ISR) for t in wanted}
        )
    if configs is None:
        # INFO, not a warning: the actor role is granted no DescribeConfigs by
        # design (turnstream acls), so this is how a secured actor starts.
        _log.info(
            "topic settings not verified: DescribeConfigs on the topics is denied "
            "(grant it to check cleanup policy, size limits and min ISR at start-up)"
        )
        return
    found: list[ConfigMismatch] = []
    for topic in wanted:
        partitions, rf = layout[topic.name]
        found.extend(
            unsafe_settings(
                topic,
                keys.get(topic.name, ()),
                partitions=partitions,
                replication_factor=rf,
                configs=configs.get(topic.name, {}),
            )
        )
    if found:
        raise UnsafeTopicSettingsError(tuple(found))


async def _replication(
    admin: Any, conn: KafkaConnection, topics: Sequence[str]
) -> dict[str, tuple[int, int]]:
    metadata = await bounded(
        admin.describe_topics(list(topics)),
        seconds=conn.request_timeout,
        operation="describe topics",
    )
    layout: dict[str, tuple[int, int]] = {}
    for entry in metadata:
        name, code = str(entry["topic"]), int(entry["error_code"])
        if code == _TOPIC_AUTHORIZATION_FAILED:
            continue
        if code == _UNKNOWN_TOPIC or (code == 0 and not entry["partitions"]):
            raise ConfigError(
                "topics", f"topic {name} does not exist (run `turnstream topics apply`)"
            )
        layout[name] = topic_layout(entry)
    return layout


async def _configs(
    admin: Any, conn: KafkaConnection, keys: Mapping[str, Sequence[str]]
) -> dict[str, dict[str, str | None]] | None:
    """Each topic's values of ``keys``; ``None`` if DescribeConfigs is denied."""
    resources = [
        ConfigResource(ConfigResourceType.TOPIC, name, configs=dict.fromkeys(wanted))
        for name, wanted in keys.items()
    ]
    try:
        return await describe_topic_configs(admin, conn, resources, check=_denied)
    except _ConfigsDenied:
        return None


class _ConfigsDenied(Exception):
    """DescribeConfigs on a topic is denied."""


def _denied(code: int, _topic: str) -> None:
    if code == _TOPIC_AUTHORIZATION_FAILED:
        raise _ConfigsDenied
