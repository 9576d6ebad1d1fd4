"""`turnstream actor run` refuses topics that would lose or refuse data.

Each test creates its own topic set (a unique prefix) on the real broker, some
of it wrong on purpose, and starts the actor as a person would, without
``--ensure-topics``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.support.kafka import wait_for_topic
from tests.support.kafka_harness import TOPICS_YAML, delete_topic_set, unique_prefix

from turnstream.kafka.admin.topic_check import UnsafeTopicSettingsError, verify_topics
from turnstream.kafka.admin.topics import (
    DesiredTopic,
    apply_topics,
    load_topic_set,
    resolve_topics,
)
from turnstream.kafka.connection import KafkaConnection
from turnstream.kafka.topology import TopicNames

pytestmark = [pytest.mark.kafka]

PROJECT_DIR = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "turnstream.cli.main"]
# The actor starts in a few seconds; one that passes the check runs until
# stopped, so waiting this long for its exit means it accepted the topics.
EXIT_WITHIN = 30.0


def _declared(prefix: str) -> tuple[DesiredTopic, ...]:
    return resolve_topics(load_topic_set(TOPICS_YAML), prefix=prefix, partitions=1)


def _wrong(topic: DesiredTopic, **config: str) -> DesiredTopic:
    return dataclasses.replace(topic, config={**topic.config, **config})


async def _create(bootstrap: str, topics: tuple[DesiredTopic, ...]) -> None:
    await apply_topics(KafkaConnection(bootstrap=bootstrap), topics)
    for topic in topics:
        await wait_for_topic(bootstrap, topic.name, partitions=topic.partitions)


@pytest.fixture
async def prefix(kafka_bootstrap: str) -> AsyncIterator[str]:
    name = unique_prefix("topic-check")
    try:
        yield name
    finally:
        await delete_topic_set(kafka_bootstrap, name)


async def _actor_exit(bootstrap: str, prefix: str) -> tuple[int | None, str]:
    """Run `actor run` on the set; its exit code (None: still running) and stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
    env.update(
        KAFKA_BOOTSTRAP_SERVERS=bootstrap,
        TURNSTREAM_TOPIC_PREFIX=prefix,
        PYTHONUNBUFFERED="1",
        COLUMNS="400",
    )
    process = await asyncio.create_subprocess_exec(
        *CLI,
        *("actor", "run", "--group", f"{prefix}actors", "--metrics-port", "0"),
        *("--log-format", "text"),
        env=env,
        cwd=PROJECT_DIR,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(EXIT_WITHIN):
            _, err = await process.communicate()
    except TimeoutError:
        process.terminate()
        _, err = await process.communicate()
        return None, err.decode()
    return process.returncode, err.decode()


async def test_actor_run_refuses_a_compacted_journal_and_small_limits_with_the_fix(
    kafka_bootstrap: str, prefix: str
) -> None:
    """Without --ensure-topics: exit 2 naming each unsafe setting and its fix."""
    names = TopicNames.with_affixes(prefix=prefix)
    topics = tuple(
        _wrong(t, **{"cleanup.policy": "compact"})
        if t.name == names.events
        else _wrong(t, **{"max.message.bytes": "1048576"})
        if t.name == names.loops
        else _wrong(t, **{"max.message.bytes": "1048576"})
        if t.name == names.dead_letters
        else t
        for t in _declared(prefix)
    )
    await _create(kafka_bootstrap, topics)

    code, err = await _actor_exit(kafka_bootstrap, prefix)

    assert code == 2, f"actor run exited {code}: {err[-2000:]}"
    line = " ".join(err.split())
    assert "3 topic setting(s) would lose or refuse data" in line, line
    assert (
        f"topic {names.events}: cleanup.policy is 'compact', expected 'delete' "
        "(fix: recreate the topic" in line
    ), line
    assert (
        f"topic {names.loops}: max.message.bytes is '1048576', expected '8454144' "
        "(fix: `turnstream topics apply --alter`)" in line
    ), line
    assert (
        f"topic {names.dead_letters}: max.message.bytes is '1048576', expected "
        "'1114112' (fix: `turnstream topics apply --alter`)" in line
    ), line


async def test_verify_topics_checks_journal_retention_and_state_compaction(
    kafka_bootstrap: str, prefix: str
) -> None:
    """A journal with a 7-day retention and an uncompacted state topic fail."""
    names = TopicNames.with_affixes(prefix=prefix)
    declared = _declared(prefix)
    topics = tuple(
        _wrong(t, **{"retention.ms": "604800000"})
        if t.name == names.events
        else _wrong(t, **{"cleanup.policy": "delete"})
        if t.name == names.loops
        else t
        for t in declared
    )
    await _create(kafka_bootstrap, topics)

    with pytest.raises(UnsafeTopicSettingsError) as caught:
        await verify_topics(KafkaConnection(bootstrap=kafka_bootstrap), declared, names)

    assert [
        (m.topic, m.key, m.expected, m.actual) for m in caught.value.mismatches
    ] == [
        (names.events, "retention.ms", "-1", "604800000"),
        (names.loops, "cleanup.policy", "compact", "delete"),
    ]


async def test_verify_topics_accepts_the_declared_set_and_larger_limits(
    kafka_bootstrap: str, prefix: str
) -> None:
    """Higher size limits than declared are fine; the declared set passes as is."""
    names = TopicNames.with_affixes(prefix=prefix)
    declared = _declared(prefix)
    topics = tuple(
        _wrong(t, **{"max.message.bytes": "16777216"}) if t.name == names.loops else t
        for t in declared
    )
    await _create(kafka_bootstrap, topics)

    await verify_topics(KafkaConnection(bootstrap=kafka_bootstrap), declared, names)
