"""The Kafka session's broker-free parts: submit options, the recent-loops table."""

from __future__ import annotations

import asyncio
from uuid import uuid4

from turnstream.events import Agency
from turnstream.ids import CommandId, LoopId
from turnstream.kafka.client.live_feed import RecentLoops
from turnstream.kafka.client.submit_options import SubmitOptions, submit_fields
from turnstream.runtime.input_queue import SEEN_WINDOW
from turnstream.runtime.supervision import cancel_and_wait


def test_submit_fields_default_every_option_left_out() -> None:
    assert submit_fields({}) == {
        "no_fold": False,
        "agent": "",
        "model": "",
        "max_tokens": None,
    }


def test_submit_fields_carry_the_turn_options_not_the_header() -> None:
    options: SubmitOptions = {
        "no_fold": True,
        "agency": Agency.MACHINE,
        "command_id": CommandId(uuid4()),
        "agent": "support",
        "model": "big",
        "max_tokens": 64,
    }
    assert submit_fields(options) == {
        "no_fold": True,
        "agent": "support",
        "model": "big",
        "max_tokens": 64,
    }


def test_recent_loops_forget_the_oldest_past_the_window() -> None:
    loops: RecentLoops[int] = RecentLoops()
    first, other = LoopId(uuid4()), LoopId(uuid4())
    loops.remember(0, first)
    for key in range(1, SEEN_WINDOW + 1):
        loops.remember(key, other)
    assert loops.get(0) is None
    assert loops.get(SEEN_WINDOW) == other
    assert loops.keys_of(first) == set()
    assert len(loops.keys_of(other)) == SEEN_WINDOW


async def test_cancel_and_wait_ends_every_task() -> None:
    tasks = [asyncio.create_task(asyncio.sleep(60)) for _ in range(3)]
    await cancel_and_wait(tasks)
    assert all(task.cancelled() for task in tasks)
