"""The pure aggregation: exact aggregates for a known journal, windows, dedupe.

The journal below has three loops with mixed outcomes; every expected number
is written out by hand from the plan (not computed with the code under test).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest
from tests.unit.analytics.known_journal import (
    EVENTS_PER_LOOP,
    LOOP_A,
    LOOP_B,
    LOOP_C,
    T0,
    TOTAL_EVENTS,
    check_known_totals,
    check_known_windows,
    journal,
    u,
)

from turnstream.analytics.aggregate import (
    FoldConfig,
    LoopStats,
    Outcome,
    Position,
    fold,
    fold_journal,
    micros_of,
    window_start_ms,
)
from turnstream.analytics.report import build_snapshot
from turnstream.content import MAX_TOKEN_COUNT, AIMessage, TextBlock, Usage, UserMessage
from turnstream.events import (
    EnduringEvent,
    FailureInfo,
    FailureKind,
    Header,
    StepDone,
    TurnDone,
    TurnFailed,
    TurnStarted,
)
from turnstream.wire.analytics_codec import AnalyticsSnapshot

PARTITION = {LOOP_A: 0, LOOP_B: 1, LOOP_C: 0}


def positioned(
    events: Iterable[EnduringEvent], *, first_offset: int = 0
) -> list[tuple[EnduringEvent, Position]]:
    """Give each event the position it would have on a 2-partition topic."""
    next_offset: dict[int, int] = {}
    out = []
    for event in events:
        assert event.header.loop_id is not None
        partition = PARTITION[event.header.loop_id]
        offset = next_offset.get(partition, first_offset)
        next_offset[partition] = offset + 1
        out.append((event, Position(partition, offset)))
    return out


def fold_all(
    records: Sequence[tuple[EnduringEvent, Position | None]],
    config: FoldConfig,
    states: dict[str, LoopStats] | None = None,
) -> tuple[dict[str, LoopStats], list[Outcome]]:
    states = {} if states is None else states
    outcomes = []
    for event, position in records:
        key = str(event.header.loop_id)
        state = states.setdefault(key, LoopStats.new(key, config))
        outcomes.append(fold(state, event, config, position))
    return states, outcomes


def snapshot(states: dict[str, LoopStats], config: FoldConfig) -> AnalyticsSnapshot:
    return build_snapshot(
        states.values(),
        config,
        app_id="test",
        generated_at_ms=0,
        snapshot_id=uuid.UUID(int=1),
    )


# --------------------------------------------------------------------------
# Exact aggregates
# --------------------------------------------------------------------------


def test_aggregate_known_journal_totals_are_exact():
    """Mixed outcomes over three loops give exactly the planned totals."""
    config = FoldConfig()
    states, outcomes = fold_all(positioned(journal()), config)
    assert outcomes == [Outcome.APPLIED] * TOTAL_EVENTS
    snap = snapshot(states, config)
    check_known_totals(snap)
    assert snap.events_applied == TOTAL_EVENTS
    assert snap.duplicates_skipped == 0
    per_loop = {key: state.events_applied for key, state in states.items()}
    assert per_loop == {str(k): v for k, v in EVENTS_PER_LOOP.items()}


def test_aggregate_fold_journal_is_the_known_journal_folded_in_order():
    """fold_journal gives the known totals and every loop's last position."""
    config = FoldConfig()
    events = journal()
    states = fold_journal(events, config)
    check_known_totals(snapshot(states, config))
    last = {str(e.header.loop_id): Position(0, i) for i, e in enumerate(events)}
    assert {key: state.position for key, state in states.items()} == last


def test_aggregate_known_journal_windows_are_exact():
    """Each metric lands in the window of the event that completes it."""
    config = FoldConfig()
    states, _ = fold_all(positioned(journal()), config)
    check_known_windows(snapshot(states, config))


@pytest.mark.parametrize(
    ("moment", "size_ms", "start"),
    [
        pytest.param(T0, 60_000, T0, id="on-boundary"),
        pytest.param(
            T0 + timedelta(seconds=59, microseconds=999_999),
            60_000,
            T0,
            id="just-before-next",
        ),
        pytest.param(
            T0 + timedelta(minutes=1),
            60_000,
            T0 + timedelta(minutes=1),
            id="next-boundary",
        ),
        pytest.param(
            T0 + timedelta(seconds=25),
            10_000,
            T0 + timedelta(seconds=20),
            id="10s-windows",
        ),
        pytest.param(
            T0 + timedelta(minutes=7),
            300_000,
            T0 + timedelta(minutes=5),
            id="5min-windows",
        ),
        pytest.param(datetime(2026, 1, 1, 12, 0, 30), 60_000, T0, id="naive-is-utc"),
    ],
)
def test_aggregate_window_assignment(moment, size_ms, start):
    """Windows are tumbling, epoch-aligned and chosen by the event time."""
    assert window_start_ms(micros_of(moment), size_ms) == micros_of(start) // 1000


def test_aggregate_window_size_is_configurable():
    """With 10 s windows the same journal splits into more, smaller windows."""
    config = FoldConfig(window_size_ms=10_000, window_retention=100)
    states, _ = fold_all(positioned(journal()), config)
    windows = {w.start: w.aggregates for w in snapshot(states, config).windows}
    # A's terminals at :02.5, :04.3, :09.3 and B1's at :13.5.
    assert (windows[T0].turns_done, windows[T0].turns_failed) == (2, 1)
    assert windows[T0 + timedelta(seconds=10)].turns_interrupted == 1
    assert windows[T0 + timedelta(minutes=1, seconds=10)].turns_failed == 1
    assert sum(w.turns_started for w in windows.values()) == 7


# --------------------------------------------------------------------------
# Redelivery and duplicates
# --------------------------------------------------------------------------


def test_aggregate_redelivered_records_change_nothing():
    """Records at or below a loop's applied offset are skipped (consumer redelivery)."""
    config = FoldConfig()
    records = positioned(journal())
    states, _ = fold_all(records, config)
    before = snapshot(states, config)
    _, outcomes = fold_all(records[10:], config, states)  # a suffix is redelivered
    assert set(outcomes) == {Outcome.REDELIVERED}
    assert snapshot(states, config) == before


def test_aggregate_republished_journal_is_not_double_counted():
    """The whole journal re-published at new offsets counts once (event-id dedupe)."""
    config = FoldConfig()
    states, _ = fold_all(positioned(journal()), config)
    before = snapshot(states, config)
    _, outcomes = fold_all(positioned(journal(), first_offset=1_000), config, states)
    assert set(outcomes) == {Outcome.DUPLICATE}
    after = snapshot(states, config)
    assert after.totals == before.totals
    assert after.windows == before.windows
    assert after.duplicates_skipped == TOTAL_EVENTS


def test_aggregate_turn_guard_catches_replays_beyond_the_event_id_window():
    """With a tiny event-id window, the closed-turn memory still stops recounting."""
    config = FoldConfig(dedupe_window=1, closed_turns=64)
    states, _ = fold_all(positioned(journal()), config)
    before = snapshot(states, config)
    replay = [
        e
        for e in journal()
        if isinstance(e, TurnStarted | StepDone | TurnDone | TurnFailed)
    ]
    _, outcomes = fold_all(positioned(replay, first_offset=1_000), config, states)
    assert set(outcomes) == {Outcome.DUPLICATE}
    assert snapshot(states, config).totals == before.totals


def test_aggregate_replay_older_than_both_bounds_is_counted_again():
    """The documented limit: beyond both memories a re-published turn counts again."""
    config = FoldConfig(dedupe_window=1, closed_turns=1)
    events = journal()
    states, _ = fold_all(positioned(events), config)
    a1 = [e for e in events if e.header.loop_id == LOOP_A][
        1:5
    ]  # A1: start, 2 steps, done
    assert isinstance(a1[0], TurnStarted)
    assert isinstance(a1[-1], TurnDone)
    _, outcomes = fold_all(positioned(a1, first_offset=1_000), config, states)
    assert outcomes == [Outcome.APPLIED] * 4
    assert snapshot(states, config).totals.turns_done == 4


def test_aggregate_state_survives_a_json_round_trip_mid_journal():
    """Folding, storing (changelog JSON), restoring and continuing equals one pass."""
    config = FoldConfig()
    records = positioned(journal())
    whole, _ = fold_all(records, config)

    half, _ = fold_all(records[:17], config)
    restored = {
        key: LoopStats.from_dict(json.loads(json.dumps(state.to_dict())))
        for key, state in half.items()
    }
    # A restart redelivers from an older committed offset: overlap is skipped.
    resumed, outcomes = fold_all(records[12:], config, restored)
    assert outcomes[:5] == [Outcome.REDELIVERED] * 5
    assert snapshot(resumed, config) == snapshot(whole, config)


# --------------------------------------------------------------------------
# Edge cases
# --------------------------------------------------------------------------


def _header(
    turn: uuid.UUID | None, at: datetime | None, *, step: bool = False
) -> Header:
    return Header(
        event_id=uuid.uuid4(),
        session_id=uuid.UUID(int=5),
        loop_id=LOOP_A,
        turn_id=turn,
        step_id=uuid.uuid4() if step else None,
        created_at=at,
    )


def _user() -> UserMessage:
    return UserMessage(blocks=(TextBlock(text="hi"),))


def _step(turn: uuid.UUID, at: datetime | None, usage: Usage) -> StepDone:
    return StepDone(
        header=_header(turn, at, step=True),
        messages=(AIMessage(blocks=(TextBlock(text="x"),), usage=usage),),
    )


def test_aggregate_turn_started_before_the_horizon_has_no_latency():
    """Steps and a terminal without a TurnStarted still count; latency is unknown."""
    config = FoldConfig()
    turn = uuid.uuid4()
    events: list[EnduringEvent] = [
        _step(turn, T0, u(3, 4)),
        TurnFailed(
            header=_header(turn, T0 + timedelta(seconds=1)),
            turn_index=4,
            error=FailureInfo(kind=FailureKind.HOOK_DENIED),
        ),
    ]
    states, _ = fold_all([(e, None) for e in events], config)
    totals = snapshot(states, config).totals
    assert (totals.turns_started, totals.turns_failed) == (0, 1)
    assert totals.latency.count == 0
    assert totals.steps.total == 1
    assert totals.usage_by_model == {"unknown": u(3, 4)}  # failed: the steps' usage
    assert totals.failure_kinds == {"hook_denied": 1}


def test_aggregate_events_without_time_count_in_totals_only():
    """No created_at: counted in the totals, in no window."""
    config = FoldConfig()
    turn = uuid.uuid4()
    events: list[EnduringEvent] = [
        TurnStarted(header=_header(turn, None), turn_index=1, message=_user()),
        TurnDone(
            header=_header(turn, None), turn_index=1, message=AIMessage(), usage=u(1, 2)
        ),
    ]
    states, _ = fold_all([(e, None) for e in events], config)
    snap = snapshot(states, config)
    assert (snap.totals.turns_started, snap.totals.turns_done) == (1, 1)
    assert snap.windows == ()
    assert snap.watermark is None


def test_aggregate_late_events_skip_expired_windows():
    """An event older than the retained windows counts in the totals only."""
    config = FoldConfig(window_retention=2)
    t_new, t_old = uuid.uuid4(), uuid.uuid4()
    events: list[EnduringEvent] = [
        TurnStarted(
            header=_header(t_new, T0 + timedelta(minutes=10)),
            turn_index=2,
            message=_user(),
        ),
        TurnStarted(header=_header(t_old, T0), turn_index=1, message=_user()),
        TurnStarted(
            header=_header(uuid.uuid4(), T0 + timedelta(minutes=9)),
            turn_index=3,
            message=_user(),
        ),
    ]
    states, _ = fold_all([(e, None) for e in events], config)
    snap = snapshot(states, config)
    assert snap.totals.turns_started == 3
    assert snap.late_events == 1
    assert [(w.start, w.aggregates.turns_started) for w in snap.windows] == [
        (T0 + timedelta(minutes=9), 1),
        (T0 + timedelta(minutes=10), 1),
    ]


def test_aggregate_old_windows_are_pruned_as_time_advances():
    """A loop keeps at most window_retention windows."""
    config = FoldConfig(window_retention=3)
    events: list[EnduringEvent] = [
        TurnStarted(
            header=_header(uuid.uuid4(), T0 + timedelta(minutes=m)),
            turn_index=m + 1,
            message=_user(),
        )
        for m in range(10)
    ]
    states, _ = fold_all([(e, None) for e in events], config)
    (state,) = states.values()
    assert sorted(state.windows) == [
        micros_of(T0 + timedelta(minutes=m)) // 1000 for m in (7, 8, 9)
    ]
    assert state.totals.turns_started == 10


def test_aggregate_open_turns_are_bounded():
    """Turns that never end are forgotten oldest-first beyond max_open_turns."""
    config = FoldConfig(max_open_turns=2)
    events: list[EnduringEvent] = [
        TurnStarted(header=_header(uuid.uuid4(), T0), turn_index=i + 1, message=_user())
        for i in range(5)
    ]
    states, _ = fold_all([(e, None) for e in events], config)
    (state,) = states.values()
    assert len(state.open_turns) == 2
    assert state.open_turns_dropped == 3
    assert snapshot(states, config).open_turns == 2


def test_aggregate_usage_saturates_instead_of_raising():
    """Absurd token counts saturate at the Avro long maximum; the fold never raises."""
    config = FoldConfig()
    huge = Usage(input_tokens=MAX_TOKEN_COUNT)
    events: list[EnduringEvent] = []
    for i in range(2):
        turn = uuid.uuid4()
        events.append(
            TurnDone(
                header=_header(turn, T0),
                turn_index=i + 1,
                message=AIMessage(),
                usage=huge,
            )
        )
    states, _ = fold_all([(e, None) for e in events], config)
    assert (
        snapshot(states, config).totals.usage_by_model["unknown"].input_tokens
        == MAX_TOKEN_COUNT
    )


def test_aggregate_model_comes_from_loop_started():
    """Usage before LoopStarted is 'unknown'; after it, the loop's model."""
    config = FoldConfig()
    events = journal()
    a_events = [e for e in events if e.header.loop_id == LOOP_A]
    states, _ = fold_all(
        [(e, None) for e in a_events[1:]], config
    )  # LoopStarted missing
    assert set(snapshot(states, config).totals.usage_by_model) == {"unknown"}


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param({"v": 99}, id="future-version"),
        pytest.param({"v": 1, "loop": "x"}, id="missing-fields"),
    ],
)
def test_aggregate_state_rejects_unknown_forms(broken):
    """A stored state of another version or shape is refused, not misread."""
    with pytest.raises(ValueError, match="loop state"):
        LoopStats.from_dict(broken)


@pytest.mark.parametrize(
    "field",
    [
        "window_size_ms",
        "window_retention",
        "dedupe_window",
        "closed_turns",
        "max_open_turns",
    ],
)
def test_aggregate_config_rejects_zero(field: str):
    """Every bound must be at least 1."""
    bounds: dict[str, Any] = {field: 0}
    with pytest.raises(ValueError, match=field):
        FoldConfig(**bounds)
