"""Input queue, folding and cancellation scenarios: contract §9.4 items 49-61."""

from __future__ import annotations

import asyncio

import pytest

from turnstream.commands import Shutdown
from turnstream.events import (
    Agency,
    CancelReason,
    InputCancelled,
    InputQueued,
    RejectReason,
    TokenDelta,
    TurnDone,
    TurnFoldedInto,
    TurnStarted,
)
from turnstream.memory import InMemoryHub
from turnstream.runtime import LoopConfig
from turnstream.testing import (
    FunctionTool,
    Pause,
    call,
    describe_message,
    failing_step,
    open_rig,
    text_step,
    tool_step,
)


def gated_tool(release: asyncio.Event, name: str = "work") -> FunctionTool:
    """A tool that finishes only when ``release`` is set."""

    async def waits(_i: str, _c: object) -> str:
        await release.wait()
        return "r"

    return FunctionTool(name, waits)


async def test_submit_to_idle_starts_turn() -> None:
    """Contract 9.4 #49 TestSubmitToIdleStartsTurn: an idle submit's only reply is
    TurnStarted.
    """
    async with open_rig(text_step("x")) as rig:
        cmd = await rig.submit("a")
        await rig.idle()
        replies = [e for e in rig.events if e.reply_to() == cmd]
        assert [type(e).__name__ for e in replies] == ["TurnStarted"]


async def test_submit_to_running_queueable_queues() -> None:
    """Contract 9.4 #50 TestSubmitToRunningQueueableQueues: busy submit → InputQueued
    (no TurnID), FIFO.
    """
    pause = Pause()
    async with open_rig(
        [pause, *text_step("1")], text_step("2"), text_step("3")
    ) as rig:
        await rig.submit("a")
        await pause.wait_reached()
        b = await rig.submit("b")
        c = await rig.submit("c")
        await rig.recorder.wait_for_type(InputQueued, count=2)
        queued = rig.recorder.of_type(InputQueued)
        assert [q.reply_to() for q in queued] == [b, c]
        assert all(q.header.turn_id is None for q in queued)
        pause.release()
        await rig.recorder.wait_for_type(TurnDone, count=3)
        started = rig.recorder.of_type(TurnStarted)
        assert [s.reply_to() for s in started[1:]] == [b, c]


async def test_inbox_full_rejected() -> None:
    """Contract 9.4 #51 TestInboxFullRejected: a full inbox answers
    TurnRejected{queue_full}.
    """
    pause = Pause()
    config = LoopConfig(model="m", inbox_capacity=2)
    async with open_rig([pause], config=config) as rig:
        await rig.submit("a")
        await pause.wait_reached()
        await rig.submit("b")
        await rig.submit("c")
        d = await rig.submit("d")
        event = await rig.recorder.wait_for(lambda e: e.reply_to() == d)
        assert rig.after_start()[-1] == ("TurnRejected", d, RejectReason.QUEUE_FULL)
        assert event.header.turn_id is None


async def test_shutting_down_rejected() -> None:
    """Contract 9.4 #51 TestShuttingDownRejected: input arriving during shutdown →
    TurnRejected{shutting_down}.
    """
    pause = Pause()
    async with open_rig([pause]) as rig:
        await rig.submit("a")
        await pause.wait_reached()
        # Shutdown goes on the priority lane, so it is handled before this submit.
        rig.session.loop(rig.loop_id).post(
            Shutdown(
                command_id=rig.ids.new_id(),
                session_id=rig.session.session_id,
                loop_id=rig.loop_id,
                created_at=rig.clock.now(),
            )
        )
        late = await rig.submit("late")
        await rig.recorder.wait_for(lambda e: e.reply_to() == late)
        assert ("TurnRejected", late, RejectReason.SHUTTING_DOWN) in rig.after_start()


async def test_invalid_input_rejected() -> None:
    """Contract §4.2 (turnstream addition): an empty message →
    TurnRejected{invalid_input, detail}.
    """
    async with open_rig() as rig:
        blank = await rig.submit("   ")
        none = await rig.submit([])
        await rig.idle()
        rejected = [e for e in rig.events if e.reply_to() in (blank, none)]
        assert [(e.reason, e.detail) for e in rejected] == [  # type: ignore[union-attr]
            (RejectReason.INVALID_INPUT, "message is empty"),
            (RejectReason.INVALID_INPUT, "message has no blocks"),
        ]
        assert rig.model.requests == []


async def test_normal_completion_pops_inbox() -> None:
    """Contract 9.4 #52 TestNormalCompletionPopsInbox: TurnDone with a queue starts
    exactly one next turn.
    """
    pause = Pause()
    second = Pause()
    async with open_rig(
        [pause, *text_step("1")], [second, *text_step("2")], text_step("3")
    ) as rig:
        await rig.submit("a")
        await pause.wait_reached()
        b = await rig.submit("b")
        c = await rig.submit("c")
        await rig.recorder.wait_for_type(InputQueued, count=2)
        pause.release()
        await second.wait_reached()
        started = rig.recorder.of_type(TurnStarted)
        assert [s.reply_to() for s in started[1:]] == [b]
        second.release()
        await rig.recorder.wait_for_type(TurnDone, count=3)
        assert [s.reply_to() for s in rig.recorder.of_type(TurnStarted)[1:]] == [b, c]


class TrippingHub(InMemoryHub):
    """Arms an id failure once the first turn's answer has streamed.

    The first turn's last id is minted before its answer streams; the next
    mint is the chained turn's id, at the turn's end.
    """

    def __init__(self) -> None:
        super().__init__()
        self.on_answer: list[object] = []

    async def publish(self, event: object) -> None:  # type: ignore[override]
        await super().publish(event)  # type: ignore[arg-type]
        if isinstance(event, TokenDelta):
            for action in self.on_answer:
                action()  # type: ignore[operator]
            self.on_answer.clear()


async def test_inbox_pop_id_gen_failure_returns_entry() -> None:
    """Contract 9.4 #54 TestInboxPopIDGenFailureReturnsEntry: a popped entry that cannot
    start is returned, never stranded.
    """
    pause = Pause()
    hub = TrippingHub()
    async with open_rig([pause, *text_step("1")], text_step("2"), hub=hub) as rig:
        await rig.submit("a")
        await pause.wait_reached()
        b = await rig.submit("b")
        c = await rig.submit("c")
        await rig.recorder.wait_for_type(InputQueued, count=2)
        hub.on_answer.append(lambda: rig.ids.fail_next(1))  # the next is b's turn id
        pause.release()
        await rig.idle()
        assert rig.after_start()[-4:] == [
            ("TurnDone", 1, "AI:1"),
            ("InputCancelled", b, CancelReason.TURN_FAILED),
            ("InputCancelled", c, CancelReason.TURN_FAILED),
            ("LoopIdle",),
        ]
        cancelled = rig.recorder.of_type(InputCancelled)
        assert all(e.header.turn_id is None for e in cancelled)


async def test_fold_at_tool_continuation() -> None:
    """Contract 9.4 #55 TestFoldAtToolContinuation: fold after a tool step;
    TurnFoldedInto carries the turn and the causes.
    """
    release = asyncio.Event()
    steps = [tool_step(call("work", id="u1")), text_step("end")]
    async with open_rig(*steps, tools=[gated_tool(release)]) as rig:
        await rig.submit("a")
        folded_cmd = await rig.submit("b", agency=Agency.MACHINE)
        await rig.recorder.wait_for_type(InputQueued)
        release.set()
        await rig.idle()
        folded = rig.recorder.of_type(TurnFoldedInto)[0]
        started = rig.recorder.of_type(TurnStarted)[0]
        assert folded.header.turn_id == started.header.turn_id
        assert folded.header.step_id is None
        assert folded.turn_index == 1
        assert folded.header.cause is not None
        assert folded.header.cause.command_id == folded_cmd
        assert folded.header.cause.agency is Agency.MACHINE
        assert [describe_message(m) for m in await rig.history()] == [
            "User:a",
            "AI:tool_use:u1",
            "Tool:u1:r",
            "User:b",
            "AI:end",
        ]


async def test_no_tool_final_answer_does_not_fold() -> None:
    """Contract 9.4 #56 TestNoToolFinalAnswerDoesNotFold: input queued during a
    text-only final step starts a later turn.
    """
    pause = Pause()
    async with open_rig([pause, *text_step("1")], text_step("2")) as rig:
        await rig.submit("a")
        await pause.wait_reached()
        b = await rig.submit("b")
        await rig.recorder.wait_for_type(InputQueued)
        pause.release()
        await rig.recorder.wait_for_type(TurnDone, count=2)
        assert not rig.recorder.of_type(TurnFoldedInto)
        assert rig.recorder.of_type(TurnStarted)[1].reply_to() == b


@pytest.mark.parametrize(
    ("agency", "expect_retained"),
    [
        pytest.param(Agency.MACHINE, False, id="machine-returned"),
        pytest.param(Agency.USER, True, id="user-retained"),
    ],
)
async def test_draining_sweep_returns_entry_on_interrupt(
    agency: Agency, expect_retained: bool
) -> None:
    """Contract 9.4 #57
    TestInterruptDuringDrainFreesTurn/TestDrainingSweepReturnsEntryOnInterrupt:
    drained-but-uncommitted entries are returned.
    """
    release = asyncio.Event()
    steps = [tool_step(call("work", id="u1")), text_step("later")]
    async with open_rig(*steps, tools=[gated_tool(release)]) as rig:
        await rig.submit("a")
        queued = await rig.submit("b", agency=agency)
        await rig.recorder.wait_for_type(InputQueued)
        # The fold commit fails: the turn ends interrupted with b still draining.
        rig.journal.fail_when(
            lambda evs: any(isinstance(e, TurnFoldedInto) for e in evs)
        )
        release.set()
        await rig.recorder.wait_for(lambda e: e.type_name == "TurnInterrupted")
        rig.journal.fail_when(None)
        await rig.idle()
        if expect_retained:
            await rig.recorder.wait_for_type(TurnDone)
            second = rig.recorder.of_type(TurnStarted)[1]
            assert second.reply_to() == queued
        else:
            assert (
                "InputCancelled",
                queued,
                CancelReason.TURN_INTERRUPTED,
            ) in rig.after_start()
            assert len(rig.recorder.of_type(TurnStarted)) == 1
        resolutions = [e for e in rig.events if e.reply_to() == queued]
        assert [e.type_name for e in resolutions].count("InputQueued") == 1
        assert len(resolutions) == 2  # InputQueued, then exactly one resolution


async def test_non_folding_input_starts_own_turn() -> None:
    """Contract 9.4 #58 TestNonFoldingInputStartsOwnTurn."""
    release = asyncio.Event()
    steps = [tool_step(call("work", id="u1")), text_step("1"), text_step("2")]
    async with open_rig(*steps, tools=[gated_tool(release)]) as rig:
        await rig.submit("a")
        b = await rig.submit("b", no_fold=True)
        await rig.recorder.wait_for_type(InputQueued)
        release.set()
        await rig.recorder.wait_for_type(TurnDone, count=2)
        assert not rig.recorder.of_type(TurnFoldedInto)
        assert rig.recorder.of_type(TurnStarted)[1].reply_to() == b


async def test_cancel_while_queued_publishes_input_cancelled() -> None:
    """Contract 9.4 #59 TestCancelWhileQueuedPublishesInputCancelled: retract →
    InputCancelled{client_retracted}, no TurnID.
    """
    pause = Pause()
    async with open_rig([pause, *text_step("1")]) as rig:
        await rig.submit("a")
        await pause.wait_reached()
        b = await rig.submit("b")
        await rig.recorder.wait_for_type(InputQueued)
        await rig.session.retract(b)
        event = await rig.recorder.wait_for_type(InputCancelled)
        assert event.reply_to() == b
        assert event.reason is CancelReason.CLIENT_RETRACTED
        assert event.header.turn_id is None
        pause.release()
        await rig.idle()
        assert len(rig.recorder.of_type(TurnStarted)) == 1


async def test_cancel_unknown_input_is_noop() -> None:
    """Contract 9.4 #59 TestCancelUnknownInputIsNoop: retracting a started or unknown
    input emits nothing.
    """
    async with open_rig(text_step("1")) as rig:
        a = await rig.submit("a")
        await rig.idle()
        before = rig.after_start()
        await rig.session.retract(a)
        await rig.session.retract(rig.ids.new_id())  # type: ignore[arg-type]
        await rig.idle()
        assert rig.after_start() == before


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        pytest.param("interrupt", CancelReason.TURN_INTERRUPTED, id="interrupted"),
        pytest.param("fail", CancelReason.TURN_FAILED, id="failed"),
    ],
)
async def test_abnormal_terminal_returns_queued_input(
    how: str, reason: CancelReason
) -> None:
    """Contract 9.4 #60 TestAbnormalTerminalReturnsQueuedInput: machine input is
    returned with the matching reason, never auto-started.
    """
    pause = Pause()
    script = [pause, *failing_step()] if how == "fail" else [pause]
    async with open_rig(script, text_step("never")) as rig:
        await rig.submit("a")
        await pause.wait_reached()
        b = await rig.submit("b", agency=Agency.MACHINE)
        c = await rig.submit("c", agency=Agency.MACHINE)
        await rig.recorder.wait_for_type(InputQueued, count=2)
        if how == "interrupt":
            await rig.session.interrupt()
        else:
            pause.release()
        await rig.idle()
        turn = rig.recorder.of_type(TurnStarted)[0]
        cancelled = rig.recorder.of_type(InputCancelled)
        assert [(e.reply_to(), e.reason) for e in cancelled] == [
            (b, reason),
            (c, reason),
        ]
        assert all(e.header.turn_id == turn.header.turn_id for e in cancelled)
        assert all(e.turn_index == 1 for e in cancelled)
        assert len(rig.recorder.of_type(TurnStarted)) == 1
        assert rig.after_start()[-1] == ("LoopIdle",)


async def test_failed_turn_returns_user_input_too() -> None:
    """Contract §10.1.5: TurnFailed returns everything (user input included); nothing is
    auto-started.
    """
    pause = Pause()
    async with open_rig([pause, *failing_step()]) as rig:
        await rig.submit("a")
        await pause.wait_reached()
        b = await rig.submit("b")
        await rig.recorder.wait_for_type(InputQueued)
        pause.release()
        await rig.idle()
        assert ("InputCancelled", b, CancelReason.TURN_FAILED) in rig.after_start()


async def test_agency_copied_onto_replies() -> None:
    """Contract 9.4 #61
    TestTurnStartedCopiesCommandAgency/TestTurnFoldedIntoCopiesCommandAgency/TestInputCancelledCopiesCommandAgency.
    """
    release = asyncio.Event()
    pause = Pause()
    steps = [tool_step(call("work", id="u1")), [pause]]
    async with open_rig(*steps, tools=[gated_tool(release)]) as rig:
        a = await rig.submit("a", agency=Agency.MACHINE)
        b = await rig.submit("b", agency=Agency.USER)
        await rig.recorder.wait_for_type(InputQueued)
        release.set()
        await pause.wait_reached()
        c = await rig.submit("c", agency=Agency.MACHINE)
        await rig.recorder.wait_for_type(InputQueued, count=2)
        await rig.session.interrupt()
        await rig.idle()
        agency = {
            e.reply_to(): e.header.cause.agency  # type: ignore[union-attr]
            for e in rig.events
            if isinstance(e, TurnStarted | TurnFoldedInto | InputCancelled)
        }
        assert agency == {a: Agency.MACHINE, b: Agency.USER, c: Agency.MACHINE}
