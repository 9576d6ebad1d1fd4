"""The event renderer: one exact line per event, token deltas inline."""

from __future__ import annotations

from uuid import UUID

import pytest

from turnstream.cli.render import EventRenderer, short_id, style_of
from turnstream.content import (
    AIMessage,
    TextBlock,
    TextChunk,
    ToolResultMessage,
    ToolUseBlock,
    ToolUseChunk,
    Usage,
    UserMessage,
)
from turnstream.events import (
    AnyEvent,
    CancelReason,
    Cause,
    FailureInfo,
    FailureKind,
    GateCloseReason,
    GateOpened,
    GateResolved,
    Header,
    InputCancelled,
    InputQueued,
    LoopIdle,
    LoopStarted,
    PermissionDecided,
    PermissionRequested,
    RejectReason,
    StepDone,
    TokenDelta,
    ToolCallCompleted,
    ToolCallStarted,
    TurnDone,
    TurnFailed,
    TurnFoldedInto,
    TurnInterrupted,
    TurnRejected,
    TurnStarted,
)

LOOP = UUID("11111111-aaaa-4aaa-8aaa-aaaaaaaaaaaa")
TURN = UUID("22222222-bbbb-4bbb-8bbb-bbbbbbbbbbbb")
TURN2 = UUID("77777777-bbbb-4bbb-8bbb-bbbbbbbbbbbb")
STEP = UUID("33333333-cccc-4ccc-8ccc-cccccccccccc")
COMMAND = UUID("44444444-dddd-4ddd-8ddd-dddddddddddd")
EXEC = UUID("55555555-eeee-4eee-8eee-eeeeeeeeeeee")
GATE = UUID("66666666-ffff-4fff-8fff-ffffffffffff")


def header(*, turn: UUID | None = None, step: UUID | None = None) -> Header:
    return Header(
        loop_id=LOOP, turn_id=turn, step_id=step, cause=Cause(command_id=COMMAND)
    )


def started(text: str = "What is 12 + 30 + 8?", turn: UUID = TURN, index: int = 1):
    return TurnStarted(
        header=header(turn=turn),
        turn_index=index,
        message=UserMessage(blocks=(TextBlock(text=text),)),
    )


def delta(text: str, turn: UUID = TURN, index: int = 1) -> TokenDelta:
    return TokenDelta(
        header=header(turn=turn, step=STEP),
        turn_index=index,
        chunk=TextChunk(text=text),
    )


def render_all(events: list[AnyEvent], **kwargs: object) -> str:
    renderer = EventRenderer(**kwargs)  # type: ignore[arg-type]
    return "".join(renderer.feed(e) for e in events) + renderer.close()


def test_short_id_is_eight_hex_digits_or_dash() -> None:
    """Ids are shown by their first 8 hex digits; a missing one as '-'."""
    assert short_id(LOOP) == "11111111"
    assert short_id(None) == "-"


def test_render_turn_with_inline_deltas_and_tool_calls() -> None:
    """A tool-using turn: one line per event, consecutive deltas on one line."""
    ai = AIMessage(
        blocks=(
            TextBlock(text="Let me work that out."),
            ToolUseBlock(id="demo-1-1", name="add", input='{"a": 12, "b": 30}'),
        )
    )
    result = ToolResultMessage(tool_use_id="demo-1-1", blocks=(TextBlock(text="42"),))
    events: list[AnyEvent] = [
        LoopStarted(header=header(), model="demo"),
        started(),
        delta("Let me "),
        delta("work that out."),
        TokenDelta(
            header=header(turn=TURN, step=STEP),
            turn_index=1,
            chunk=ToolUseChunk(id="demo-1-1", name="add"),
        ),
        TokenDelta(
            header=header(turn=TURN, step=STEP),
            turn_index=1,
            chunk=ToolUseChunk(input_json='{"a": 12, "b": 30}'),
        ),
        ToolCallStarted(
            header=header(turn=TURN, step=STEP),
            tool_execution_id=EXEC,
            tool_use_id="demo-1-1",
            tool_name="add",
            summary="add",
        ),
        ToolCallCompleted(
            header=header(turn=TURN, step=STEP),
            tool_execution_id=EXEC,
            tool_use_id="demo-1-1",
            result_preview="42",
        ),
        StepDone(header=header(turn=TURN, step=STEP), messages=(ai, result)),
        delta("The total is 50."),
        TurnDone(
            header=header(turn=TURN),
            turn_index=1,
            message=AIMessage(blocks=(TextBlock(text="The total is 50."),)),
            usage=Usage(input_tokens=40, cache_read_tokens=2, output_tokens=9),
        ),
        LoopIdle(header=header()),
    ]

    assert render_all(events) == (
        "LoopStarted         loop=11111111 model=demo\n"
        "TurnStarted         loop=11111111 turn=22222222 #1"
        ' input="What is 12 + 30 + 8?"\n'
        "TokenDelta          loop=11111111 turn=22222222 #1"
        ' │ Let me work that out. → add{"a": 12, "b": 30}\n'
        "ToolCallStarted     loop=11111111 turn=22222222 #1 tool=add id=demo-1-1\n"
        "ToolCallCompleted   loop=11111111 turn=22222222 #1"
        ' id=demo-1-1 ok result="42"\n'
        "StepDone            loop=11111111 turn=22222222 #1"
        " step=33333333 calls=add results=1\n"
        "TokenDelta          loop=11111111 turn=22222222 #1 │ The total is 50.\n"
        "TurnDone            loop=11111111 turn=22222222 #1"
        ' answer="The total is 50." tokens=42in/9out\n'
        "LoopIdle            loop=11111111\n"
    )


def test_render_deltas_of_another_turn_start_a_new_line() -> None:
    """Deltas of a second turn never continue the first turn's line."""
    events: list[AnyEvent] = [
        started(),
        started("next", turn=TURN2, index=2),
        delta("a"),
        delta("b", turn=TURN2, index=2),
    ]

    assert render_all(events).splitlines()[2:] == [
        "TokenDelta          loop=11111111 turn=22222222 #1 │ a",
        "TokenDelta          loop=11111111 turn=77777777 #2 │ b",
    ]


def test_render_newlines_in_deltas_stay_on_one_line() -> None:
    """A streamed newline is shown as ⏎ so the line stays one line."""
    assert (
        render_all([started(), delta("one\ntwo")]).splitlines()[1].endswith("│ one⏎two")
    )


def test_render_without_deltas_skips_them() -> None:
    """deltas=False leaves token deltas out entirely."""
    out = render_all(
        [started(), delta("hidden"), LoopIdle(header=header())], deltas=False
    )

    assert "hidden" not in out
    assert out.count("\n") == 2


def test_render_close_is_empty_without_an_open_line() -> None:
    """close() only writes a newline when a delta line is open."""
    renderer = EventRenderer()
    assert renderer.close() == ""
    renderer.feed(started())
    renderer.feed(delta("x"))
    assert renderer.line_open
    assert renderer.close() == "\n"
    assert renderer.close() == ""


def test_render_long_input_is_cut_and_quotes_escaped() -> None:
    """Previews are cut with … and keep quotes and newlines escaped."""
    text = 'say "hi"\n' + "x" * 100
    line = EventRenderer(preview=20).line(started(text))

    assert line.endswith('input="say \\"hi\\"\\nxxxxxxxxxx…"')


def _message() -> UserMessage:
    return UserMessage(blocks=(TextBlock(text="later"),))


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        pytest.param(
            InputQueued(header=header()),
            "InputQueued         loop=11111111 command=44444444",
            id="input-queued",
        ),
        pytest.param(
            TurnRejected(
                header=header(), reason=RejectReason.QUEUE_FULL, detail="64 queued"
            ),
            'TurnRejected        loop=11111111 reason=queue_full detail="64 queued"',
            id="rejected",
        ),
        pytest.param(
            TurnFoldedInto(header=header(turn=TURN), turn_index=3, message=_message()),
            'TurnFoldedInto      loop=11111111 turn=22222222 #3 input="later"',
            id="folded",
        ),
        pytest.param(
            InputCancelled(
                header=header(turn=TURN),
                reason=CancelReason.TURN_INTERRUPTED,
                message=_message(),
                turn_index=3,
            ),
            "InputCancelled      loop=11111111 turn=22222222 #3"
            " reason=turn_interrupted command=44444444",
            id="cancelled",
        ),
        pytest.param(
            TurnFailed(
                header=header(turn=TURN),
                turn_index=2,
                error=FailureInfo(kind=FailureKind.PROVIDER, message="HTTP 503"),
            ),
            "TurnFailed          loop=11111111 turn=22222222 #2"
            ' kind=provider error="HTTP 503"',
            id="failed",
        ),
        pytest.param(
            TurnInterrupted(header=header(turn=TURN), turn_index=4),
            "TurnInterrupted     loop=11111111 turn=22222222 #4",
            id="interrupted",
        ),
        pytest.param(
            ToolCallCompleted(
                header=header(turn=TURN, step=STEP),
                tool_execution_id=EXEC,
                tool_use_id="c1",
                is_error=True,
                result_preview="boom",
            ),
            'ToolCallCompleted   loop=11111111 turn=22222222 id=c1 error result="boom"',
            id="tool-error-unknown-index",
        ),
        pytest.param(
            PermissionDecided(
                header=header(turn=TURN, step=STEP),
                tool_execution_id=EXEC,
                effect="deny",
                reason="policy",
                subject="rm",
            ),
            "PermissionDecided   loop=11111111 turn=22222222"
            ' effect=deny subject="rm" reason="policy"',
            id="permission-decided",
        ),
        pytest.param(
            PermissionRequested(
                header=header(turn=TURN, step=STEP),
                tool_execution_id=EXEC,
                gate_id=GATE,
                tool_name="shell",
            ),
            f"PermissionRequested loop=11111111 turn=22222222 gate={GATE} tool=shell",
            id="permission-requested",
        ),
        pytest.param(
            GateOpened(
                header=header(turn=TURN, step=STEP),
                gate_id=GATE,
                kind="approval",
                actions=("approve", "deny"),
            ),
            "GateOpened          loop=11111111 turn=22222222"
            " gate=66666666 kind=approval actions=approve,deny",
            id="gate-opened",
        ),
        pytest.param(
            GateResolved(
                header=header(turn=TURN, step=STEP),
                gate_id=GATE,
                reason=GateCloseReason.ANSWERED,
                action="approve",
            ),
            "GateResolved        loop=11111111 turn=22222222"
            " gate=66666666 answered action=approve",
            id="gate-resolved",
        ),
    ],
)
def test_render_line_per_event_type(event: AnyEvent, expected: str) -> None:
    """Each event type's line: type column, short ids, index, key fields."""
    assert EventRenderer().line(event) == expected


@pytest.mark.parametrize(
    ("event", "style"),
    [
        pytest.param(
            TurnInterrupted(header=header(turn=TURN), turn_index=1),
            "bold yellow",
            id="interrupted",
        ),
        pytest.param(LoopIdle(header=header()), "dim", id="idle"),
        pytest.param(delta("x"), "", id="delta"),
    ],
)
def test_style_of_highlights_terminals(event: AnyEvent, style: str) -> None:
    """Terminals stand out; bookkeeping events are dim."""
    assert style_of(event) == style


def test_render_full_answers_keeps_the_whole_answer() -> None:
    """chat shows a TurnDone answer whole; the default cuts it like any preview."""
    answer = "word " * 30
    done = TurnDone(
        header=header(turn=TURN),
        turn_index=1,
        message=AIMessage(blocks=(TextBlock(text=answer),)),
    )

    assert f'answer="{answer}"' in EventRenderer(full_answers=True).line(done)
    assert "…" in EventRenderer().line(done)
