"""TurnFollower (which events a chat shows, and its exit code) and JournalTail."""

from __future__ import annotations

from uuid import UUID, uuid4

import pytest

from turnstream.cli.chat import TurnFollower
from turnstream.cli.settings import ExitCode
from turnstream.cli.tail import JournalTail
from turnstream.content import AIMessage, TextBlock, TextChunk, UserMessage
from turnstream.events import (
    AnyEvent,
    CancelReason,
    Cause,
    FailureInfo,
    Header,
    InputCancelled,
    InputQueued,
    LoopStarted,
    RejectReason,
    TokenDelta,
    TurnDone,
    TurnFailed,
    TurnInterrupted,
    TurnRejected,
    TurnStarted,
)

LOOP = uuid4()
COMMAND = uuid4()
TURN = uuid4()
OTHER = uuid4()
MESSAGE = UserMessage(blocks=(TextBlock(text="hi"),))


def started(turn: UUID = TURN, command: UUID = COMMAND) -> TurnStarted:
    return TurnStarted(
        header=Header(
            event_id=uuid4(),
            loop_id=LOOP,
            turn_id=turn,
            cause=Cause(command_id=command),
        ),
        turn_index=1,
        message=MESSAGE,
    )


def on_turn(turn: UUID = TURN) -> Header:
    return Header(event_id=uuid4(), loop_id=LOOP, turn_id=turn)


@pytest.mark.parametrize(
    ("terminal", "code"),
    [
        pytest.param(
            TurnDone(header=on_turn(), turn_index=1, message=AIMessage(blocks=())),
            ExitCode.OK,
            id="done-0",
        ),
        pytest.param(
            TurnFailed(header=on_turn(), turn_index=1, error=FailureInfo()),
            ExitCode.FAILED,
            id="failed-1",
        ),
        pytest.param(
            TurnInterrupted(header=on_turn(), turn_index=1),
            ExitCode.INTERRUPTED,
            id="interrupted-130",
        ),
    ],
)
def test_follower_exit_code_is_the_terminals(
    terminal: AnyEvent, code: ExitCode
) -> None:
    """0 done, 1 failed, 130 interrupted."""
    follower = TurnFollower(COMMAND)

    assert follower.see(started()) == (True, None)
    assert follower.see(terminal) == (True, code)


def test_follower_hides_other_turns_and_shows_its_own() -> None:
    """Events of another input's turn are not shown; its own deltas are."""
    follower = TurnFollower(COMMAND)
    delta = TokenDelta(
        header=Header(loop_id=LOOP, turn_id=TURN, step_id=uuid4()),
        turn_index=1,
        chunk=TextChunk(text="x"),
    )

    assert follower.see(LoopStarted(header=Header(loop_id=LOOP))) == (True, None)
    assert follower.see(started(turn=OTHER, command=uuid4())) == (False, None)
    assert follower.see(TurnInterrupted(header=on_turn(OTHER), turn_index=1)) == (
        False,
        None,
    )
    queued = InputQueued(header=Header(loop_id=LOOP, cause=Cause(command_id=COMMAND)))
    assert follower.see(queued) == (True, None)
    assert follower.see(started()) == (True, None)
    assert follower.see(delta) == (True, None)


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        pytest.param(
            TurnRejected(
                header=Header(loop_id=LOOP, cause=Cause(command_id=COMMAND)),
                reason=RejectReason.QUEUE_FULL,
            ),
            ExitCode.FAILED,
            id="rejected",
        ),
        pytest.param(
            InputCancelled(
                header=Header(
                    loop_id=LOOP, turn_id=OTHER, cause=Cause(command_id=COMMAND)
                ),
                reason=CancelReason.TURN_INTERRUPTED,
                message=MESSAGE,
            ),
            ExitCode.INTERRUPTED,
            id="cancelled-by-interrupt",
        ),
        pytest.param(
            InputCancelled(
                header=Header(
                    loop_id=LOOP, turn_id=OTHER, cause=Cause(command_id=COMMAND)
                ),
                reason=CancelReason.TURN_FAILED,
                message=MESSAGE,
            ),
            ExitCode.FAILED,
            id="cancelled-by-failure",
        ),
    ],
)
def test_follower_ends_on_an_input_that_never_ran(
    answer: AnyEvent, code: ExitCode
) -> None:
    """A rejected or returned input ends the chat without a turn."""
    assert TurnFollower(COMMAND).see(answer) == (True, code)


def test_journal_tail_prints_each_journal_event_once() -> None:
    """An event seen in the replay and again live is printed once; deltas always."""
    tail = JournalTail()
    event = started()
    delta = TokenDelta(
        header=Header(loop_id=LOOP, turn_id=TURN, step_id=uuid4()),
        turn_index=1,
        chunk=TextChunk(text="x"),
    )

    assert tail.first_time(event)
    assert not tail.first_time(event)
    assert tail.first_time(delta)
    assert tail.first_time(delta)
