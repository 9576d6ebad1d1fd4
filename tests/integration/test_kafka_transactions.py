"""How many Kafka transactions one turn commits (issue 22).

Each durable commit of a turn is one transaction and costs a broker round trip
(~10 ms here), so the count per turn is the turn's latency floor. A turn
commits what the contract lets it commit together: ``TurnStarted`` alone (it
must be durable before history changes), then each decided call's
``PermissionDecided`` and each tool step's ``StepDone``
(durable before the next request sees its results), then the final
``StepDone`` with the terminal and ``LoopIdle`` in one transaction; an input
queued behind the turn starts in that transaction instead of the ``LoopIdle``
(its ``TurnStarted`` after the terminal, as the contract orders it). The counts
come from the service's own commits counter; one loop runs alone on its own
topic set, so every transaction counted is the turn's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from uuid import uuid4

import pytest
import pytest_asyncio
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    Models,
    apply_topic_set,
    collect_garbage,
    collect_until,
    connect,
    count_type,
    delete_topic_set,
    enduring_types,
    loop_filter,
    running,
    service_for,
    unique_prefix,
)

from turnstream.ids import LoopId
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.actor.service import LoopActorService
from turnstream.kafka.actor.writer import WriterSettings
from turnstream.kafka.client.session import KafkaSession
from turnstream.testing import (
    FunctionTool,
    Pause,
    ScriptedModel,
    call,
    text_step,
    tool_step,
)

pytestmark = [pytest.mark.kafka, pytest.mark.asyncio(loop_scope="module")]

# Longer than the offsets flush interval below: a command offset that still
# waits for a transaction is flushed (and counted) inside the turn's window.
_SETTLE = 0.6


@dataclass
class Lane:
    service: LoopActorService
    session: KafkaSession
    models: Models
    metrics: ServiceMetrics


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def lane(kafka_bootstrap: str) -> AsyncIterator[Lane]:
    prefix = unique_prefix("txns")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    models = Models(tools=(FunctionTool("lookup", lambda _input, _ctx: "42"),))
    metrics = ServiceMetrics()
    service = service_for(
        kafka_bootstrap,
        topics,
        group_id=f"{prefix}actors",
        models=models,
        metrics=metrics,
        writer=WriterSettings(offset_flush_interval=0.2),
    )
    try:
        async with running(service):
            session = await connect(kafka_bootstrap, topics)
            try:
                yield Lane(service, session, models, metrics)
            finally:
                await session.close()
    finally:
        await delete_topic_set(kafka_bootstrap, prefix)


async def turn_transactions(
    lane: Lane, loop_id: LoopId, text: str
) -> tuple[int, list[str]]:
    """Run one turn to ``LoopIdle``; the transactions it took and its events."""
    subscription = lane.session.subscribe_events(loop_filter(loop_id))
    await asyncio.sleep(_SETTLE)
    before = lane.metrics.commits
    await lane.session.submit(text, loop_id=loop_id)
    live = await collect_until(subscription, count_type("LoopIdle"))
    await asyncio.sleep(_SETTLE)
    subscription.close()
    return lane.metrics.commits - before, enduring_types(live)


async def test_text_turn_commits_two_transactions(lane: Lane) -> None:
    """TurnStarted; then StepDone + TurnDone + LoopIdle together."""
    loop_id = LoopId(uuid4())
    lane.models.by_loop[loop_id] = ScriptedModel(
        [text_step("first"), text_step("second")]
    )
    first, events = await turn_transactions(lane, loop_id, "hi")
    assert events == ["LoopStarted", "TurnStarted", "StepDone", "TurnDone", "LoopIdle"]
    second, events = await turn_transactions(lane, loop_id, "again")
    assert events == ["TurnStarted", "StepDone", "TurnDone", "LoopIdle"]
    assert (first, second) == (3, 2)  # a new loop's LoopStarted is its own commit


async def test_tool_turn_commits_one_more_transaction_per_tool_step(
    lane: Lane,
) -> None:
    """TurnStarted; per call its PermissionDecided (the harness's policy approves
    each), then the tool step's StepDone; the final StepDone with the terminal.
    """
    loop_id = LoopId(uuid4())
    lane.models.by_loop[loop_id] = ScriptedModel(
        [
            text_step("warm"),
            tool_step(call("lookup", "{}")),
            text_step("found"),
            tool_step(call("lookup", "{}")),
            tool_step(call("lookup", "{}")),
            text_step("found twice"),
        ]
    )
    await turn_transactions(lane, loop_id, "warm up")
    one, events = await turn_transactions(lane, loop_id, "look it up")
    assert events == [
        "TurnStarted",
        "PermissionDecided",
        "StepDone",
        "StepDone",
        "TurnDone",
        "LoopIdle",
    ]
    two, events = await turn_transactions(lane, loop_id, "look it up twice")
    assert events == [
        "TurnStarted",
        "PermissionDecided",
        "StepDone",
        "PermissionDecided",
        "StepDone",
        "StepDone",
        "TurnDone",
        "LoopIdle",
    ]
    assert (one, two) == (4, 6)


async def test_queued_turns_start_in_the_previous_turns_end_transaction(
    lane: Lane,
) -> None:
    """TurnStarted; each end with the next TurnStarted; the last end with LoopIdle."""
    loop_id = LoopId(uuid4())
    pause = Pause()
    lane.models.by_loop[loop_id] = ScriptedModel(
        [
            text_step("warm"),
            [pause, *text_step("one")],
            text_step("two"),
            text_step("three"),
        ]
    )
    await turn_transactions(lane, loop_id, "warm up")
    subscription = lane.session.subscribe_events(loop_filter(loop_id))
    await asyncio.sleep(_SETTLE)
    before = lane.metrics.commits
    await lane.session.submit("one", loop_id=loop_id)
    await pause.wait_reached(within=30)
    await lane.session.submit("two", loop_id=loop_id)
    await lane.session.submit("three", loop_id=loop_id)
    live = await collect_until(subscription, count_type("InputQueued", 2))
    pause.release()
    live += await collect_until(subscription, count_type("LoopIdle"))
    await asyncio.sleep(_SETTLE)
    subscription.close()
    assert enduring_types(live) == [
        "TurnStarted",
        *["StepDone", "TurnDone", "TurnStarted"] * 2,
        "StepDone",
        "TurnDone",
        "LoopIdle",
    ]
    assert lane.metrics.commits - before == 4  # apart: 6
