"""Turn lifecycle scenarios: contract §9.3 items 29-48."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from turnstream.commands import Shutdown, SubmitInput
from turnstream.content import (
    AIMessage,
    RefusalBlock,
    RefusalChunk,
    TextBlock,
    TextChunk,
    ThinkingChunk,
    ToolUseChunk,
    Usage,
    UserMessage,
)
from turnstream.errors import ProviderError
from turnstream.events import (
    CancelReason,
    FailureKind,
    InputQueued,
    LoopIdle,
    LoopStarted,
    RejectReason,
    StepDone,
    TokenDelta,
    ToolCallCompleted,
    ToolCallStarted,
    TurnDone,
    TurnFailed,
    TurnInterrupted,
    TurnRejected,
    TurnStarted,
)
from turnstream.ids import LoopId, SessionId, TurnId
from turnstream.memory import InMemoryHub, InMemoryJournal
from turnstream.runtime import (
    INTERRUPTED_NOTICE,
    TRUNCATED_NOTICE,
    EventFilter,
    LocalSession,
    LoopActor,
    LoopConfig,
    LoopSetup,
    ModelRequest,
    StreamEnd,
    ToolLimits,
    fold_loop,
)
from turnstream.runtime.model_client import ModelEvent
from turnstream.state import LoopState
from turnstream.testing import (
    FixedClock,
    FunctionTool,
    Pause,
    ScriptedModel,
    SequentialIds,
    Stubborn,
    call,
    describe_message,
    failing_step,
    open_rig,
    text_step,
    tool_step,
)


async def history_of(rig: object) -> list[str]:
    return [describe_message(m) for m in await rig.history()]  # type: ignore[attr-defined]


async def test_single_turn() -> None:
    """Contract 9.3 #29 TestSingleTurn: a text turn ends TurnDone and the loop accepts
    the next one.
    """
    async with open_rig(text_step("one"), text_step("two")) as rig:
        await rig.submit("a")
        await rig.idle()
        await rig.submit("b")
        await rig.idle()
        done = rig.recorder.of_type(TurnDone)
        assert [(d.turn_index, describe_message(d.message)) for d in done] == [
            (1, "AI:one"),
            (2, "AI:two"),
        ]


async def test_turn_event_correlation_stamped() -> None:
    """Contract 9.3 #30 TestTurnEventCorrelationStamped: one TurnID per turn;
    TurnStarted cause = submit id.
    """
    tool = FunctionTool("t")
    async with open_rig(tool_step(call("t")), text_step("ok"), tools=[tool]) as rig:
        cmd = await rig.submit("go")
        await rig.idle()
        started = rig.recorder.of_type(TurnStarted)[0]
        assert started.reply_to() == cmd
        turn_events = [
            e for e in rig.events if not isinstance(e, LoopStarted | LoopIdle)
        ]
        assert {e.header.turn_id for e in turn_events} == {started.header.turn_id}


async def test_actor_commits_initial_user_message_and_turn_started() -> None:
    """Contract 9.3 #31: TurnStarted carries the exact UserMessage, committed before any
    step.
    """
    pause = Pause()
    message = UserMessage(blocks=(TextBlock(text="exact"), TextBlock(text=" words")))
    async with open_rig([pause, *text_step("ok")]) as rig:
        await rig.submit(message)
        await pause.wait_reached()
        assert rig.journal_events()[-1] == rig.recorder.of_type(TurnStarted)[0]
        assert rig.recorder.of_type(TurnStarted)[0].message == message
        assert await rig.history() == (message,)  # committed before the step ended
        assert rig.model.requests[0].messages == (message,)
        pause.release()
        await rig.idle()


async def test_actor_event_ordering_on_fan_in() -> None:
    """Contract 9.3 #32 TestActorEventOrderingOnFanIn: started, each step's deltas
    before its StepDone, terminal last.
    """
    tool = FunctionTool("t")
    steps = [tool_step(call("t", id="u1"), text="calling"), text_step("fi", "nal")]
    async with open_rig(*steps, tools=[tool]) as rig:
        await rig.submit("go")
        await rig.idle()
        events = [e for e in rig.events if not isinstance(e, LoopStarted)]
        assert isinstance(events[0], TurnStarted)
        assert isinstance(events[-2], TurnDone)
        assert isinstance(events[-1], LoopIdle)
        dones = [i for i, e in enumerate(events) if isinstance(e, StepDone)]
        for index, event in enumerate(events):
            if isinstance(event, TokenDelta | ToolCallStarted | ToolCallCompleted):
                own = next(
                    i for i in dones if events[i].header.step_id == event.header.step_id
                )
                assert index < own


async def test_actor_tool_turn_ordered_history() -> None:
    """Contract 9.3 #33 TestActorToolTurnOrderedHistory: [User, AI(tool_use), Tool,
    AI(tool_use), Tool, AI(text)].
    """
    tool = FunctionTool("t", lambda i, _c: f"r{i}")
    steps = [
        tool_step(call("t", "1", id="u1")),
        tool_step(call("t", "2", id="u2")),
        text_step("end"),
    ]
    async with open_rig(*steps, tools=[tool]) as rig:
        await rig.submit("go")
        await rig.idle()
        assert await history_of(rig) == [
            "User:go",
            "AI:tool_use:u1",
            "Tool:u1:r1",
            "AI:tool_use:u2",
            "Tool:u2:r2",
            "AI:end",
        ]


async def test_step_granularity_rollback() -> None:
    """Contract 9.3 #34 TestStepGranularityRollback: failure keeps the user message and
    committed steps; the over-limit step is not committed.
    """
    tool = FunctionTool("t")
    config = LoopConfig(model="m", tools=(tool,), limits=ToolLimits(max_tool_steps=2))
    steps = [tool_step(call("t", id=f"u{i}")) for i in range(3)]
    async with open_rig(*steps, config=config) as rig:
        await rig.submit("go")
        await rig.idle()
        failed = rig.recorder.of_type(TurnFailed)[0]
        assert failed.error.kind is FailureKind.TOOL_LIMIT
        assert failed.error.message == "tool limit reached: 3/2 iterations, 3/100 calls"
        assert await history_of(rig) == [
            "User:go",
            "AI:tool_use:u0",
            "Tool:u0:{}",
            "AI:tool_use:u1",
            "Tool:u1:{}",
        ]
        assert len(tool.calls) == 2  # the over-limit step never ran


async def test_tool_call_limit_counts_calls_strictly() -> None:
    """Contract 9.3 #34 / §10.1.8: the call cap is strict and late — the step that
    crosses it fails, unexecuted.
    """
    tool = FunctionTool("t")
    config = LoopConfig(model="m", tools=(tool,), limits=ToolLimits(max_tool_calls=2))
    steps = [
        tool_step(call("t", id="a"), call("t", id="b")),
        tool_step(call("t", id="c")),
    ]
    async with open_rig(*steps, config=config) as rig:
        await rig.submit("go")
        await rig.idle()
        assert rig.recorder.of_type(TurnFailed)[0].error.kind is FailureKind.TOOL_LIMIT
        assert len(tool.calls) == 2


async def test_text_answer_always_wins_over_the_tool_limit() -> None:
    """Contract §10.1.8: a text-only step always succeeds, whatever the
    iteration count.
    """
    tool = FunctionTool("t")
    config = LoopConfig(model="m", tools=(tool,), limits=ToolLimits(max_tool_steps=1))
    async with open_rig(tool_step(call("t")), text_step("fine"), config=config) as rig:
        await rig.submit("go")
        await rig.idle()
        assert rig.recorder.of_type(TurnDone)


async def test_interrupt_mid_turn() -> None:
    """Contract 9.3 #35 TestInterruptMidTurn / TestInterruptCancelsTurn: ack true,
    TurnInterrupted, loop reusable.
    """
    pause = Pause()
    async with open_rig([pause], text_step("again")) as rig:
        await rig.submit("a")
        await pause.wait_reached()
        assert await rig.session.interrupt() is True
        await rig.idle()
        assert rig.recorder.of_type(TurnInterrupted)[0].turn_index == 1
        await rig.submit("b")
        await rig.idle()
        assert rig.recorder.of_type(TurnDone)[0].turn_index == 2


async def test_interrupt_naming_an_ended_turn_cancels_nothing_and_is_answered() -> None:
    """An interrupt names its turn: once that turn ended it leaves the next turn
    running (acks false) and is answered ``TurnRejected{turn_ended}``; naming the
    running turn cancels it.
    """
    second, third = Pause(), Pause()
    async with open_rig(
        text_step("one"), [second, *text_step("two")], [third, *text_step("three")]
    ) as rig:
        await rig.submit("a")
        await rig.idle()
        ended = rig.recorder.of_type(TurnDone)[0].header.turn_id
        await rig.submit("b")
        await second.wait_reached()
        assert await rig.session.interrupt(turn_id=TurnId(ended)) is False
        rejected = rig.recorder.of_type(TurnRejected)
        assert [r.reason for r in rejected] == [RejectReason.TURN_ENDED]
        second.release()
        await rig.idle()
        assert [t.turn_index for t in rig.recorder.of_type(TurnDone)] == [1, 2]
        await rig.submit("c")
        await third.wait_reached()
        running = rig.recorder.of_type(TurnStarted)[-1].header.turn_id
        assert await rig.session.interrupt(turn_id=TurnId(running)) is True
        await rig.idle()
        assert [t.turn_index for t in rig.recorder.of_type(TurnInterrupted)] == [3]
        assert rig.recorder.of_type(TurnInterrupted)[0].header.turn_id == running


async def test_interrupt_idle() -> None:
    """Contract 9.3 #35 TestInterruptIdle: an idle interrupt acks false and emits
    nothing.
    """
    async with open_rig() as rig:
        assert await rig.session.interrupt() is False
        await rig.idle()
        assert rig.after_start() == []


async def test_second_interrupt_of_a_cancelled_turn_acks_false() -> None:
    """Contract 9.3 #35: true iff *this* interrupt cancelled a turn."""
    stubborn = Stubborn()
    config = LoopConfig(model="m", drain_timeout=5.0)
    async with open_rig([stubborn], config=config) as rig:
        await rig.submit("a")
        await stubborn.reached.wait()
        assert await rig.session.interrupt() is True
        assert await rig.session.interrupt() is False
        stubborn.release()
        await rig.idle()
        assert len(rig.recorder.of_type(TurnInterrupted)) == 1


async def test_shutdown_idle() -> None:
    """Contract 9.3 #36 TestShutdownIdle: shutdown of an idle loop is quiet (no
    LoopIdle).
    """
    async with open_rig() as rig:
        await rig.session.shutdown()
        assert rig.after_start() == []
        await rig.session.shutdown()  # idempotent


async def test_shutdown_mid_turn() -> None:
    """Contract 9.3 #36 TestShutdownMidTurn: the terminal is still published; queued
    input returned; no LoopIdle.
    """
    pause = Pause()
    async with open_rig([TextChunk(text="part"), pause]) as rig:
        cmd = await rig.submit("a")
        await pause.wait_reached()
        queued = await rig.submit("b")
        await rig.recorder.wait_for_type(InputQueued)
        await rig.session.shutdown()
        assert rig.after_start() == [
            ("TurnStarted", 1, cmd, "User:a"),
            ("InputQueued", queued),
            ("StepDone", (f"AI:part|{INTERRUPTED_NOTICE}",)),
            ("TurnInterrupted", 1),
            ("InputCancelled", queued, CancelReason.TURN_INTERRUPTED),
        ]


async def test_shutdown_while_shutting_down() -> None:
    """Contract 9.3 #36 TestShutdownWhileShuttingDown: concurrent shutdowns share one
    result.
    """
    pause = Pause()
    async with open_rig([pause]) as rig:
        await rig.submit("a")
        await pause.wait_reached()
        async with asyncio.TaskGroup() as group:
            first = group.create_task(rig.session.shutdown())
            second = group.create_task(rig.session.shutdown())
        assert first.done()
        assert second.done()
        assert len(rig.recorder.of_type(TurnInterrupted)) == 1


class PanickyModel:
    """A client whose label lookup blows up (a bug outside the stream)."""

    def __init__(self) -> None:
        self.calls = 0

    @property
    def name(self) -> str:
        self.calls += 1
        raise KeyError("bug")

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        raise AssertionError("never reached")


async def test_turn_panic() -> None:
    """Contract 9.3 #37 TestTurnPanic: an unexpected exception → TurnFailed(turn_panic);
    the actor survives.
    """
    async with open_rig(model=PanickyModel()) as rig:  # type: ignore[arg-type]
        await rig.submit("a")
        await rig.idle()
        failed = rig.recorder.of_type(TurnFailed)[0]
        assert failed.error.kind is FailureKind.TURN_PANIC
        assert "KeyError" in failed.error.message
        await rig.submit("b")  # still serving
        await rig.idle()
        assert len(rig.recorder.of_type(TurnFailed)) == 2


async def test_turn_failed_provider_error_typed() -> None:
    """Contract 9.3 #37 TestTurnFailedProviderErrorTyped: provider errors keep their
    kind and message.
    """
    error = ProviderError("acme", "overloaded", status=529)
    async with open_rig(failing_step(error)) as rig:
        await rig.submit("a")
        await rig.idle()
        failed = rig.recorder.of_type(TurnFailed)[0]
        assert failed.error.kind is FailureKind.PROVIDER
        assert failed.error.message == str(error)
        assert failed.restored_error().restored_kind == "provider"


async def test_turn_id_generation_failure() -> None:
    """Contract 9.3 #38 TestTurnIDGenerationFailure: an idle submit whose TurnID cannot
    be minted → TurnRejected{internal}.
    """
    async with open_rig(text_step("later")) as rig:
        cmd = await rig.submit("a")
        rig.ids.fail_next(1)  # the actor mints the turn id next
        await rig.idle()
        assert rig.after_start() == [("TurnRejected", cmd, "internal")]
        assert await rig.history() == ()
        await rig.submit("b")
        await rig.idle()
        assert rig.recorder.of_type(TurnStarted)[0].turn_index == 1


async def test_interrupt_during_tool_batch_frees_turn() -> None:
    """Contract 9.3 #39 TestInterruptDuringToolBatchFreesTurn: cancelling a running tool
    ends the turn.
    """
    running = asyncio.Event()

    async def hangs(_i: str, _c: object) -> str:
        running.set()
        await asyncio.Event().wait()
        return "never"

    tool = FunctionTool("hang", hangs)
    async with open_rig(
        tool_step(call("hang")), text_step("next"), tools=[tool]
    ) as rig:
        await rig.submit("a")
        await running.wait()
        assert await rig.session.interrupt() is True
        await rig.idle()
        assert rig.recorder.of_type(TurnInterrupted)
        await rig.submit("b")
        await rig.idle()
        assert rig.recorder.of_type(TurnDone)[0].turn_index == 2


async def test_ctx_ignoring_provider_does_not_pin_actor() -> None:
    """Contract 9.3 #39 TestCtxIgnoringProviderDoesNotPinActor: after DrainTimeout the
    turn is detached.
    """
    stubborn = Stubborn()
    config = LoopConfig(model="m", drain_timeout=0.05)
    async with open_rig([stubborn], text_step("free again"), config=config) as rig:
        first = await rig.submit("a")
        await stubborn.reached.wait()
        assert await rig.session.interrupt() is True
        await rig.idle()
        second = await rig.submit("b")
        await rig.idle()
        assert stubborn.resisted >= 1  # it really did ignore the cancellation
        stubborn.release()  # let the wedged task end before the test loop closes
        assert rig.after_start() == [
            ("TurnStarted", 1, first, "User:a"),
            ("TurnInterrupted", 1),
            ("LoopIdle",),
            ("TurnStarted", 2, second, "User:b"),
            ("StepDone", ("AI:free again",)),
            ("TurnDone", 2, "AI:free again"),
            ("LoopIdle",),
        ]


async def test_shutdown_with_ctx_ignoring_provider_is_bounded() -> None:
    """Contract §4.8 hard kill: shutdown completes within the drain timeout even if the
    model ignores cancellation.
    """
    stubborn = Stubborn()
    config = LoopConfig(model="m", drain_timeout=0.05)
    async with open_rig([stubborn], config=config) as rig:
        await rig.submit("a")
        await stubborn.reached.wait()
        async with asyncio.timeout(2):
            await rig.session.shutdown()
        assert rig.recorder.of_type(TurnInterrupted)
    stubborn.release()
    await asyncio.sleep(0)


async def test_enduring_loop_events_stamped() -> None:
    """Contract 9.3 #40 TestEnduringLoopEventsStamped: enduring events get EventID +
    CreatedAt; ephemeral ones none.
    """
    tool = FunctionTool("t")
    pause = Pause()
    steps = [[pause, *tool_step(call("t"))], text_step("x")]
    async with open_rig(*steps, tools=[tool]) as rig:
        await rig.submit("a")
        await pause.wait_reached()
        await rig.submit("b")
        await rig.recorder.wait_for_type(InputQueued)
        pause.release()
        await rig.recorder.wait_for_type(TurnDone, count=1)
        await rig.idle()
        for event in rig.events:
            if event.is_enduring():
                assert event.header.event_id is not None
                assert event.header.created_at is not None
            else:
                assert event.header.event_id is None
                assert event.header.created_at is None
        ids = [e.header.event_id for e in rig.journal_events()]
        assert len(set(ids)) == len(ids)


async def test_stamp_step_id_on_deltas_and_tool_events() -> None:
    """Contract 9.3 #41 (deliberate divergence): TokenDelta and tool events carry their
    step's StepID.
    """
    tool = FunctionTool("t")
    async with open_rig(
        tool_step(call("t"), text="x"), text_step("y"), tools=[tool]
    ) as rig:
        await rig.submit("a")
        await rig.idle()
        step_ids = [s.header.step_id for s in rig.recorder.of_type(StepDone)]
        deltas = rig.recorder.of_type(TokenDelta)
        assert all(d.header.step_id in step_ids for d in deltas)
        assert {d.header.step_id for d in deltas} == set(step_ids)
        started = rig.recorder.of_type(ToolCallStarted)[0]
        assert started.header.step_id == step_ids[0]
        assert rig.recorder.of_type(TurnStarted)[0].header.step_id is None


async def test_loop_idle_stamps_agent_name() -> None:
    """Contract 9.3 #42 TestLoopIdleStampsAgentName: LoopIdle and LoopStarted carry the
    agent name; nothing else does.
    """
    config = LoopConfig(model="m", agent_name="researcher")
    async with open_rig(text_step("x"), config=config) as rig:
        await rig.submit("a")
        await rig.idle()
        named = {type(e).__name__ for e in rig.events if e.header.agent_name}
        assert named == {"LoopStarted", "LoopIdle"}
        assert rig.recorder.of_type(LoopIdle)[0].header.agent_name == "researcher"


async def test_run_turn_truncation_commits() -> None:
    """Contract 9.3 #43 TestRunTurnTruncationCommits: a failed stream commits its safe
    prefix before TurnFailed.
    """
    script = [
        ThinkingChunk(thinking="plan", signature="sig", signature_format="anthropic"),
        ThinkingChunk(index=1, thinking="unsealed"),
        *failing_step(ProviderError("p", "reset"), "partial"),
    ]
    script.insert(2, ToolUseChunk(index=0, id="u", name="t"))
    async with open_rig(script) as rig:
        await rig.submit("a")
        await rig.idle()
        step = rig.recorder.of_type(StepDone)[0]
        blocks = step.ai_message.blocks
        assert [b.type for b in blocks] == ["thinking", "text", "text"]
        assert blocks[-1] == TextBlock(text=TRUNCATED_NOTICE)
        assert rig.after_start()[-2:] == [("TurnFailed", 1, "provider"), ("LoopIdle",)]


async def test_loop_interrupt_commits_partial_reply() -> None:
    """Contract 9.3 #43 TestLoopInterruptCommitsPartialReply: the interrupted prefix is
    committed before TurnInterrupted.
    """
    pause = Pause()
    async with open_rig([TextChunk(text="so far"), pause]) as rig:
        await rig.submit("a")
        await pause.wait_reached()
        await rig.session.interrupt()
        await rig.idle()
        assert await history_of(rig) == ["User:a", f"AI:so far|{INTERRUPTED_NOTICE}"]


async def test_loop_shutdown_commits_partial_reply() -> None:
    """Contract 9.3 #43 TestLoopShutdownCommitsPartialReply."""
    pause = Pause()
    async with open_rig([TextChunk(text="so far"), pause]) as rig:
        await rig.submit("a")
        await pause.wait_reached()
        await rig.session.shutdown()
        steps = [e for e in rig.journal_events() if isinstance(e, StepDone)]
        assert [describe_message(s.ai_message) for s in steps] == [
            f"AI:so far|{INTERRUPTED_NOTICE}"
        ]


async def test_nothing_replayable_commits_no_step() -> None:
    """Contract §4.5: a truncated stream with nothing replayable commits no StepDone."""
    script = [ToolUseChunk(index=0, id="u", name="t"), *failing_step()]
    async with open_rig(script) as rig:
        await rig.submit("a")
        await rig.idle()
        assert not rig.recorder.of_type(StepDone)


async def test_refusal_only_turn_survives_commit_and_restore() -> None:
    """Contract 9.3 #44: a refusal is content (even empty), never an empty response; it
    restores.
    """
    async with open_rig([RefusalChunk(text=""), StreamEnd()]) as rig:
        await rig.submit("a")
        await rig.idle()
        done = rig.recorder.of_type(TurnDone)[0]
        assert done.message.blocks == (RefusalBlock(text=""),)
        state = fold_loop(rig.journal_events())
        assert state.messages[-1] == AIMessage(blocks=(RefusalBlock(text=""),))


async def test_run_turn_accounts_authoritative_usage() -> None:
    """Contract 9.3 #45 TestRunTurnAccountsAuthoritativeUsage: TurnDone.Usage sums the
    step usages.
    """
    tool = FunctionTool("t")
    steps = [
        tool_step(call("t"), usage=Usage(input_tokens=10, output_tokens=1)),
        text_step(
            "x", usage=Usage(input_tokens=20, output_tokens=5, reasoning_tokens=9)
        ),
    ]
    async with open_rig(*steps, tools=[tool]) as rig:
        await rig.submit("a")
        await rig.idle()
        assert rig.recorder.of_type(TurnDone)[0].usage == Usage(
            input_tokens=30, output_tokens=6, reasoning_tokens=9
        )


async def test_new_restored_and_loop_snapshot() -> None:
    """Contract 9.3 #46 TestNewRestored/TestLoopSnapshot: a seeded loop comes up idle;
    its next turn numbers from the seed.
    """
    session_id = SessionId(SequentialIds(500).new_id())
    loop_id = LoopId(SequentialIds(600).new_id())
    seed = LoopState(
        session_id=session_id,
        loop_id=loop_id,
        turn_index=7,
        messages=(
            UserMessage(blocks=(TextBlock(text="old"),)),
            AIMessage(blocks=(TextBlock(text="reply"),)),
        ),
    )
    journal, hub = InMemoryJournal(), InMemoryHub()
    model = ScriptedModel([text_step("new")])
    actor = LoopActor.from_state(
        seed,
        config=LoopConfig(model="m"),
        model=model,
        journal=journal,
        hub=hub,
        clock=FixedClock(),
        ids=SequentialIds(),
    )
    sub = hub.subscribe(EventFilter.everything())
    async with asyncio.TaskGroup() as group:
        group.create_task(actor.run())
        assert await actor.started()
        snapshot = await actor.state()
        assert snapshot.turn_index == 7
        assert snapshot.messages == seed.messages
        assert snapshot.open_turn is None
        assert sub.poll() == []  # no LoopStarted for a restored loop
        actor.post(
            SubmitInput(
                command_id=SequentialIds(900).new_id(),
                session_id=session_id,
                loop_id=loop_id,
                created_at=FixedClock().now(),
                message=UserMessage(blocks=(TextBlock(text="next"),)),
            )
        )
        await actor.wait_idle()
        started = [e for e in sub.poll() if isinstance(e, TurnStarted)]
        assert [s.turn_index for s in started] == [8]
        assert model.requests[0].messages[:2] == seed.messages
        await actor.shutdown(
            Shutdown(
                command_id=SequentialIds(901).new_id(),
                session_id=session_id,
                loop_id=loop_id,
                created_at=FixedClock().now(),
            )
        )


async def test_failed_required_turn_boundary_does_not_chain_queued_input() -> None:
    """Contract 9.3 #47: a failed terminal commit returns queued input (turn_failed)
    instead of chaining.
    """
    pause = Pause()
    async with open_rig([pause, *text_step("x")], text_step("never")) as rig:
        await rig.submit("a")
        await pause.wait_reached()
        queued = await rig.submit("b")
        await rig.recorder.wait_for_type(InputQueued)
        rig.journal.fail_when(
            lambda events: any(isinstance(e, TurnDone) for e in events)
        )
        pause.release()
        await rig.idle()
        assert rig.after_start()[-3:] == [
            ("StepDone", ("AI:x",)),
            ("InputCancelled", queued, CancelReason.TURN_FAILED),
            ("LoopIdle",),
        ]
        assert len(rig.model.requests) == 1


@pytest.mark.parametrize(
    ("final", "reason"),
    [
        pytest.param(
            text_step('{"answer": 1}'), "schema_mismatch", id="schema-mismatch"
        ),
        pytest.param(text_step("not json"), "invalid_json", id="malformed"),
        pytest.param(
            [RefusalChunk(text="no"), StreamEnd()], "model_refusal", id="refusal"
        ),
    ],
)
async def test_structured_output_failure_retains_prior_committed_tool_step(
    final: list[object], reason: str
) -> None:
    """Contract 9.3 #48: structured-output failures keep earlier commits and commit
    nothing of the bad step.
    """
    tool = FunctionTool("t")
    schema = {
        "type": "object",
        "required": ["answer"],
        "properties": {"answer": {"type": "string"}},
    }
    config = LoopConfig(model="m", tools=(tool,), output_schema=schema)
    async with open_rig(tool_step(call("t", id="u1")), final, config=config) as rig:  # type: ignore[arg-type]
        await rig.submit("a")
        await rig.idle()
        failed = rig.recorder.of_type(TurnFailed)[0]
        assert failed.error.kind is FailureKind.STRUCTURED_OUTPUT
        assert reason in failed.error.message
        assert await history_of(rig) == ["User:a", "AI:tool_use:u1", "Tool:u1:{}"]


async def test_structured_output_valid_final_answer_completes() -> None:
    """Contract 9.3 #48 (positive case): a final answer matching the schema ends
    TurnDone.
    """
    schema = {
        "type": "object",
        "required": ["answer"],
        "properties": {"answer": {"type": "integer"}},
    }
    config = LoopConfig(model="m", output_schema=schema)
    async with open_rig(text_step('{"answer":', " 42}"), config=config) as rig:
        await rig.submit("a")
        await rig.idle()
        assert rig.recorder.of_type(TurnDone)


async def test_structured_output_turn_never_commits_a_truncated_step() -> None:
    """Contract §4.5: structured-output turns never commit a truncated step."""
    config = LoopConfig(model="m", output_schema={"type": "object"})
    async with open_rig(failing_step(None, '{"partial"'), config=config) as rig:
        await rig.submit("a")
        await rig.idle()
        assert not rig.recorder.of_type(StepDone)


async def test_step_timeout_fails_turn_with_truncated_prefix() -> None:
    """Contract §4.4 (timeouts): a model call past the step timeout fails the turn,
    committing the safe prefix.
    """
    config = LoopConfig(model="m", step_timeout=0.05)
    async with open_rig([TextChunk(text="slow"), Pause()], config=config) as rig:
        await rig.submit("a")
        await rig.idle()
        failed = rig.recorder.of_type(TurnFailed)[0]
        assert failed.error.kind is FailureKind.PROVIDER
        assert "timed out" in failed.error.message
        assert await history_of(rig) == ["User:a", f"AI:slow|{TRUNCATED_NOTICE}"]


async def test_stream_without_stream_end_is_truncated() -> None:
    """Model port: a stream that stops without StreamEnd is truncated (provider
    failure).
    """
    async with open_rig([TextChunk(text="cut")]) as rig:
        await rig.submit("a")
        await rig.idle()
        assert rig.after_start()[-3:] == [
            ("StepDone", (f"AI:cut|{TRUNCATED_NOTICE}",)),
            ("TurnFailed", 1, "provider"),
            ("LoopIdle",),
        ]


async def test_restored_session_loops_without_journal_restore_session() -> None:
    """Contract 9.3 #46: LocalSession.restore of a cleanly closed loop appends nothing
    and starts idle.
    """
    journal = InMemoryJournal()
    async with open_rig(text_step("x")) as rig:
        await rig.submit("a")
        await rig.idle()
        await journal.append(rig.loop_id, rig.journal_events())
        session_id, loop_id = rig.session.session_id, rig.loop_id
    before = journal.events(loop_id)
    session = await LocalSession.restore(
        session_id=session_id,
        journal=journal,
        hub=InMemoryHub(),
        loops={loop_id: LoopSetup(LoopConfig(model="m"), ScriptedModel())},
    )
    async with session:
        await session.wait_idle()
        assert journal.events(loop_id) == before
        assert (await session.loop_state()).turn_index == 1


class InterruptOnStartHub(InMemoryHub):
    """Sends an Interrupt the moment TurnStarted is delivered (before the turn runs)."""

    def __init__(self) -> None:
        super().__init__()
        self.actor: LoopActor | None = None
        self.command: object = None

    async def deliver(self, events: object) -> None:  # type: ignore[override]
        await super().deliver(events)  # type: ignore[arg-type]
        started = any(isinstance(e, TurnStarted) for e in events)  # type: ignore[attr-defined]
        if started and self.actor is not None and self.command is not None:
            self.actor.post(self.command)  # type: ignore[arg-type]
            self.command = None


async def test_interrupt_before_the_turn_task_first_runs() -> None:
    """Contract §4.10: exactly one terminal even if the turn is cancelled before it
    ever ran (no wait for the drain timeout)."""
    from turnstream.commands import Interrupt

    hub = InterruptOnStartHub()
    config = LoopConfig(model="m", drain_timeout=30)
    async with open_rig(
        text_step("never"), text_step("ok"), hub=hub, config=config
    ) as rig:
        hub.actor = rig.session.loop(rig.loop_id)
        hub.command = Interrupt(
            command_id=rig.ids.new_id(),
            session_id=rig.session.session_id,
            loop_id=rig.loop_id,
            created_at=rig.clock.now(),
        )
        await rig.submit("a")
        async with asyncio.timeout(2):
            await rig.idle()
        assert rig.after_start()[-2:] == [("TurnInterrupted", 1), ("LoopIdle",)]
        assert rig.model.requests == []


async def test_step_done_append_failure_ends_turn_interrupted() -> None:
    """Contract §10.1.7: any commit-handshake error, including a durable StepDone
    append failure, ends the turn TurnInterrupted with nothing of the step in history.
    """
    async with open_rig(text_step("lost"), text_step("next")) as rig:
        rig.journal.fail_when(lambda evs: any(isinstance(e, StepDone) for e in evs))
        first = await rig.submit("a")
        await rig.idle()
        rig.journal.fail_when(None)
        assert rig.after_start() == [
            ("TurnStarted", 1, first, "User:a"),
            ("TurnInterrupted", 1),
            ("LoopIdle",),
        ]
        assert await history_of(rig) == ["User:a"]


async def test_interrupt_takes_effect_after_the_commands_before_it() -> None:
    """Commands take effect in log order (issue 14, a deliberate divergence from the
    contract's priority lane): an Interrupt sent after a backlog of submits cancels
    the turn the first of them started; the other (user) inputs are kept and run.
    """
    from turnstream.commands import Interrupt

    async with open_rig(*[text_step(str(i)) for i in range(5)]) as rig:
        actor = rig.session.loop(rig.loop_id)
        backlog = [await rig.submit(f"b{i}") for i in range(5)]  # not handled yet
        interrupt = Interrupt(
            command_id=rig.ids.new_id(),
            session_id=rig.session.session_id,
            loop_id=rig.loop_id,
            created_at=rig.clock.now(),
        )
        assert await actor.interrupt(interrupt) is True  # b0's turn was running
        await rig.idle()
        started = rig.recorder.of_type(TurnStarted)
        assert [s.reply_to() for s in started] == backlog
        interrupted = rig.recorder.of_type(TurnInterrupted)
        assert [e.header.turn_id for e in interrupted] == [started[0].header.turn_id]
        assert len(rig.recorder.of_type(TurnDone)) == 4


async def test_local_session_submit_then_interrupt_before_the_loop_runs() -> None:
    """In process, as on Kafka: a submit and an interrupt posted back to back before
    the loop runs end that submit's turn ``TurnInterrupted``, for every loop.
    """
    async with open_rig(*[text_step("x") for _ in range(40)]) as rig:
        session = rig.session
        loops = [
            await session.create_loop(LoopConfig(model="scripted-model"), rig.model)
            for _ in range(20)
        ]
        submits = [await session.submit_to_loop(loop, "go") for loop in loops]
        acks = await asyncio.gather(*(session.interrupt(loop) for loop in loops))
        assert all(acks)
        await session.wait_idle()
        ended = {
            e.header.turn_id: e.type_name for e in rig.recorder.events if e.ends_turn()
        }
        started = {
            s.reply_to(): s.header.turn_id for s in rig.recorder.of_type(TurnStarted)
        }
        assert set(started) == set(submits)
        assert [ended[started[c]] for c in submits] == ["TurnInterrupted"] * 20
