"""Trace context: traceparent parsing, deterministic ids, event headers."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID, uuid4

import pytest

from turnstream.content import AIMessage, TextBlock, UserMessage
from turnstream.events import Cause, Header, LoopIdle, StepDone, TurnDone, TurnStarted
from turnstream.runtime.tracing import (
    TRACE_ORIGIN,
    TRACEPARENT,
    TraceContext,
    TraceContexts,
    event_trace_headers,
    ratio_sampler,
    span_id_for,
    trace_id_for,
)
from turnstream.tracing import JournalSpans

CARRIED = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
NOW = datetime(2026, 12, 6, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(
            CARRIED,
            TraceContext(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, True),
            id="sampled",
        ),
        pytest.param(
            CARRIED[:-2].encode() + b"00",
            TraceContext(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, False),
            id="bytes-not-sampled",
        ),
        pytest.param("00-" + "0" * 32 + "-00f067aa0ba902b7-01", None, id="zero-trace"),
        pytest.param("00-4bf92f35-00f067aa0ba902b7-01", None, id="short"),
        pytest.param(b"\xff\xfe", None, id="not-ascii"),
        pytest.param(None, None, id="absent"),
    ],
)
def test_traceparent_parses_or_is_ignored(
    value: str | bytes | None, expected: TraceContext | None
) -> None:
    """A malformed header starts a new trace; it is never an error."""
    assert TraceContext.parse(value) == expected


def test_traceparent_round_trips() -> None:
    context = TraceContext.parse(CARRIED)
    assert context is not None
    assert context.header() == CARRIED


def test_ids_are_deterministic_and_distinct() -> None:
    """Live and rebuilt spans agree because the ids are functions of the ids."""
    turn, step = uuid4(), uuid4()
    assert trace_id_for(turn) == trace_id_for(UUID(str(turn)))
    ids = {
        span_id_for("turn", turn),
        span_id_for("step", step),
        span_id_for("chat", step),
        span_id_for("tool", step, "call_1"),
        span_id_for("tool", step, "call_2"),
    }
    assert len(ids) == 5
    assert all(0 < i < 1 << 64 for i in ids)


def test_ratio_sampler_bounds() -> None:
    assert ratio_sampler(1.0)((1 << 128) - 1)
    assert not ratio_sampler(0.0)(1)
    half = ratio_sampler(0.5)
    assert half(1)
    assert not half((1 << 64) - 1)


def _started(turn_id: UUID, command_id: UUID) -> TurnStarted:
    return TurnStarted(
        header=Header(
            event_id=uuid4(),
            loop_id=uuid4(),
            turn_id=turn_id,
            created_at=NOW,
            cause=Cause(command_id=command_id),
        ),
        turn_index=1,
        message=UserMessage(blocks=(TextBlock(text="hi"),)),
    )


def _step(turn_id: UUID, step_id: UUID) -> StepDone:
    return StepDone(
        header=Header(
            event_id=uuid4(), turn_id=turn_id, step_id=step_id, created_at=NOW
        ),
        messages=(AIMessage(blocks=(TextBlock(text="ok"),)),),
    )


def test_carried_context_reaches_the_turns_event_headers() -> None:
    """The submit's trace id names every event of its turn; the span is the maker."""
    traces = TraceContexts()  # tracing off: only carried contexts propagate
    turn_id, step_id, command_id = uuid4(), uuid4(), uuid4()
    carried = TraceContext.parse(CARRIED)
    assert carried is not None
    traces.remember(command_id, carried)
    started = dict(event_trace_headers(traces, _started(turn_id, command_id)))
    step = dict(event_trace_headers(traces, _step(turn_id, step_id)))
    done = TurnDone(
        header=Header(event_id=uuid4(), turn_id=turn_id, created_at=NOW),
        turn_index=1,
        message=AIMessage(blocks=(TextBlock(text="ok"),)),
    )
    ended = dict(event_trace_headers(traces, done))
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    assert started == {
        TRACEPARENT: f"00-{trace}-{span_id_for('turn', turn_id):016x}-01".encode(),
        TRACE_ORIGIN: CARRIED.encode(),
    }
    assert step == {
        TRACEPARENT: f"00-{trace}-{span_id_for('step', step_id):016x}-01".encode()
    }
    assert ended == {TRACEPARENT: started[TRACEPARENT]}


def test_an_adopted_turn_keeps_the_carried_trace_on_its_next_owner() -> None:
    """The origin the first owner kept for an open turn puts the next
    owner's records of that turn in the submit's trace, tracing on or off."""
    turn_id, step_id = uuid4(), uuid4()
    first = TraceContexts()
    carried = TraceContext.parse(CARRIED)
    assert carried is not None
    command_id = uuid4()
    first.remember(command_id, carried)
    first.open_turn(turn_id, command_id)
    origin = first.origin(turn_id)
    assert origin == CARRIED
    for sampler in (None, ratio_sampler(1.0)):
        second = TraceContexts(sampler)
        second.adopt(turn_id, origin.encode())
        step = dict(event_trace_headers(second, _step(turn_id, step_id)))
        trace = "4bf92f3577b34da6a3ce929d0e0e4736"
        maker = span_id_for("step", step_id)
        assert step == {TRACEPARENT: f"00-{trace}-{maker:016x}-01".encode()}


def test_adopt_leaves_a_known_turn_and_a_bad_origin_alone() -> None:
    traces = TraceContexts(ratio_sampler(1.0))
    known, other = uuid4(), uuid4()
    own = traces.open_turn(known, None)
    traces.adopt(known, CARRIED)
    traces.adopt(other, b"not-a-traceparent")
    assert traces.turn(known) == own
    assert traces.origin(other) is None
    assert traces.turn(other) == traces.open_turn(other, None)  # derived, as before


def test_no_context_and_tracing_off_adds_no_header() -> None:
    traces = TraceContexts()
    turn_id = uuid4()
    assert event_trace_headers(traces, _started(turn_id, uuid4())) == []
    assert event_trace_headers(traces, _step(turn_id, uuid4())) == []
    idle = LoopIdle(header=Header(event_id=uuid4(), created_at=NOW))
    assert event_trace_headers(traces, idle) == []


def test_tracing_on_derives_the_trace_from_the_turn() -> None:
    traces = TraceContexts(ratio_sampler(1.0))
    turn_id = uuid4()
    headers = dict(event_trace_headers(traces, _started(turn_id, uuid4())))
    context = TraceContext.parse(headers[TRACEPARENT])
    assert context == TraceContext(
        trace_id_for(turn_id), span_id_for("turn", turn_id), True
    )
    assert TRACE_ORIGIN not in headers


def test_store_is_bounded() -> None:
    traces = TraceContexts(capacity=2)
    carried = TraceContext(1, 1, True)
    first, *rest = [uuid4() for _ in range(3)]
    for command_id in (first, *rest):
        traces.remember(command_id, carried)
    assert traces.open_turn(uuid4(), first) is None  # evicted
    assert traces.open_turn(uuid4(), rest[0]) is not None


def test_journal_spans_join_the_carried_trace() -> None:
    """The rebuilt turn span hangs under the submit's span, in its trace."""
    traces = TraceContexts()
    turn_id, step_id, command_id = uuid4(), uuid4(), uuid4()
    carried = TraceContext.parse(CARRIED)
    assert carried is not None
    traces.remember(command_id, carried)
    started = _started(turn_id, command_id)
    step = _step(turn_id, step_id)
    done = TurnDone(
        header=Header(event_id=uuid4(), turn_id=turn_id, created_at=NOW),
        turn_index=1,
        message=AIMessage(blocks=(TextBlock(text="ok"),)),
    )
    spans = JournalSpans().add_all(
        (event, event_trace_headers(traces, event)) for event in (started, step, done)
    )
    by_name = {s.name: s for s in spans}
    assert {s.trace_id for s in spans} == {carried.trace_id}
    assert by_name["invoke_agent"].parent_id == carried.span_id
    assert by_name["invoke_agent"].span_id == span_id_for("turn", turn_id)
    assert by_name["step"].parent_id == span_id_for("turn", turn_id)
    assert by_name["chat"].parent_id == span_id_for("step", step_id)
