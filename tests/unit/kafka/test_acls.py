"""The roles' least-privilege grants and the ``turnstream acls`` listing (no broker)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from turnstream.cli.main import app
from turnstream.errors import ConfigError
from turnstream.kafka.admin.acls import Role, RoleNames, role_acls
from turnstream.kafka.topology import TopicNames

NAMES = RoleNames(topics=TopicNames.with_affixes(prefix="t1."), group_id="g")


def test_client_grants_are_commands_write_and_journal_read_only() -> None:
    """The client writes commands and reads events and deltas: nothing else."""
    assert [str(a) for a in role_acls(Role.CLIENT, "User:c", NAMES)] == [
        "ALLOW User:c Write Topic t1.turnstream.commands.v1",
        "ALLOW User:c Read Topic t1.turnstream.events.v1",
        "ALLOW User:c Read Topic t1.turnstream.deltas.v1",
        "ALLOW User:c Describe Group g",
    ]


def test_actor_grants_cover_its_topics_group_and_transactional_ids() -> None:
    """The actor reads commands (its group), events, loops and history; writes the
    journal, state, deltas and dead letters; owns the transactional ids of its
    group."""
    assert [str(a) for a in role_acls(Role.ACTOR, "User:a", NAMES)] == [
        "ALLOW User:a Read Topic t1.turnstream.commands.v1",
        "ALLOW User:a Read Group g",
        "ALLOW User:a Read Topic t1.turnstream.events.v1",
        "ALLOW User:a Read Topic t1.turnstream.loops.v1",
        "ALLOW User:a Read Topic t1.turnstream.history.v1",
        "ALLOW User:a Write Topic t1.turnstream.events.v1",
        "ALLOW User:a Write Topic t1.turnstream.loops.v1",
        "ALLOW User:a Write Topic t1.turnstream.history.v1",
        "ALLOW User:a Write Topic t1.turnstream.deltas.v1",
        "ALLOW User:a Write Topic t1.turnstream.commands.dlq.v1",
        "ALLOW User:a Write TransactionalId prefix turnstream-g-",
    ]


@pytest.mark.parametrize("role", list(Role))
def test_no_role_gets_a_cluster_permission(role: Role) -> None:
    """Neither DescribeConfigs nor IdempotentWrite on the Cluster is needed: since
    Kafka 3.0 an idempotent producer needs Write on a topic it writes, and a
    transactional one Write on its transactional id (the secured lane runs
    every role on exactly these grants)."""
    cluster = [
        a
        for a in role_acls(role, "User:x", NAMES)
        if a.resource_type.label == "Cluster"
    ]
    assert cluster == []


def test_a_principal_without_a_type_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="TYPE:NAME"):
        role_acls(Role.CLIENT, "client", NAMES)


def test_acls_command_prints_the_grants_for_the_topic_prefix() -> None:
    """Printing needs no broker; topic names carry --topic-prefix."""
    result = CliRunner().invoke(
        app,
        ["acls", "--role", "client", "--topic-prefix", "t1.", "--group", "g"],
        env={"TURNSTREAM_TOPIC_PREFIX": None, "TURNSTREAM_TOPIC_SUFFIX": None},
    )

    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "ALLOW User:client Write Topic t1.turnstream.commands.v1",
        "ALLOW User:client Read Topic t1.turnstream.events.v1",
        "ALLOW User:client Read Topic t1.turnstream.deltas.v1",
        "ALLOW User:client Describe Group g",
    ]


def test_acls_command_grants_the_actor_write_on_its_effect_topics() -> None:
    """--effect-topic (repeatable): Write for the actor, the records of its tools."""
    result = CliRunner().invoke(
        app,
        [
            "acls",
            "--role",
            "actor",
            "--group",
            "g",
            "--effect-topic",
            "orders.v1",
            "--effect-topic",
            "notify.v1",
        ],
        env={"TURNSTREAM_TOPIC_PREFIX": None, "TURNSTREAM_TOPIC_SUFFIX": None},
    )

    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-2:] == [
        "ALLOW User:actor Write Topic orders.v1",
        "ALLOW User:actor Write Topic notify.v1",
    ]


def test_acls_command_refuses_an_illegal_effect_topic() -> None:
    result = CliRunner().invoke(
        app,
        ["acls", "--role", "actor", "--effect-topic", "no spaces"],
        env={"TURNSTREAM_TOPIC_PREFIX": None, "TURNSTREAM_TOPIC_SUFFIX": None},
    )

    assert result.exit_code == 2, result.output
    assert "effect_topic" in result.output
