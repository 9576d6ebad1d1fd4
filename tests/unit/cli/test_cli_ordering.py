"""LiveOrder: per-turn display order over a feed merged from two topics."""

from __future__ import annotations

from uuid import UUID

import pytest

from turnstream.cli.ordering import LiveOrder
from turnstream.content import AIMessage, TextBlock, TextChunk, UserMessage
from turnstream.events import (
    AnyEvent,
    Cause,
    Header,
    InputQueued,
    LoopIdle,
    StepDone,
    TokenDelta,
    TurnDone,
    TurnInterrupted,
    TurnStarted,
)

LOOP = UUID("11111111-aaaa-4aaa-8aaa-aaaaaaaaaaaa")
TURN = UUID("22222222-bbbb-4bbb-8bbb-bbbbbbbbbbbb")
STEP = UUID("33333333-cccc-4ccc-8ccc-cccccccccccc")


def started() -> TurnStarted:
    return TurnStarted(
        header=Header(loop_id=LOOP, turn_id=TURN, cause=Cause(command_id=LOOP)),
        turn_index=1,
        message=UserMessage(blocks=(TextBlock(text="hi"),)),
    )


def delta(text: str) -> TokenDelta:
    return TokenDelta(
        header=Header(loop_id=LOOP, turn_id=TURN, step_id=STEP),
        turn_index=1,
        chunk=TextChunk(text=text),
    )


def texts(events: list[AnyEvent]) -> list[str]:
    return [e.chunk.text if isinstance(e, TokenDelta) else e.type_name for e in events]  # type: ignore[union-attr]


def test_early_delta_is_released_after_turn_started() -> None:
    """A delta that overtook its TurnStarted is shown right after it."""
    order = LiveOrder()

    assert order.accept(delta("a"), now=0.0) == []
    assert order.held == 1
    assert texts(order.accept(started(), now=0.1)) == ["TurnStarted", "a"]
    assert texts(order.accept(delta("b"), now=0.2)) == ["b"]


def test_late_delta_after_terminal_is_dropped() -> None:
    """Deltas that arrive after the turn's terminal are not shown."""
    order = LiveOrder()
    order.accept(started(), now=0.0)
    order.accept(
        TurnInterrupted(header=Header(loop_id=LOOP, turn_id=TURN), turn_index=1),
        now=0.1,
    )

    assert order.accept(delta("late"), now=0.2) == []
    assert order.dropped == 1


def test_deltas_of_a_turn_that_started_earlier_are_released_after_grace() -> None:
    """A watcher that joined mid-turn still sees the deltas, after the grace."""
    order = LiveOrder(grace=0.5)

    assert order.accept(delta("a"), now=0.0) == []
    assert order.expire(now=0.4) == []
    assert texts(order.expire(now=0.6)) == ["a"]
    assert texts(order.accept(delta("b"), now=0.7)) == ["b"]


def test_events_without_a_turn_pass_through() -> None:
    """InputQueued (no turn id) is never held."""
    queued = InputQueued(header=Header(loop_id=LOOP, cause=Cause(command_id=LOOP)))

    assert LiveOrder().accept(queued, now=0.0) == [queued]


def test_terminal_discards_held_deltas_and_drain_releases_the_rest() -> None:
    """Held deltas of an ended turn are dropped; drain() empties the rest."""
    order = LiveOrder()
    order.accept(delta("x"), now=0.0)
    done = TurnDone(
        header=Header(loop_id=LOOP, turn_id=TURN),
        turn_index=1,
        message=AIMessage(blocks=(TextBlock(text="ok"),)),
    )

    assert order.accept(done, now=0.1) == [done]
    assert order.dropped == 1
    assert order.drain() == []


def test_overflow_releases_oldest_turn() -> None:
    """Holding more than max_held releases the oldest turn's events."""
    order = LiveOrder(max_held=2)
    order.accept(delta("a"), now=0.0)
    order.accept(delta("b"), now=0.0)

    assert texts(order.accept(delta("c"), now=0.0)) == ["a", "b", "c"]


STEP2 = UUID("44444444-cccc-4ccc-8ccc-cccccccccccc")


def step_done(step: UUID = STEP) -> StepDone:
    return StepDone(
        header=Header(loop_id=LOOP, turn_id=TURN, step_id=step),
        messages=(AIMessage(blocks=(TextBlock(text="ok"),)),),
    )


def delta_of(text: str, step: UUID) -> TokenDelta:
    return TokenDelta(
        header=Header(loop_id=LOOP, turn_id=TURN, step_id=step),
        turn_index=1,
        chunk=TextChunk(text=text),
    )


def test_settle_shows_a_steps_late_delta_before_its_step_done() -> None:
    """A delta overtaken by its own StepDone is shown first; StepDone after settle."""
    order = LiveOrder(settle=0.25)
    order.accept(started(), now=0.0)

    assert order.accept(step_done(), now=1.0) == []
    assert order.next_due(1.0) == pytest.approx(0.25)
    assert texts(order.accept(delta_of("late", STEP), now=1.1)) == ["late"]
    assert texts(order.expire(now=1.3)) == ["StepDone"]


def test_settle_keeps_the_next_steps_deltas_after_the_step_done() -> None:
    """A delta of the next step waits behind the settling StepDone."""
    order = LiveOrder(settle=0.25)
    order.accept(started(), now=0.0)
    order.accept(step_done(STEP), now=1.0)

    assert order.accept(delta_of("next", STEP2), now=1.1) == []
    assert texts(order.expire(now=1.3)) == ["StepDone", "next"]


def test_settle_keeps_journal_order_and_drops_deltas_after_the_terminal() -> None:
    """LoopIdle waits behind a settling TurnDone; a delta after the end is dropped."""
    order = LiveOrder(settle=0.25)
    order.accept(started(), now=0.0)
    done = TurnDone(
        header=Header(loop_id=LOOP, turn_id=TURN),
        turn_index=1,
        message=AIMessage(blocks=(TextBlock(text="ok"),)),
    )
    idle = LoopIdle(header=Header(loop_id=LOOP))

    assert order.accept(done, now=1.0) == []
    assert order.accept(idle, now=1.0) == []
    assert texts(order.accept(delta_of("final", STEP), now=1.1)) == ["final"]
    assert texts(order.expire(now=1.3)) == ["TurnDone", "LoopIdle"]
    assert order.accept(delta_of("too late", STEP), now=1.4) == []
    assert order.dropped == 1


def test_drain_releases_settling_events() -> None:
    """drain() empties the settle queue in order."""
    order = LiveOrder(settle=5.0)
    order.accept(started(), now=0.0)
    order.accept(step_done(), now=0.0)

    assert texts(order.drain()) == ["StepDone"]
    assert order.held == 0
