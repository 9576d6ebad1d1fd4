"""Topic reconciliation without a broker: visibility wait, safe in-place alters.

``FakeAdmin`` stands in for ``AIOKafkaAdminClient`` with the broker behaviour that
matters here: created topics reach the metadata a few lookups later, AlterConfigs
(the legacy API aiokafka speaks) *replaces* a topic's overrides, and the cluster
reports its broker count and ``default.replication.factor`` (for the replication
decision).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import NewTopic

from turnstream.errors import ConfigError, TransportError
from turnstream.kafka import (
    ConfigMismatch,
    DesiredTopic,
    TopicOutcome,
    is_safe_drift,
    load_topic_set,
    resolve_topics,
)
from turnstream.kafka.admin.probe import ClusterReplication
from turnstream.kafka.admin.topic_changes import wait_until_visible
from turnstream.kafka.admin.topics import choose_replication, reconcile_topics
from turnstream.kafka.clients import DEFAULT_MAX_REQUEST_BYTES
from turnstream.kafka.connection import KafkaConnection

TOPICS_YAML = Path(__file__).resolve().parents[3] / "infra" / "topics.yaml"
DECLARED = {t.name: t for t in resolve_topics(load_topic_set(TOPICS_YAML))}
EVENTS = DECLARED["turnstream.events.v1"]
LOOPS = DECLARED["turnstream.loops.v1"]

BROKER_DEFAULTS = {
    "cleanup.policy": "delete",
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    "max.message.bytes": "1048588",
    "min.insync.replicas": "1",
}
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
UNKNOWN_TOPIC = 3


@dataclass
class _Response:
    body: dict[str, Any]

    def to_object(self) -> dict[str, Any]:
        return self.body


@dataclass
class FakeTopic:
    partitions: int
    replication_factor: int
    overrides: dict[str, str]
    hidden_for: int = 0  # metadata lookups before the topic shows up


@dataclass
class FakeAdmin:
    """The admin calls ``reconcile_topics`` makes, with a broker's semantics."""

    lag: int = 0
    topics: dict[str, FakeTopic] = field(default_factory=dict)
    alters: list[dict[str, str]] = field(default_factory=list)
    brokers: int = 1
    default_rf: str = "1"
    default_rf_source: int = STATIC_BROKER_CONFIG

    async def describe_cluster(self) -> dict[str, Any]:
        return {
            "cluster_id": "fake",
            "controller_id": 1,
            "brokers": [{"node_id": i} for i in range(1, self.brokers + 1)],
        }

    def visible(self, name: str) -> bool:
        return self.topics[name].hidden_for <= 0

    async def list_topics(self) -> list[str]:
        return list(self.topics)

    async def create_topics(self, new_topics: Sequence[Any], timeout_ms: int) -> Any:
        for t in new_topics:
            self.topics[t.name] = FakeTopic(
                t.num_partitions,
                t.replication_factor,
                dict(t.topic_configs),
                hidden_for=self.lag,
            )
        return _Response(
            {
                "topic_errors": [
                    {"topic": t.name, "error_code": 0, "error_message": None}
                    for t in new_topics
                ]
            }
        )

    async def describe_topics(self, names: list[str]) -> list[dict[str, Any]]:
        found = []
        for name in names:
            topic = self.topics.get(name)
            if topic is None or topic.hidden_for > 0:
                if topic is not None:
                    topic.hidden_for -= 1
                found.append(
                    {"topic": name, "error_code": UNKNOWN_TOPIC, "partitions": []}
                )
                continue
            partitions = [
                {
                    "partition": i,
                    "leader": 1,
                    "replicas": [1] * topic.replication_factor,
                }
                for i in range(topic.partitions)
            ]
            found.append({"topic": name, "error_code": 0, "partitions": partitions})
        return found

    async def describe_configs(self, resources: Sequence[Any]) -> list[_Response]:
        entries = []
        for resource in resources:
            if resource.resource_type.name == "BROKER":
                entries.append(
                    {
                        "error_code": 0,
                        "error_message": None,
                        "resource_name": resource.name,
                        "config_entries": [
                            {
                                "config_names": "default.replication.factor",
                                "config_value": self.default_rf,
                                "config_source": self.default_rf_source,
                            }
                        ],
                    }
                )
                continue
            topic = self.topics[resource.name]
            current = {**BROKER_DEFAULTS, **topic.overrides}
            keys = list(resource.configs) if resource.configs else list(current)
            entries.append(
                {
                    "error_code": 0,
                    "error_message": None,
                    "resource_name": resource.name,
                    "config_entries": [
                        {
                            "config_names": key,
                            "config_value": current.get(key),
                            "read_only": False,
                            "config_source": DYNAMIC_TOPIC_CONFIG
                            if key in topic.overrides
                            else DEFAULT_CONFIG,
                            "is_sensitive": False,
                            "config_synonyms": [],
                        }
                        for key in keys
                    ],
                }
            )
        return [_Response({"resources": entries})]

    async def alter_configs(self, resources: Sequence[Any]) -> list[_Response]:
        for resource in resources:
            self.alters.append(dict(resource.configs))
            # Legacy AlterConfigs: the given set *replaces* every override.
            self.topics[resource.name].overrides = dict(resource.configs)
        return [
            _Response(
                {
                    "resources": [
                        {
                            "error_code": 0,
                            "error_message": None,
                            "resource_name": r.name,
                        }
                        for r in resources
                    ]
                }
            )
        ]


def _conn(timeout: float = 5.0) -> KafkaConnection:
    return KafkaConnection(
        bootstrap="127.0.0.1:1", request_timeout=timeout, connect_timeout=timeout
    )


def _existing(admin: FakeAdmin, topic: DesiredTopic, overrides: dict[str, str]) -> None:
    admin.topics[topic.name] = FakeTopic(
        topic.partitions, topic.replication_factor or 1, overrides
    )


def test_topics_yaml_raises_the_message_limit_to_the_producers() -> None:
    """loops and events accept what the producers may send (8 MiB + 64 KiB)."""
    assert EVENTS.config["max.message.bytes"] == str(DEFAULT_MAX_REQUEST_BYTES)
    assert LOOPS.config["max.message.bytes"] == str(DEFAULT_MAX_REQUEST_BYTES)


async def test_apply_returns_only_once_created_topics_are_visible() -> None:
    """A lookup right after apply finds every created topic with its partitions."""
    admin = FakeAdmin(lag=3)

    report = await reconcile_topics(admin, _conn(), DECLARED.values())

    assert {r.outcome for r in report.results} == {TopicOutcome.CREATED}
    assert all(admin.visible(name) for name in DECLARED)


async def test_wait_until_visible_is_bounded() -> None:
    """A topic that never shows up is a retriable TransportError, not a hang."""
    admin = FakeAdmin(lag=10**6)
    await admin.create_topics([NewTopic("slow", 1, 1)], timeout_ms=1000)

    with pytest.raises(TransportError, match="not in the broker's metadata") as info:
        await wait_until_visible(admin, _conn(timeout=0.5), {"slow": 1})

    assert info.value.is_retriable


async def test_without_alter_a_drift_is_reported_not_changed() -> None:
    """The default stays strict: a differing value is a mismatch, nothing altered."""
    admin = FakeAdmin()
    _existing(admin, EVENTS, {"cleanup.policy": "delete", "retention.ms": "-1"})

    report = await reconcile_topics(admin, _conn(), [EVENTS])

    assert report.outcome(EVENTS.name) is TopicOutcome.MISMATCH
    assert [m.key for m in report.mismatches] == ["max.message.bytes"]
    assert admin.alters == []


async def test_alter_changes_the_drift_and_keeps_every_other_override() -> None:
    """--alter raises max.message.bytes; the journal's retention -1 survives."""
    admin = FakeAdmin()
    before = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}
    _existing(admin, EVENTS, dict(before))

    report = await reconcile_topics(admin, _conn(), [EVENTS], alter=True)

    assert report.outcome(EVENTS.name) is TopicOutcome.ALTERED
    assert report.ok
    assert report.altered == (
        ConfigMismatch(EVENTS.name, "max.message.bytes", "8454144", "1048588"),
    )
    assert admin.topics[EVENTS.name].overrides == {
        **before,
        "max.message.bytes": "8454144",
    }
    again = await reconcile_topics(admin, _conn(), [EVENTS], alter=True)
    assert again.outcome(EVENTS.name) is TopicOutcome.OK
    assert len(admin.alters) == 1


async def test_alter_leaves_unsafe_differences_as_mismatches() -> None:
    """A compacted-vs-delete difference is never altered; the safe one still is."""
    admin = FakeAdmin()
    _existing(admin, LOOPS, {"cleanup.policy": "delete"})

    report = await reconcile_topics(admin, _conn(), [LOOPS], alter=True)

    assert report.outcome(LOOPS.name) is TopicOutcome.MISMATCH
    assert [(m.key, m.actual) for m in report.mismatches] == [
        ("cleanup.policy", "delete")
    ]
    assert [m.key for m in report.altered] == ["max.message.bytes"]
    assert admin.topics[LOOPS.name].overrides["cleanup.policy"] == "delete"


@pytest.mark.parametrize(
    ("key", "actual", "expected", "safe"),
    [
        pytest.param("max.message.bytes", "1048588", "8454144", True, id="raise-max"),
        pytest.param("max.message.bytes", "8454144", "1048588", True, id="lower-max"),
        pytest.param("retention.ms", "3600000", "7200000", True, id="longer"),
        pytest.param("retention.ms", "604800000", "-1", True, id="to-unlimited"),
        pytest.param("retention.ms", "-1", "604800000", False, id="from-unlimited"),
        pytest.param("retention.ms", "7200000", "3600000", False, id="shorter"),
        pytest.param("retention.bytes", "-1", "1000", False, id="bytes-limited"),
        pytest.param("retention.ms", "x", "1", False, id="not-a-number"),
        pytest.param("cleanup.policy", "delete", "compact", False, id="policy"),
        pytest.param("partitions", "3", "6", False, id="partitions"),
        pytest.param("max.message.bytes", None, "8454144", False, id="unreported"),
        pytest.param("min.insync.replicas", "1", "2", True, id="raise-min-isr"),
        pytest.param("min.insync.replicas", "2", "2", True, id="same-min-isr"),
        pytest.param("min.insync.replicas", "2", "1", False, id="lower-min-isr"),
        pytest.param("min.insync.replicas", "x", "2", False, id="min-isr-nan"),
    ],
)
def test_is_safe_drift(key: str, actual: str | None, expected: str, safe: bool) -> None:
    """Only changes that cannot lose data or re-key a topic are safe."""
    assert is_safe_drift(ConfigMismatch("t", key, expected, actual)) is safe


@pytest.mark.parametrize(
    ("brokers", "default", "is_set", "factor", "reason"),
    [
        pytest.param(1, 1, True, 1, "cluster default", id="dev-broker"),
        pytest.param(3, 3, True, 3, "cluster default", id="cluster-default"),
        pytest.param(3, 2, True, 2, "cluster default", id="cluster-default-2"),
        pytest.param(3, 1, False, 3, "min(3, brokers)", id="stock-3"),
        pytest.param(5, 1, False, 3, "min(3, brokers)", id="stock-5"),
        pytest.param(2, 1, False, 2, "min(3, brokers)", id="stock-2"),
        pytest.param(1, 1, False, 1, "min(3, brokers)", id="stock-1"),
    ],
)
def test_choose_replication(
    brokers: int, default: int, is_set: bool, factor: int, reason: str
) -> None:
    """A configured cluster default wins; otherwise min(3, brokers)."""
    choice = choose_replication(ClusterReplication(brokers, default, is_set))
    assert (choice.factor, choice.reason, choice.brokers) == (factor, reason, brokers)


@pytest.mark.parametrize(
    ("brokers", "default"),
    [
        pytest.param(3, 1, id="rf1-on-3-brokers"),
        pytest.param(1, 3, id="more-than-brokers"),
    ],
)
def test_choose_replication_refuses(brokers: int, default: int) -> None:
    """RF 1 on several brokers (or more than there are) is a ConfigError (exit 2)."""
    with pytest.raises(ConfigError) as info:
        choose_replication(ClusterReplication(brokers, default, True))
    assert info.value.setting == "--replication-factor"


async def test_reconcile_decides_replication_and_min_isr_from_the_cluster() -> None:
    """Undecided topics get the cluster's RF; durable ones min ISR RF-1, deltas none."""
    admin = FakeAdmin(brokers=3, default_rf="3")
    undecided = resolve_topics(load_topic_set(TOPICS_YAML))
    assert all(t.replication_factor is None for t in undecided)
    report = await reconcile_topics(admin, _conn(), undecided)
    assert report.replication is not None
    assert report.replication.describe() == (
        "replication factor 3 (cluster default, 3 brokers)"
    )
    for name, topic in admin.topics.items():
        assert topic.replication_factor == 3, name
        isr = topic.overrides.get("min.insync.replicas")
        assert isr == (None if "deltas" in name else "2"), name


async def test_reconcile_refuses_rf1_default_on_a_cluster_unless_explicit() -> None:
    """default.replication.factor=1 on 3 brokers: refused, nothing created; an
    explicit factor 1 is accepted (min ISR 1)."""
    admin = FakeAdmin(brokers=3, default_rf="1")
    with pytest.raises(ConfigError, match="replication-factor"):
        await reconcile_topics(
            admin, _conn(), resolve_topics(load_topic_set(TOPICS_YAML))
        )
    assert admin.topics == {}
    explicit = resolve_topics(load_topic_set(TOPICS_YAML), replication_factor=1)
    report = await reconcile_topics(admin, _conn(), explicit)
    assert report.replication is None
    assert {t.replication_factor for t in admin.topics.values()} == {1}
    assert admin.topics["turnstream.events.v1"].overrides["min.insync.replicas"] == "1"
