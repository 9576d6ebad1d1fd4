"""The faust layer without a broker: codecs, and the fold agent via test_context()."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import TopicAuthorizationFailedError
from faust.exceptions import NotReady
from faust.serializers import codecs as faust_codecs
from mode.utils.queues import FlowControlQueue

from turnstream.analytics.aggregate import LoopStats, TerminalKind
from turnstream.analytics.app import AnalyticsApp
from turnstream.analytics.codecs import (
    EVENTS_CODEC,
    SNAPSHOT_CODEC,
    STATE_CODEC,
    EventCodec,
    StateCodec,
    Undecodable,
    register_codecs,
)
from turnstream.analytics.errors import WorkerDeniedError, stopped_error
from turnstream.analytics.sample import LoopPlan, TurnPlan, build_journal
from turnstream.analytics.settings import AnalyticsSettings
from turnstream.analytics.transport import _DrainableBuffer
from turnstream.wire.codec import marshal_event

PLANS = [
    LoopPlan(turns=[TurnPlan(), TurnPlan(TerminalKind.FAILED, steps=2)]),
    LoopPlan(turns=[TurnPlan(TerminalKind.INTERRUPTED)], model="m2"),
]


def test_faust_codecs_are_registered_by_name():
    """register_codecs makes the three names usable as faust serializers."""
    register_codecs()
    event = build_journal(PLANS, seed=1)[0]
    data = faust_codecs.dumps(EVENTS_CODEC, event)
    assert data == marshal_event(event)
    assert faust_codecs.loads(EVENTS_CODEC, data) == event
    assert SNAPSHOT_CODEC in faust_codecs.codecs
    assert STATE_CODEC in faust_codecs.codecs


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        pytest.param(b"", "framing", id="empty"),
        pytest.param(b"not avro at all", "framing", id="garbage"),
        pytest.param(
            b"\xc3\x01" + b"\x07" * 8 + b"\x00", "unsupported_schema", id="fingerprint"
        ),
    ],
)
def test_faust_event_codec_turns_bad_bytes_into_a_marker(data, kind):
    """Undecodable records become Undecodable markers (no exception, no payload)."""
    value = EventCodec().loads(data)
    assert isinstance(value, Undecodable)
    assert value.kind == kind
    assert value.size == len(data)
    if data:
        assert data.decode("latin-1") not in value.reason


def test_faust_event_codec_refuses_to_encode_non_events():
    """Encoding anything but an event is a TypeError."""
    with pytest.raises(TypeError, match="encodes events"):
        EventCodec().dumps({"not": "an event"})


def test_faust_state_codec_round_trips_loop_stats():
    """The table value codec stores LoopStats as JSON and restores it."""
    state = LoopStats.new("loop", AnalyticsSettings().fold_config())
    state.events_applied = 7
    codec = StateCodec()
    assert codec.loads(codec.dumps(state)) == state


def close_unstarted_consumer_loop(faust_app: Any) -> None:
    """Close the loop mode's consumer thread creates eagerly.

    test_context() creates the consumer but never starts its thread, and mode
    closes a thread's private loop only when the thread stops; left open it
    surfaces later as an unraisable ResourceWarning.
    """
    consumer = faust_app._consumer  # only if it was created
    thread = getattr(consumer, "_thread", None)
    loop = getattr(thread, "thread_loop", None)
    if loop is not None and not loop.is_running() and not loop.is_closed():
        loop.close()


@pytest.fixture
async def analytics_app(tmp_path: Path) -> AsyncIterator[AnalyticsApp]:
    # Async, so faust binds to the test's running loop instead of creating one.
    settings = AnalyticsSettings(
        app_id=f"unit-{uuid.uuid4().hex[:8]}", data_dir=tmp_path, web_enabled=False
    )
    app = AnalyticsApp(settings)
    faust_app = app.faust_app
    faust_app.finalize()
    faust_app.conf.store = "memory://"
    faust_app.flow_control.resume()
    yield app
    close_unstarted_consumer_loop(faust_app)


async def test_faust_fold_agent_counts_a_journal(analytics_app: AnalyticsApp):
    """Events put through the agent land in the table and the snapshot."""
    events = build_journal(PLANS, seed=1)
    async with analytics_app.fold_agent.test_context() as agent:
        for event in events:
            await agent.put(event, key=str(event.header.loop_id).encode())
        await agent.put(Undecodable(kind="framing", reason="short", size=3), key=b"k")
    snap = analytics_app.snapshot()
    assert snap.loops == 2
    assert snap.events_applied == len(events)
    assert snap.undecodable == 1
    totals = snap.totals
    assert (totals.turns_started, totals.turns_done, totals.turns_failed) == (3, 1, 1)
    assert totals.turns_interrupted == 1
    assert totals.steps.total == 4
    assert set(totals.usage_by_model) == {"model-a", "m2"}


async def test_faust_fold_agent_skips_republished_events(analytics_app: AnalyticsApp):
    """The same events put twice (new offsets) count once."""
    events = build_journal(PLANS, seed=1)
    async with analytics_app.fold_agent.test_context() as agent:
        for event in [*events, *events]:
            await agent.put(event, key=b"k")
    snap = analytics_app.snapshot()
    assert snap.events_applied == len(events)
    assert snap.duplicates_skipped == len(events)
    assert snap.totals.turns_started == 3


async def test_faust_second_flow_resume_keeps_queued_records(tmp_path: Path):
    """A record queued while flow is active survives faust's second resume.

    faust resumes flow for table recovery and again for the streams; the stock
    flow control emptied the agents' queues on both, dropping a record
    delivered in between. Only a suspended -> active change may clear them.
    """
    settings = AnalyticsSettings(
        app_id=f"unit-{uuid.uuid4().hex[:8]}", data_dir=tmp_path, web_enabled=False
    )
    flow = AnalyticsApp(settings).faust_app.flow_control
    queue: FlowControlQueue[str] = FlowControlQueue(
        flow_control=flow, clear_on_resume=True
    )
    assert not flow.is_active()  # faust starts suspended
    flow.resume()  # recovery resumes flow
    queue.put_nowait("record delivered before the streams resume")
    flow.resume()  # the streams resume
    assert flow.is_active()
    assert queue.qsize() == 1

    flow.suspend()  # a rebalance starts
    flow.resume()
    assert queue.qsize() == 0  # what was queued before a suspension is stale


async def test_faust_commit_drain_waits_for_earlier_messages_only():
    """A commit waits for the changelog messages put before it, not later ones."""
    buffer = _DrainableBuffer()
    buffer.app = SimpleNamespace(conf=SimpleNamespace(producer_threaded=False))
    handed: list[int] = []

    def message(n: int, gate: asyncio.Event) -> SimpleNamespace:
        async def publish_message(fut: object, wait: bool) -> None:
            await gate.wait()
            handed.append(n)

        channel = SimpleNamespace(publish_message=publish_message)
        return SimpleNamespace(message=SimpleNamespace(channel=channel))

    async def pump() -> None:  # what faust's buffer service does
        while True:
            await buffer._send_pending(await buffer.pending.get())

    earlier, later = asyncio.Event(), asyncio.Event()
    buffer.put(message(1, earlier))
    buffer.put(message(2, earlier))
    async with asyncio.TaskGroup() as tasks:
        pumping = tasks.create_task(pump())
        drain = tasks.create_task(buffer.drain())
        await asyncio.sleep(0)  # the commit starts draining
        buffer.put(message(3, later))  # and an agent puts another message
        await asyncio.sleep(0.05)
        assert not drain.done()  # 1 and 2 are not with the client yet
        earlier.set()
        async with asyncio.timeout(5):
            await drain
        assert handed == [1, 2]  # 3 is still in flight; the drain did not wait
        pumping.cancel()


def test_faust_app_uses_the_session_timeout(tmp_path: Path):
    """The group session timeout reaches faust, with heartbeats within it."""
    settings = AnalyticsSettings(
        app_id=f"unit-{uuid.uuid4().hex[:8]}",
        data_dir=tmp_path,
        web_enabled=False,
        session_timeout_s=6.0,
    )
    conf = AnalyticsApp(settings).faust_app.conf
    assert conf.broker_session_timeout == 6.0
    assert conf.broker_heartbeat_interval == 2.0


class _StuckStarting(AnalyticsApp):
    """A worker whose start never returns (faust waiting for a denied group)."""

    def __init__(self, settings: AnalyticsSettings) -> None:
        super().__init__(settings)
        self.started = asyncio.Event()
        self.stopped = False

    async def start(self) -> None:
        self.started.set()
        await asyncio.Event().wait()

    async def stop(self, seconds: float = 0.0) -> None:
        self.stopped = True


async def test_run_honours_stop_while_starting(tmp_path: Path) -> None:
    """A start that never ends is cancelled when stop is set (SIGTERM works)."""
    app = _StuckStarting(
        AnalyticsSettings(
            app_id=f"unit-{uuid.uuid4().hex[:8]}", data_dir=tmp_path, web_enabled=False
        )
    )
    stop = asyncio.Event()
    running = asyncio.create_task(app.run(stop))
    await asyncio.wait_for(app.started.wait(), timeout=5)
    stop.set()

    await asyncio.wait_for(running, timeout=5)

    assert app.stopped


async def test_stop_closes_every_kafka_client_the_producer_made(
    analytics_app: AnalyticsApp,
) -> None:
    """A transactional client faust made but never registered (its start was
    cut short, or it failed) is closed by the worker's stop like the others:
    none is left for the interpreter to report as unclosed."""
    producer = analytics_app.faust_app.producer
    registered = producer._new_producer(transactional_id="unit-registered")
    producer._transaction_producers["unit-registered"] = registered
    orphan = producer._new_producer(transactional_id="unit-orphan")

    await analytics_app.stop(seconds=1.0)

    assert (registered._closed, orphan._closed) == (True, True)


async def test_a_client_asked_for_after_the_stop_is_refused(
    analytics_app: AnalyticsApp,
) -> None:
    """A transaction faust begins while the worker stops gets no new client,
    so none is made after the stop closed them all."""
    producer = analytics_app.faust_app.producer
    await analytics_app.stop(seconds=1.0)

    with pytest.raises(NotReady):
        producer._new_producer(transactional_id="unit-late")


def test_transactional_clients_are_not_shared_between_producers(tmp_path: Path) -> None:
    """faust keeps the transactional clients in a class-level dict: two workers
    in one process would stop each other's clients."""
    producers = [
        AnalyticsApp(
            AnalyticsSettings(
                app_id=f"unit-{uuid.uuid4().hex[:8]}",
                data_dir=tmp_path / str(n),
                web_enabled=False,
            )
        ).faust_app.producer
        for n in range(2)
    ]

    assert (
        producers[0]._transaction_producers is not producers[1]._transaction_producers
    )


async def test_a_topic_refused_inside_a_transaction_is_noted_as_a_denial(
    analytics_app: AnalyticsApp,
) -> None:
    """A topic the ACL refuses to a transaction (AddPartitionsToTxn) fails the
    commit, not the send: the send's delivery never completes, and faust only
    logs what its commit raised. The worker must still stop naming Write on
    that topic, not crash later on the broken transaction's IllegalOperation."""
    producer = analytics_app.faust_app.producer
    client = producer._new_producer(transactional_id="unit-txn")
    refused = TopicAuthorizationFailedError({"unit-out"})
    client._txn_manager.set_pid_and_epoch(1, 0)  # as after InitProducerId
    client._txn_manager.begin_transaction()
    client._txn_manager.error_transaction(refused)

    with pytest.raises(TopicAuthorizationFailedError):
        await client.commit_transaction()

    assert producer.denial.is_set()
    stopped = stopped_error(producer.denied)
    assert isinstance(stopped, WorkerDeniedError)
    assert (stopped.permission, stopped.resource) == ("Write", "unit-out")
    await analytics_app.stop(seconds=1.0)


async def test_a_transaction_refused_a_topic_is_noted_before_anything_uses_it(
    analytics_app: AnalyticsApp,
) -> None:
    """The refusal (AddPartitionsToTxn) breaks the transaction at once. What
    touches it next may be a changelog send, not the commit: aiokafka raises
    ``IllegalOperation`` there and faust crashes on that. The denial must be
    noted when the transaction fails, whatever touches it next."""
    producer = analytics_app.faust_app.producer
    client = producer._new_producer(transactional_id="unit-txn-first")
    client._txn_manager.set_pid_and_epoch(1, 0)  # as after InitProducerId
    await client.begin_transaction()

    client._txn_manager.error_transaction(
        TopicAuthorizationFailedError({"unit-analytics-changelog"})
    )

    await asyncio.wait_for(producer.denial.wait(), timeout=5)
    stopped = stopped_error(producer.denied)
    assert isinstance(stopped, WorkerDeniedError)
    assert (stopped.permission, stopped.resource) == (
        "Write",
        "unit-analytics-changelog",
    )
    await analytics_app.stop(seconds=1.0)
