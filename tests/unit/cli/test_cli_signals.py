"""SIGUSR1 makes a long-running command log where each of its tasks waits."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import pytest
from tests.support.eventually import assert_eventually

from turnstream.observability.signals import stop_on_signals


async def test_sigusr1_logs_each_task_and_the_await_it_is_in(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()

    async def waits_on_an_event_for_a_while() -> None:
        await release.wait()

    stopped = asyncio.Event()
    with (
        caplog.at_level(logging.WARNING, logger="turnstream.observability.signals"),
        stop_on_signals(stopped.set),
    ):
        parked = asyncio.create_task(
            waits_on_an_event_for_a_while(), name="parked-task"
        )
        await asyncio.sleep(0)  # let it reach its await
        os.kill(os.getpid(), signal.SIGUSR1)

        def dumped() -> None:
            assert any("asyncio tasks" in r.getMessage() for r in caplog.records)

        await assert_eventually(dumped, timeout=5)
        release.set()
        await parked
    assert not stopped.is_set()  # SIGUSR1 does not stop the command
    dump = next(
        r.getMessage() for r in caplog.records if "asyncio tasks" in r.getMessage()
    )
    lines = dump.splitlines()
    at = lines.index("task parked-task:")
    assert "in waits_on_an_event_for_a_while" in lines[at + 1]
    assert __file__ in lines[at + 1]
