"""``topics apply`` against a real broker: idempotent, strict about config, and
able to change safe differences in place (``--alter``) without losing the others."""

from __future__ import annotations

import asyncio

import pytest
from tests.support.kafka import KafkaNames, create_topic
from typer.testing import CliRunner

from turnstream.cli.main import app
from turnstream.kafka import (
    KafkaConnection,
    TopicConfigMismatchError,
    TopicCreateError,
    TopicOutcome,
    admin_session,
    apply_topics,
    load_topic_set,
    resolve_topics,
)
from turnstream.kafka.admin.topic_changes import topic_overrides
from turnstream.kafka.admin.topics import DesiredTopic

pytestmark = pytest.mark.kafka

SPEC = load_topic_set(
    __import__("pathlib").Path(__file__).resolve().parents[2] / "infra" / "topics.yaml"
)


def _conn(bootstrap: str) -> KafkaConnection:
    return KafkaConnection(bootstrap=bootstrap, request_timeout=20.0)


async def test_apply_creates_then_reports_ok(
    kafka_bootstrap: str, kafka_names: KafkaNames
) -> None:
    """First run creates every topic, the second finds them all as declared."""
    topics = resolve_topics(SPEC, prefix=kafka_names.prefix())
    first = await apply_topics(_conn(kafka_bootstrap), topics)
    assert {r.outcome for r in first.results} == {TopicOutcome.CREATED}
    second = await apply_topics(_conn(kafka_bootstrap), topics)
    assert [r.outcome for r in second.results] == [TopicOutcome.OK] * len(topics)
    assert second.ok


async def test_apply_rejects_a_journal_created_compacted(
    kafka_bootstrap: str, kafka_names: KafkaNames
) -> None:
    """An events topic with cleanup.policy=compact is a typed error, not accepted."""
    prefix = kafka_names.prefix()
    topics = resolve_topics(SPEC, prefix=prefix)
    events = next(t for t in topics if t.name.endswith("turnstream.events.v1"))
    await create_topic(
        kafka_bootstrap,
        events.name,
        partitions=events.partitions,
        config={**events.config, "cleanup.policy": "compact"},
    )
    with pytest.raises(TopicConfigMismatchError) as info:
        await apply_topics(_conn(kafka_bootstrap), topics)
    error = info.value
    assert error.kind == "topic_config_mismatch"
    assert (error.topic, error.key, error.expected, error.actual) == (
        events.name,
        "cleanup.policy",
        "delete",
        "compact",
    )
    assert len(error.mismatches) == 1

    report = await apply_topics(_conn(kafka_bootstrap), topics, raise_on_mismatch=False)
    assert report.outcome(events.name) is TopicOutcome.MISMATCH
    others = [r.outcome for r in report.results if r.topic.name != events.name]
    assert set(others) == {TopicOutcome.OK}  # created by the first, failed, run


async def test_apply_rejects_a_wrong_partition_count(
    kafka_bootstrap: str, kafka_names: KafkaNames
) -> None:
    """An existing topic with another partition count is reported with both counts."""
    name = kafka_names.topic("parts")
    await create_topic(kafka_bootstrap, name, partitions=2)
    wanted = DesiredTopic(name, 4, 1, {"cleanup.policy": "delete"})
    with pytest.raises(TopicConfigMismatchError) as info:
        await apply_topics(_conn(kafka_bootstrap), [wanted])
    assert (info.value.key, info.value.expected, info.value.actual) == (
        "partitions",
        "4",
        "2",
    )


async def test_apply_reports_broker_refusal_as_typed_error(
    kafka_bootstrap: str, kafka_names: KafkaNames
) -> None:
    """Replication factor 3 on one broker: the per-topic error code is surfaced."""
    topic = DesiredTopic(kafka_names.topic("rf3"), 1, 3, {})
    with pytest.raises(TopicCreateError) as info:
        await apply_topics(_conn(kafka_bootstrap), [topic])
    assert info.value.topic == topic.name
    assert info.value.error_name == "InvalidReplicationFactorError"
    assert info.value.kind == "topic_create_failed"


def test_cli_apply_is_idempotent_and_fails_on_mismatch(
    kafka_bootstrap: str, kafka_names: KafkaNames
) -> None:
    """`turnstream topics apply` twice exits 0 twice; a changed count exits 1."""
    runner = CliRunner()
    base = ["topics", "apply", "--bootstrap", kafka_bootstrap, "--prefix"]
    args = [*base, kafka_names.prefix()]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "created" in first.output
    second = runner.invoke(app, args)
    assert second.exit_code == 0, second.output
    assert "created" not in second.output
    assert second.output.count(" ok ") == len(SPEC.topics)
    assert "MISMATCH" not in second.output
    third = runner.invoke(app, [*args, "--partitions", "5"])
    assert third.exit_code == 1  # a topic mismatch is a failed operation
    assert "partitions is '3', expected '5'" in third.output
    assert "topic_config_mismatch" in third.output


async def test_apply_returns_with_created_topics_visible(
    kafka_bootstrap: str, kafka_names: KafkaNames
) -> None:
    """Right after apply, a new client's metadata has every partition, led."""
    topics = resolve_topics(SPEC, prefix=kafka_names.prefix())
    conn = _conn(kafka_bootstrap)
    report = await apply_topics(conn, topics)
    assert {r.outcome for r in report.results} == {TopicOutcome.CREATED}
    async with admin_session(conn) as admin:
        metadata = await admin.describe_topics([t.name for t in topics])
    by_name = {entry["topic"]: entry for entry in metadata}
    for topic in topics:
        entry = by_name[topic.name]
        assert entry["error_code"] == 0
        assert len(entry["partitions"]) == topic.partitions
        assert all(p["leader"] >= 0 for p in entry["partitions"])


def _without_max_message_bytes(topic: DesiredTopic) -> dict[str, str]:
    return {k: v for k, v in topic.config.items() if k != "max.message.bytes"}


async def test_apply_alter_raises_the_message_limit_and_keeps_retention(
    kafka_bootstrap: str, kafka_names: KafkaNames
) -> None:
    """A journal created before max.message.bytes was declared: reported, then
    altered in place, and its retention.ms=-1 (a topic override) survives."""
    topics = resolve_topics(SPEC, prefix=kafka_names.prefix())
    events = next(t for t in topics if t.name.endswith("turnstream.events.v1"))
    old = _without_max_message_bytes(events)
    await create_topic(
        kafka_bootstrap, events.name, partitions=events.partitions, config=old
    )
    conn = _conn(kafka_bootstrap)

    strict = await apply_topics(conn, [events], raise_on_mismatch=False)
    assert strict.outcome(events.name) is TopicOutcome.MISMATCH
    assert [(m.key, m.expected) for m in strict.mismatches] == [
        ("max.message.bytes", "8454144")
    ]

    altered = await apply_topics(conn, [events], alter=True)
    assert altered.outcome(events.name) is TopicOutcome.ALTERED
    async with admin_session(conn) as admin:
        overrides = await topic_overrides(admin, conn, events.name)
    assert overrides == {**old, "max.message.bytes": "8454144"}

    again = await apply_topics(conn, [events])
    assert again.outcome(events.name) is TopicOutcome.OK


def test_cli_apply_alter_fixes_safe_drift_only_when_asked(
    kafka_bootstrap: str, kafka_names: KafkaNames
) -> None:
    """Without --alter: exit 1 and the hint; with it: exit 0, 'altered'; then ok."""
    prefix = kafka_names.prefix()
    topics = resolve_topics(SPEC, prefix=prefix)
    runner = CliRunner()
    args = ["topics", "apply", "--bootstrap", kafka_bootstrap, "--prefix", prefix]
    for topic in topics:
        asyncio.run(
            create_topic(
                kafka_bootstrap,
                topic.name,
                partitions=topic.partitions,
                config=_without_max_message_bytes(topic),
            )
        )

    strict = runner.invoke(app, args)
    assert strict.exit_code == 1, strict.output
    assert "max.message.bytes is '1048588', expected '8454144'" in strict.output
    assert "turnstream topics apply --alter" in strict.output

    fixed = runner.invoke(app, [*args, "--alter"])
    assert fixed.exit_code == 0, fixed.output
    altered = [line for line in fixed.output.splitlines() if "altered" in line]
    # Every topic declaring max.message.bytes (commands, events, loops,
    # history, dlq): a table line and a detail line each.
    assert len(altered) == 10, fixed.output
    assert fixed.output.count("altered from '1048588' to '8454144'") == 3
    assert fixed.output.count("altered from '1048588' to '1048576'") == 1
    assert fixed.output.count("altered from '1048588' to '1114112'") == 1

    after = runner.invoke(app, args)
    assert after.exit_code == 0, after.output
    assert after.output.count(" ok ") == len(SPEC.topics)


def test_cli_apply_on_one_broker_chooses_rf1_and_min_isr1(
    kafka_bootstrap: str, kafka_names: KafkaNames
) -> None:
    """The dev broker: RF 1 (its default.replication.factor), said so; min ISR 1 on
    the durable topics, none declared on deltas."""
    prefix = kafka_names.prefix()
    result = CliRunner().invoke(
        app, ["topics", "apply", "--bootstrap", kafka_bootstrap, "--prefix", prefix]
    )
    assert result.exit_code == 0, result.output
    assert "replication factor 1 (cluster default, 1 broker)" in result.output

    async def configs() -> dict[str, dict[str, str]]:
        async with admin_session(_conn(kafka_bootstrap)) as admin:
            return {
                t.name: await topic_overrides(admin, _conn(kafka_bootstrap), t.name)
                for t in resolve_topics(SPEC, prefix=prefix)
            }

    found = asyncio.run(configs())
    for name, overrides in found.items():
        expected = None if "deltas" in name else "1"
        assert overrides.get("min.insync.replicas") == expected, (name, overrides)
