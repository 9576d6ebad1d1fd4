"""The example processor: three failed turns in a row raise one alert."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from turnstream.analytics.aggregate import TerminalKind
from turnstream.analytics.examples.failure_streak import (
    FailureStreak,
    StreakAlert,
    StreakApp,
    build_app,
)
from turnstream.analytics.sample import LoopPlan, TurnPlan, build_journal
from turnstream.events import EnduringEvent, FailureKind

DONE, FAILED, INTERRUPTED = (
    TerminalKind.DONE,
    TerminalKind.FAILED,
    TerminalKind.INTERRUPTED,
)


def journal(*outcomes: TerminalKind, seed: int = 0) -> list[EnduringEvent]:
    turns = [
        TurnPlan(o, failure=FailureKind.PROVIDER if i % 2 else FailureKind.TOOL_LIMIT)
        for i, o in enumerate(outcomes)
    ]
    return build_journal([LoopPlan(turns=turns)], seed=seed)


def alerts_for(events: list[EnduringEvent], streak: FailureStreak) -> list[StreakAlert]:
    found = []
    for offset, event in enumerate(events):
        alert = streak.observe(event, offset)
        if alert is not None:
            found.append(alert)
    return found


@pytest.mark.parametrize(
    ("outcomes", "alerts"),
    [
        pytest.param((FAILED, FAILED), 0, id="two-failures"),
        pytest.param((FAILED, FAILED, FAILED), 1, id="three-failures"),
        pytest.param((FAILED,) * 7, 1, id="one-alert-per-streak"),
        pytest.param((FAILED, FAILED, DONE, FAILED, FAILED), 0, id="done-resets"),
        pytest.param((FAILED, FAILED, INTERRUPTED, FAILED), 1, id="interrupt-neutral"),
        pytest.param(
            (FAILED,) * 3 + (DONE,) + (FAILED,) * 3, 2, id="realerts-after-done"
        ),
    ],
)
def test_failure_streak_alerts(outcomes, alerts):
    """Alerts fire at the third consecutive failure, once per streak."""
    assert len(alerts_for(journal(*outcomes), FailureStreak())) == alerts


def test_failure_streak_alert_content():
    """The alert names the loop, the closing turn and the failure kinds."""
    events = journal(FAILED, FAILED, FAILED)
    (alert,) = alerts_for(events, FailureStreak())
    last_failed = [e for e in events if e.type_name == "TurnFailed"][-1]
    assert alert.loop_id == str(last_failed.header.loop_id)
    assert alert.last_turn_id == str(last_failed.header.turn_id)
    assert alert.failures == 3
    assert alert.failure_kinds == ("tool_limit", "provider", "tool_limit")
    assert alert.to_dict()["type"] == "FailureStreakAlert"


def test_failure_streak_ignores_redelivered_records():
    """Replaying already-applied offsets neither extends the streak nor re-alerts."""
    events = journal(FAILED, FAILED, FAILED)
    streak = FailureStreak()
    assert len(alerts_for(events, streak)) == 1
    assert alerts_for(events, streak) == []  # same offsets again
    assert streak.streak == 3


def test_failure_streak_state_round_trips():
    """The table value (JSON) restores the streak exactly."""
    streak = FailureStreak()
    alerts_for(journal(FAILED, FAILED), streak)
    again = FailureStreak.from_dict(streak.to_dict(), threshold=3)
    assert again == streak
    assert FailureStreak.from_dict(None, threshold=5) == FailureStreak(threshold=5)


def close_unstarted_consumer_loop(faust_app: Any) -> None:
    """Close the private loop of a consumer thread that was never started."""
    thread = getattr(faust_app._consumer, "_thread", None)
    loop = getattr(thread, "thread_loop", None)
    if loop is not None and not loop.is_running() and not loop.is_closed():
        loop.close()


class RecordingPublisher:
    """Records the alerts the processor publishes (instead of a Kafka topic)."""

    def __init__(self) -> None:
        self.alerts: list[StreakAlert] = []

    async def __call__(self, alert: StreakAlert) -> None:
        self.alerts.append(alert)


@pytest.fixture
def published() -> RecordingPublisher:
    return RecordingPublisher()


@pytest.fixture
async def streak_app(
    tmp_path: Path, published: RecordingPublisher
) -> AsyncIterator[StreakApp]:
    app = build_app(
        app_id=f"unit-streak-{uuid.uuid4().hex[:8]}",
        data_dir=tmp_path,
        publish=published,
    )
    app.app.finalize()
    app.app.conf.store = "memory://"
    app.app.flow_control.resume()
    yield app
    close_unstarted_consumer_loop(app.app)


async def test_failure_streak_agent_emits_one_alert(
    streak_app: StreakApp, published: RecordingPublisher
):
    """Through the faust agent: one alert after the third failure, per loop."""
    first = journal(FAILED, FAILED, DONE, FAILED, FAILED, FAILED, seed=1)
    other = journal(FAILED, FAILED, seed=2)
    async with streak_app.agent.test_context() as agent:
        for event in [*first, *other]:
            await agent.put(event, key=str(event.header.loop_id).encode())
    assert len(published.alerts) == 1
    assert published.alerts[0].loop_id == str(first[0].header.loop_id)
    stored = streak_app.table[str(other[0].header.loop_id)]
    assert stored["kinds"] == ["tool_limit", "provider"]
