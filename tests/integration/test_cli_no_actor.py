"""``turnstream chat`` with no loop actor running says so, quickly.

Right after ``make demo`` no actor runs; a chat used to wait silently for 600 s.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

import pytest
from tests.support.kafka_harness import apply_topic_set, delete_topic_set, unique_prefix

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
