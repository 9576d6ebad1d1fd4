"""``turnstream chat`` with no loop actor running says so, quickly.

Right after ``make demo`` no actor runs; a chat used to wait silently for 600 s.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

import pytest
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    Models,
    apply_topic_set,
    collect_garbage,
    collect_garbage_late,
    delete_topic_set,
    running,
    service_for,
    unique_prefix,
)

from turnstream.kafka.admin.probe import group_members
from turnstream.kafka.connection import KafkaConnection

pytestmark = [pytest.mark.kafka]


async def test_chat_with_no_actor_exits_nonzero_within_15_s_with_the_hint(
    kafka_bootstrap: str,
) -> None:
    """Exit 1 within 15 s; the message names the group and the command to start."""
    prefix = unique_prefix("no-actor")
    await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "TURNSTREAM_TOPIC_PREFIX": prefix,
        "COLUMNS": "200",
    }
    started = time.monotonic()
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "turnstream.cli",
            "chat",
            "hello",
            "--group",
            f"{prefix}nobody",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        async with asyncio.timeout(60):
            out, err = await process.communicate()
        elapsed = time.monotonic() - started
        text = (out + err).decode()
        assert process.returncode == 1, text
        assert elapsed < 15, elapsed
        assert "no loop actor is running" in text
        assert f"{prefix}nobody" in text
        assert "turnstream actor run" in text
    finally:
        await delete_topic_set(kafka_bootstrap, prefix)


async def test_an_actor_of_another_topic_set_in_the_group_is_not_counted(
    kafka_bootstrap: str,
) -> None:
    """The default group is shared by every topic set: only members that
    consume this set's commands topic count as its actors."""
    other = unique_prefix("other-set")
    mine = unique_prefix("no-actor-shared")
    other_topics = await apply_topic_set(kafka_bootstrap, other, partitions=1)
    await apply_topic_set(kafka_bootstrap, mine, partitions=1)
    group = f"{mine}shared-actors"
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "TURNSTREAM_TOPIC_PREFIX": mine,
        "COLUMNS": "200",
    }
    try:
        # An actor serving the other set, in the group this chat checks.
        async with running(
            service_for(kafka_bootstrap, other_topics, group_id=group, models=Models())
        ):
            conn = KafkaConnection(bootstrap=kafka_bootstrap)
            # It counts for its own set, and the group has it as a member.
            assert await group_members(conn, group, topic=other_topics.commands) == 1
            assert await group_members(conn, group) == 1
            started = time.monotonic()
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                *("-m", "turnstream.cli", "chat", "hello", "--group", group),
                *("--wait", "40"),
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            async with asyncio.timeout(90):
                out, err = await process.communicate()
            elapsed = time.monotonic() - started
        text = (out + err).decode()
        assert process.returncode == 1, text
        assert "no loop actor is running" in text, text[-400:]
        assert elapsed < 15, elapsed
    finally:
        await delete_topic_set(kafka_bootstrap, other)
        await delete_topic_set(kafka_bootstrap, mine)
