"""The faust layer without a broker: codecs, and the fold agent via test_context()."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from faust.serializers import codecs as faust_codecs

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
from turnstream.analytics.sample import LoopPlan, TurnPlan, build_journal
from turnstream.analytics.settings import AnalyticsSettings
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
