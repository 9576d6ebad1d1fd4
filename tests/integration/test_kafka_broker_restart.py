"""A broker restart in the middle of a turn loses nothing.

The test runs its own broker (``turnstream.devbroker`` on free ports with its own data
directory), so stopping it never disturbs the shared broker other tests use. While a
turn is held between two tool steps, the broker is stopped; the held step then runs
and the broker is started again; the partition writer
retries its transaction with backoff until the broker answers, and the journal read
back afterwards holds every committed step, one terminal per turn and an answer for
every input.
"""

from __future__ import annotations

import asyncio
from uuid import UUID, uuid4

import pytest
from tests.support.eventually import assert_eventually
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    PROJECT_DIR,
    Models,
    apply_topic_set,
    check_journal,
    collect_garbage,
    collect_garbage_late,
    collect_until,
    connect,
    count_type,
    loop_filter,
    read_all,
    running,
    service_for,
    unique_prefix,
)

from turnstream.devbroker import DevBroker
from turnstream.errors import CommandNotConfirmedError
from turnstream.events import TurnDone, TurnStarted
from turnstream.ids import CommandId, LoopId
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.actor.writer import WriterSettings
from turnstream.kafka.client.session import KafkaSession
from turnstream.models import DemoModel
from turnstream.testing import Pause, ScriptedModel, call, text_step, tool_step

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(240)]

_OUTAGE_S = 3.0
"""The broker stays down this long: a commit in flight waits longer than 2.5 s."""


@pytest.fixture
def restart_lane(own_broker: DevBroker) -> tuple[DevBroker, str]:
    return own_broker, unique_prefix("restart")


async def test_broker_restart_mid_turn_loses_nothing(
    restart_lane: tuple[DevBroker, str],
) -> None:
    """The broker stops between two tool steps of a turn; the next step's commits
    wait across the outage and nothing is lost.

    The turn is held, not raced: its second step waits on a pause until the
    broker is down, then runs, so its commits always fall in the outage.
    """
    broker, prefix = restart_lane
    bootstrap = broker.settings.bootstrap
    topics = await apply_topic_set(bootstrap, prefix, partitions=1)
    loop_id = LoopId(uuid4())
    pause = Pause()
    add = '{"a": 1, "b": 2}'
    second_step = tool_step(call("add", add, id="u2"))
    model = ScriptedModel(
        [
            tool_step(call("add", add, id="u1")),
            [pause, *second_step],
            text_step("The total is 6."),
            tool_step(call("add", '{"a": 7, "b": 8}', id="u3")),
            text_step("The total is 15."),
        ]
    )
    models = Models(by_loop={loop_id: model})
    metrics = ServiceMetrics()
    service = service_for(
        bootstrap,
        topics,
        group_id=f"{prefix}actors",
        models=models,
        metrics=metrics,
        writer=WriterSettings(commit_deadline=40.0, offset_flush_interval=0.2),
    )
    submitted: list[UUID] = []
    session = await connect(bootstrap, topics)
    try:
        async with running(service):
            watch = session.subscribe_events(loop_filter(loop_id))
            submitted.append(await session.submit("add 1 2 3", loop_id=loop_id))
            await collect_until(watch, count_type("StepDone"), timeout=30)
            await pause.wait_reached(within=30)

            await asyncio.to_thread(broker.down)  # mid-turn: the step goes on
            pause.release()
            # The outage lasts at least as long as the slow-commit bucket below,
            # however fast the broker stops and starts on this machine.
            await asyncio.sleep(_OUTAGE_S)
            await asyncio.to_thread(broker.up)

            async def finished() -> None:
                journal = [e.type_name for e in await session.replay(loop_id)]
                assert journal[-1] == "LoopIdle", journal

            await assert_eventually(finished, timeout=90, interval=0.5)
            submitted.append(await session.submit("add 7 8", loop_id=loop_id))

            async def second_done() -> None:
                journal = await session.replay(loop_id)
                assert sum(isinstance(e, TurnDone) for e in journal) >= 1
                assert sum(isinstance(e, TurnStarted) for e in journal) == 2
                assert journal[-1].type_name == "LoopIdle"

            await assert_eventually(second_done, timeout=60, interval=0.5)

        entries = await read_all(bootstrap, topics, 1)
        per_loop = check_journal(entries, submitted)
        names = [e.type_name for e in per_loop[loop_id]]
        # The interrupted broker did not cost the turn anything: both tool steps
        # (each call approved first) and the answer are there, then TurnDone.
        assert names == [
            "LoopStarted",
            "TurnStarted",
            *["PermissionDecided", "StepDone"] * 2,
            "StepDone",
            "TurnDone",
            "LoopIdle",
            "TurnStarted",
            "PermissionDecided",
            "StepDone",
            "StepDone",
            "TurnDone",
            "LoopIdle",
        ]
        assert metrics.commit_failures == 0
        # At least one commit waited across the outage instead of failing.
        slow = (
            metrics.commit_latency.count
            - dict(metrics.commit_latency.cumulative())[2.5]
        )
        assert slow >= 1, metrics.commit_latency
    finally:
        await session.close()


async def test_submits_retried_with_their_ids_across_an_outage_are_answered_once(
    restart_lane: tuple[DevBroker, str],
) -> None:
    """The broker stops while a client submits; each submit that is not confirmed is
    sent again with the command id the error carries. After the broker returns every
    submit is answered exactly once, and nothing is answered that was not submitted.
    """
    broker, prefix = restart_lane
    bootstrap = broker.settings.bootstrap
    topics = await apply_topic_set(bootstrap, prefix, partitions=3)
    service = service_for(
        bootstrap,
        topics,
        group_id=f"{prefix}actors",
        models=Models(default=DemoModel(), tools=()),
        writer=WriterSettings(commit_deadline=40.0, offset_flush_interval=0.2),
    )
    loops = [LoopId(uuid4()) for _ in range(6)]
    submitted: list[UUID] = []
    unconfirmed = 0
    session = await KafkaSession.connect(
        bootstrap, topics=topics, capacity=10_000, request_timeout=3.0
    )
    try:
        async with running(service):
            outage = asyncio.Event()

            async def submit_all() -> None:
                nonlocal unconfirmed
                for i in range(36):
                    if i == 6:
                        outage.set()
                    command_id: CommandId | None = None
                    while True:
                        try:
                            command_id = await session.submit_to_loop(
                                loops[i % len(loops)],
                                f"hello {i}",
                                command_id=command_id,
                            )
                            break
                        except CommandNotConfirmedError as exc:
                            unconfirmed += 1
                            command_id = CommandId(exc.command_id)  # type: ignore[arg-type]
                            await asyncio.sleep(0.5)
                    submitted.append(command_id)
                    await asyncio.sleep(0.3)

            async def break_broker() -> None:
                await outage.wait()
                await asyncio.to_thread(broker.down)
                await asyncio.sleep(5)
                await asyncio.to_thread(broker.up)

            async with asyncio.timeout(180):
                await asyncio.gather(submit_all(), break_broker())

            async def all_answered() -> None:
                entries = await read_all(bootstrap, topics, 3)
                answered = {
                    e.event.reply_to()
                    for e in entries
                    if e.event.reply_to() is not None
                }
                assert set(submitted) <= answered

            await assert_eventually(all_answered, timeout=120, interval=1.0)
        assert unconfirmed >= 1  # the outage really refused some sends
        entries = await read_all(bootstrap, topics, 3)
        check_journal(entries, submitted)
        answered = {
            e.event.reply_to() for e in entries if e.event.reply_to() is not None
        }
        assert answered == set(submitted)
    finally:
        await session.close()
