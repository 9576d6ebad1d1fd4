"""Unit tests of the topic set: infra/topics.yaml, resolution, diffing, bootstrap."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnstream.errors import ConfigError
from turnstream.kafka import (
    ConfigMismatch,
    DesiredTopic,
    TopicConfigMismatchError,
    diff_topic,
    load_topic_set,
    parse_bootstrap,
    parse_topic_set,
    resolve_bootstrap,
    resolve_topics,
)
from turnstream.kafka.topology import MAX_COMMAND_BYTES

TOPICS_YAML = Path(__file__).resolve().parents[2] / "infra" / "topics.yaml"


def test_declared_topic_set_is_valid_and_complete() -> None:
    """infra/topics.yaml declares the six v1 topics with their retention rules."""
    spec = load_topic_set(TOPICS_YAML)
    by_name = {t.name: t for t in spec.topics}
    assert set(by_name) == {
        "turnstream.commands.v1",
        "turnstream.events.v1",
        "turnstream.loops.v1",
        "turnstream.history.v1",
        "turnstream.deltas.v1",
        "turnstream.commands.dlq.v1",
    }
    assert all(t.key == "loop_id" for t in spec.topics)
    events = by_name["turnstream.events.v1"].config
    assert events["cleanup.policy"] == "delete"  # a journal is never compacted
    assert events["retention.ms"] == "-1"
    assert by_name["turnstream.loops.v1"].config["cleanup.policy"] == "compact"
    assert by_name["turnstream.history.v1"].config["cleanup.policy"] == "compact"
    assert int(by_name["turnstream.deltas.v1"].config["retention.ms"]) <= 3_600_000
    assert by_name["turnstream.commands.dlq.v1"].config["cleanup.policy"] == "delete"
    # Replication is decided per cluster when applied, never fixed to 1 here.
    assert spec.defaults.replication_factor is None
    durable = {t.name for t in spec.topics if t.durable}
    assert durable == set(by_name) - {"turnstream.deltas.v1"}


def test_resolve_leaves_replication_to_the_cluster_unless_given() -> None:
    """No override: RF undecided; an override sets RF and min ISR RF-1 (durable)."""
    undecided = {t.name: t for t in resolve_topics(load_topic_set(TOPICS_YAML))}
    assert {t.replication_factor for t in undecided.values()} == {None}
    assert "min.insync.replicas" not in undecided["turnstream.events.v1"].config
    given = {
        t.name: t
        for t in resolve_topics(load_topic_set(TOPICS_YAML), replication_factor=3)
    }
    assert {t.replication_factor for t in given.values()} == {3}
    assert given["turnstream.events.v1"].config["min.insync.replicas"] == "2"
    assert given["turnstream.commands.v1"].config["min.insync.replicas"] == "2"
    assert "min.insync.replicas" not in given["turnstream.deltas.v1"].config
    one = resolve_topics(load_topic_set(TOPICS_YAML), replication_factor=1)
    assert one[0].config["min.insync.replicas"] == "1"


def test_declared_topics_are_co_partitioned() -> None:
    """Every topic keyed by loop ID has the same partition count."""
    topics = resolve_topics(load_topic_set(TOPICS_YAML))
    assert len({t.partitions for t in topics}) == 1


SMALL = """
defaults: {partitions: 2, replication_factor: 1}
topics:
  - name: a.v1
    key: loop_id
    config: {cleanup.policy: delete, retention.ms: -1, preallocate: true}
  - name: b.v1
    key: loop_id
    partitions: 5
"""


def test_config_values_become_kafka_strings() -> None:
    """YAML ints and bools are turned into the strings Kafka reports."""
    spec = parse_topic_set(SMALL)
    assert spec.topics[0].config == {
        "cleanup.policy": "delete",
        "retention.ms": "-1",
        "preallocate": "true",
    }


def test_resolve_applies_overrides_prefix_and_suffix() -> None:
    """Partition and RF overrides apply to all topics; names get prefix and suffix."""
    spec = parse_topic_set(SMALL)
    plain = resolve_topics(spec)
    assert [(t.name, t.partitions) for t in plain] == [("a.v1", 2), ("b.v1", 5)]
    custom = resolve_topics(
        spec, partitions=7, replication_factor=3, prefix="t-1.", suffix=".x"
    )
    assert [t.name for t in custom] == ["t-1.a.v1.x", "t-1.b.v1.x"]
    assert {t.partitions for t in custom} == {7}
    assert {t.replication_factor for t in custom} == {3}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        pytest.param("topics: [", "not valid YAML", id="yaml"),
        pytest.param("defaults: {partitions: 1}\n", "topics", id="no-topics"),
        pytest.param(
            "topics: [{name: a, key: k}, {name: a, key: k}]", "declared twice", id="dup"
        ),
        pytest.param("topics: [{name: 'a b', key: k}]", "legal topic name", id="name"),
        pytest.param(
            "topics: [{name: a, key: k, partitions: 0}]", "greater than 0", id="zero"
        ),
        pytest.param("topics: [{name: a, key: k, colour: red}]", "colour", id="extra"),
        pytest.param(
            "topics: [{name: a, key: k, config: {x: [1]}}]", "scalars", id="nested"
        ),
    ],
)
def test_invalid_topic_sets_are_config_errors(text: str, fragment: str) -> None:
    """Every malformed file is a ConfigError whose message says what is wrong."""
    with pytest.raises(ConfigError) as info:
        parse_topic_set(text, source="bad.yaml")
    assert info.value.setting == "bad.yaml"
    assert fragment in str(info.value)


def test_missing_topic_file_is_a_config_error(tmp_path: Path) -> None:
    """A missing file names its path."""
    with pytest.raises(ConfigError, match="cannot read"):
        load_topic_set(tmp_path / "nope.yaml")


def test_resolve_rejects_illegal_prefix() -> None:
    """A prefix producing an illegal topic name is caught before any network call."""
    with pytest.raises(ConfigError):
        resolve_topics(parse_topic_set(SMALL), prefix="bad prefix/")


EVENTS = DesiredTopic(
    "turnstream.events.v1", 3, 1, {"cleanup.policy": "delete", "retention.ms": "-1"}
)


@pytest.mark.parametrize(
    ("partitions", "rf", "configs", "expected"),
    [
        pytest.param(
            3, 1, {"cleanup.policy": "delete", "retention.ms": "-1"}, (), id="match"
        ),
        pytest.param(
            3,
            1,
            {"cleanup.policy": "delete", "retention.ms": "-1", "segment.ms": "1"},
            (),
            id="undeclared-keys-are-free",
        ),
        pytest.param(
            3,
            1,
            {"cleanup.policy": "compact", "retention.ms": "-1"},
            (
                ConfigMismatch(
                    "turnstream.events.v1", "cleanup.policy", "delete", "compact"
                ),
            ),
            id="policy",
        ),
        pytest.param(
            3,
            1,
            {"cleanup.policy": "delete", "retention.ms": "604800000"},
            (
                ConfigMismatch(
                    "turnstream.events.v1", "retention.ms", "-1", "604800000"
                ),
            ),
            id="retention",
        ),
        pytest.param(
            6,
            1,
            {"cleanup.policy": "delete", "retention.ms": "-1"},
            (ConfigMismatch("turnstream.events.v1", "partitions", "3", "6"),),
            id="partitions",
        ),
        pytest.param(
            3,
            2,
            {"cleanup.policy": "delete", "retention.ms": "-1"},
            (ConfigMismatch("turnstream.events.v1", "replication.factor", "1", "2"),),
            id="replication",
        ),
        pytest.param(
            3,
            1,
            {"cleanup.policy": "delete"},
            (ConfigMismatch("turnstream.events.v1", "retention.ms", "-1", None),),
            id="missing-key",
        ),
    ],
)
def test_diff_topic(
    partitions: int,
    rf: int,
    configs: dict[str, str | None],
    expected: tuple[ConfigMismatch, ...],
) -> None:
    """Only declared settings are compared; each difference names key and values."""
    got = diff_topic(
        EVENTS, partitions=partitions, replication_factor=rf, configs=configs
    )
    assert got == expected


def test_diff_treats_cleanup_policy_as_a_set() -> None:
    """ "compact,delete" equals "delete, compact"."""
    topic = DesiredTopic("t", 1, 1, {"cleanup.policy": "compact,delete"})
    assert (
        diff_topic(
            topic,
            partitions=1,
            replication_factor=1,
            configs={"cleanup.policy": "delete, compact"},
        )
        == ()
    )


def test_mismatch_error_is_typed() -> None:
    """The error exposes topic/key/expected/actual and a stable kind."""
    mismatch = ConfigMismatch("t", "cleanup.policy", "delete", "compact")
    error = TopicConfigMismatchError((mismatch,))
    assert error.kind == "topic_config_mismatch"
    assert (error.topic, error.key, error.expected, error.actual) == (
        "t",
        "cleanup.policy",
        "delete",
        "compact",
    )
    assert "cleanup.policy" in str(error)


@pytest.mark.parametrize(
    ("flag", "env", "expected"),
    [
        pytest.param(None, {}, "127.0.0.1:19092", id="default"),
        pytest.param(
            None, {"TURNSTREAM_BROKER_PORT": "29092"}, "127.0.0.1:29092", id="port"
        ),
        pytest.param(None, {"KAFKA_BOOTSTRAP_SERVERS": "k:9092"}, "k:9092", id="env"),
        pytest.param(
            "a:1, b:2", {"KAFKA_BOOTSTRAP_SERVERS": "k:9092"}, "a:1,b:2", id="flag-wins"
        ),
        pytest.param("[::1]:9092", {}, "[::1]:9092", id="ipv6"),
    ],
)
def test_resolve_bootstrap(
    flag: str | None, env: dict[str, str], expected: str
) -> None:
    """Flag, then KAFKA_BOOTSTRAP_SERVERS, then the local broker's port."""
    assert resolve_bootstrap(flag, env) == expected


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param("", id="empty"),
        pytest.param("localhost", id="no-port"),
        pytest.param("host:99999", id="port-range"),
        pytest.param("a:1,,b", id="bad-entry"),
    ],
)
def test_parse_bootstrap_rejects(raw: str) -> None:
    """Malformed bootstrap lists are ConfigErrors."""
    with pytest.raises(ConfigError):
        parse_bootstrap(raw)


def test_topics_every_answer_to_a_command_fits_its_topic() -> None:
    """A command the commands topic accepts can be dead-lettered (with headers),
    journaled (TurnStarted carries it) and snapshotted: each of those topics takes at
    least the commands limit plus 64 KiB of headroom.
    """
    from pathlib import Path

    from turnstream.kafka.admin.topics import load_topic_set

    spec = load_topic_set(Path(__file__).resolve().parents[2] / "infra" / "topics.yaml")
    limits = {
        t.name: int(t.config["max.message.bytes"])
        for t in spec.topics
        if "max.message.bytes" in t.config
    }
    commands = limits["turnstream.commands.v1"]
    for name in (
        "turnstream.commands.dlq.v1",
        "turnstream.events.v1",
        "turnstream.loops.v1",
        "turnstream.history.v1",
    ):
        assert limits[name] >= commands + 64 * 1024, name


def test_the_clients_command_limit_is_the_commands_topics() -> None:
    """The client refuses a command by the commands topic's own max.message.bytes."""
    spec = load_topic_set(TOPICS_YAML)
    commands = next(t for t in spec.topics if t.name == "turnstream.commands.v1")
    assert int(commands.config["max.message.bytes"]) == MAX_COMMAND_BYTES
