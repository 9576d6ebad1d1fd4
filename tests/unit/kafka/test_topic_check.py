"""The actor's start-up topic check, the pure part: which settings are unsafe."""

from __future__ import annotations

import pytest

from turnstream.kafka.admin.topic_check import UnsafeTopicSettingsError, unsafe_settings
from turnstream.kafka.admin.topics import DesiredTopic
from turnstream.kafka.errors import ConfigMismatch

JOURNAL = DesiredTopic(
    "events",
    3,
    None,
    {
        "cleanup.policy": "delete",
        "retention.ms": "-1",
        "retention.bytes": "-1",
        "max.message.bytes": "8454144",
    },
    durable=True,
)
KEYS = ("cleanup.policy", "retention.ms", "retention.bytes", "max.message.bytes")
GOOD = {**JOURNAL.config, "min.insync.replicas": "2"}


@pytest.mark.parametrize(
    ("rf", "configs", "expected"),
    [
        pytest.param(3, GOOD, [], id="as-declared"),
        pytest.param(
            3, {**GOOD, "max.message.bytes": "16777216"}, [], id="larger-limit-ok"
        ),
        pytest.param(3, {**GOOD, "min.insync.replicas": "3"}, [], id="higher-isr-ok"),
        pytest.param(
            1, {**GOOD, "min.insync.replicas": "1"}, [], id="single-broker-isr-1"
        ),
        pytest.param(
            3,
            {**GOOD, "min.insync.replicas": "1"},
            [("min.insync.replicas", "2", "1")],
            id="multi-broker-isr-1",
        ),
        pytest.param(
            3,
            {**GOOD, "cleanup.policy": "compact,delete"},
            [("cleanup.policy", "delete", "compact,delete")],
            id="compacted-journal",
        ),
        pytest.param(
            3,
            {**GOOD, "max.message.bytes": "1048588"},
            [("max.message.bytes", "8454144", "1048588")],
            id="smaller-limit",
        ),
        pytest.param(
            3,
            {**GOOD, "retention.bytes": "1073741824"},
            [("retention.bytes", "-1", "1073741824")],
            id="bounded-retention",
        ),
    ],
)
def test_unsafe_settings_checks_the_declared_keys_and_min_isr(
    rf: int, configs: dict[str, str], expected: list[tuple[str, str, str]]
) -> None:
    """Limits may be higher; min ISR must reach RF - 1; the rest is exact."""
    found = unsafe_settings(
        JOURNAL, KEYS, partitions=3, replication_factor=rf, configs=configs
    )
    assert [(m.key, m.expected, m.actual) for m in found] == expected


def test_unsafe_settings_ignores_undeclared_keys() -> None:
    """Only the keys asked for are compared (a commands topic: just min ISR)."""
    found = unsafe_settings(
        JOURNAL,
        (),
        partitions=3,
        replication_factor=3,
        configs={"cleanup.policy": "compact", "min.insync.replicas": "2"},
    )
    assert found == ()


def test_unsafe_topic_settings_error_names_each_fix() -> None:
    """Alterable differences point at --alter; the rest at recreating."""
    error = UnsafeTopicSettingsError(
        (
            ConfigMismatch("events", "cleanup.policy", "delete", "compact"),
            ConfigMismatch("loops", "max.message.bytes", "8454144", "1048576"),
        )
    )
    assert error.kind == "unsafe_topic_settings"
    assert error.setting == "topic settings"
    assert str(error.reason) == (
        "2 topic setting(s) would lose or refuse data: "
        "topic events: cleanup.policy is 'compact', expected 'delete' "
        "(fix: recreate the topic, `turnstream topics apply` declares it); "
        "topic loops: max.message.bytes is '1048576', expected '8454144' "
        "(fix: `turnstream topics apply --alter`)"
    )
