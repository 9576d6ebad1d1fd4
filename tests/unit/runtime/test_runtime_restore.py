"""Journal fold and restore: contract §8.2 and §9.8 items 87-90."""

from __future__ import annotations

import asyncio

import pytest

from turnstream.content import AIMessage, TextBlock, TextChunk, UserMessage
from turnstream.events import (
    Cause,
    FailureInfo,
    FailureKind,
    Header,
    InputQueued,
    LoopIdle,
    LoopStarted,
    StepDone,
    TurnFailed,
    TurnInterrupted,
    TurnRejected,
    TurnStarted,
)
from turnstream.ids import LoopId, SessionId
from turnstream.memory import InMemoryHub, InMemoryJournal
from turnstream.runtime import (
    EventFilter,
    LocalSession,
    LoopConfig,
    LoopSetup,
    RestoreError,
    fold_loop,
)
from turnstream.runtime.ports import Recovery
from turnstream.state import LoopState, OpenTurn
from turnstream.testing import (
    FixedClock,
    FunctionTool,
    Pause,
    ScriptedModel,
    SequentialIds,
    call,
    describe_message,
    open_rig,
    text_step,
    tool_step,
)

IDS = SequentialIds(10_000)
SESSION = SessionId(IDS.new_id())
LOOP = LoopId(IDS.new_id())


def header(**kw: object) -> Header:
    return Header(event_id=IDS.new_id(), session_id=SESSION, loop_id=LOOP, **kw)  # type: ignore[arg-type]


def user(text: str) -> UserMessage:
    return UserMessage(blocks=(TextBlock(text=text),))


def ai(text: str) -> AIMessage:
    return AIMessage(blocks=(TextBlock(text=text),))


def test_fold_primary_loop() -> None:
    """Contract 9.8 #87 TestFoldPrimaryLoop: the fold table (§8.2)."""
    t1, t2 = IDS.new_id(), IDS.new_id()
    cmd = IDS.new_id()
    events = [
        LoopStarted(header=header(agent_name="ag"), model="m1"),
        TurnStarted(
            header=header(turn_id=t1, cause=Cause(command_id=cmd)),
            turn_index=1,
            message=user("a"),
        ),
        StepDone(header=header(turn_id=t1, step_id=IDS.new_id()), messages=(ai("b"),)),
        TurnFailed(
            header=header(turn_id=t1),
            turn_index=1,
            error=FailureInfo(kind=FailureKind.PROVIDER, message="x"),
        ),
        LoopIdle(header=header()),
        TurnRejected(
            header=header(cause=Cause(command_id=IDS.new_id())), reason="queue_full"
        ),  # type: ignore[arg-type]
        TurnStarted(header=header(turn_id=t2), turn_index=2, message=user("c")),
    ]
    state = fold_loop(events)
    assert state.agent_name == "ag"
    assert state.model == "m1"
    assert state.turn_index == 2
    assert state.messages == (user("a"), ai("b"), user("c"))
    assert state.open_turn == OpenTurn(turn_id=t2, turn_index=2, message_index=2)
    assert cmd in state.recent_command_ids
    assert (
        fold_loop(events[3:], fold_loop(events[:3])) == state
    )  # folding is incremental


def test_open_turn_coords_coupled_to_open_turn_invariant() -> None:
    """Contract 9.8 #87 TestOpenTurnCoordsCoupledToOpenTurnInvariant: any terminal
    closes the open turn.
    """
    turn = IDS.new_id()
    started = TurnStarted(header=header(turn_id=turn), turn_index=1, message=user("a"))
    closed = fold_loop(
        [TurnInterrupted(header=header(turn_id=turn), turn_index=1)],
        fold_loop([started]),
    )
    assert closed.open_turn is None
    assert closed.messages == (user("a"),)


def test_fold_rejects_empty_and_foreign_events() -> None:
    """Contract §8.2: nothing to fold, or another loop's event, is a restore error."""
    with pytest.raises(RestoreError) as empty:
        fold_loop([])
    assert empty.value.reason == "empty_journal"
    base = LoopState(session_id=SESSION, loop_id=LOOP)
    foreign = LoopIdle(
        header=Header(event_id=IDS.new_id(), session_id=SESSION, loop_id=IDS.new_id())
    )
    with pytest.raises(RestoreError) as mismatch:
        fold_loop([foreign], base)
    assert mismatch.value.reason == "loop_mismatch"


async def restore(
    journal: InMemoryJournal,
    session_id: SessionId,
    loop_id: LoopId,
    model: ScriptedModel,
    **kw: object,
) -> LocalSession:
    return await LocalSession.restore(
        session_id=session_id,
        journal=journal,
        hub=InMemoryHub(),
        loops={loop_id: LoopSetup(LoopConfig(model="m", **kw), model)},  # type: ignore[arg-type]
        clock=FixedClock(),
        ids=SequentialIds(50_000),
    )


async def test_restore_round_trip() -> None:
    """Contract 9.8 #88 TestRestoreRoundTrip: identical history, nothing appended for
    closed turns, next turn = index + 1.
    """
    journal = InMemoryJournal()
    tool = FunctionTool("t")
    async with open_rig(
        tool_step(call("t", id="u1")), text_step("one"), text_step("two"), tools=[tool]
    ) as rig:
        await rig.submit("a")
        await rig.idle()
        await rig.submit("b")
        await rig.idle()
        live = await rig.history()
        await journal.append(rig.loop_id, rig.journal_events())
        session_id, loop_id = rig.session.session_id, rig.loop_id
    committed = journal.events(loop_id)
    model = ScriptedModel([text_step("three")])
    session = await restore(journal, session_id, loop_id, model, tools=(tool,))
    assert journal.events(loop_id) == committed
    async with session:
        assert (await session.loop_state()).messages == live
        sub = session.subscribe_events(EventFilter.everything())
        cmd = await session.submit("c")
        await session.wait_idle()
        started = [e for e in sub.poll() if isinstance(e, TurnStarted)]
        assert [(s.turn_index, s.reply_to()) for s in started] == [(3, cmd)]
        assert model.requests[0].messages == (*live, user("c"))


async def test_restore_crash_mid_turn() -> None:
    """Contract 9.8 #89 TestRestoreCrashMidTurn: tail TurnInterrupted, no
    partial step.
    """
    journal = InMemoryJournal()
    pause = Pause()
    async with open_rig([TextChunk(text="partial"), pause]) as rig:
        await rig.submit("a")
        await pause.wait_reached()  # mid-stream: the process "dies" here
        await journal.append(rig.loop_id, rig.journal_events())
        session_id, loop_id = rig.session.session_id, rig.loop_id
    before = len(journal.events(loop_id))
    session = await restore(journal, session_id, loop_id, ScriptedModel())
    tail = journal.events(loop_id)[before:]
    assert [type(e).__name__ for e in tail] == ["TurnInterrupted"]
    async with session:
        state = await session.loop_state()
        assert state.messages == (user("a"),)
        assert state.turn_index == 1


async def test_restore_complex_shapes_round_trip() -> None:
    """Contract 9.8 #90 TestRestoreComplexShapesRoundTrip: multi-message StepDone and a
    mid-turn fold restore byte-identically.
    """
    journal = InMemoryJournal()
    release = asyncio.Event()

    async def waits(_i: str, _c: object) -> str:
        await release.wait()
        return "r"

    tools = [FunctionTool("w", waits), FunctionTool("x", lambda _i, _c: "xr")]
    steps = [tool_step(call("w", id="u1"), call("x", id="u2")), text_step("end")]
    async with open_rig(*steps, tools=tools) as rig:
        await rig.submit("a")
        await rig.submit("folded")
        await rig.recorder.wait_for_type(InputQueued)
        release.set()
        await rig.idle()
        live = await rig.history()
        await journal.append(rig.loop_id, rig.journal_events())
        session_id, loop_id = rig.session.session_id, rig.loop_id
    assert [describe_message(m) for m in live] == [
        "User:a",
        "AI:tool_use:u1|tool_use:u2",
        "Tool:u1:r",
        "Tool:u2:xr",
        "User:folded",
        "AI:end",
    ]
    session = await restore(journal, session_id, loop_id, ScriptedModel())
    async with session:
        restored = (await session.loop_state()).messages
        assert [m.model_dump_json() for m in restored] == [
            m.model_dump_json() for m in live
        ]


async def test_restore_primary_loop_narrowing() -> None:
    """Contract 9.8 #90 TestRestorePrimaryLoopNarrowing: each loop folds only its own
    events.
    """
    session = LocalSession(
        journal=(journal := InMemoryJournal()),
        hub=InMemoryHub(),
        clock=FixedClock(),
        ids=SequentialIds(),
    )
    async with session:
        a = await session.create_loop(
            LoopConfig(model="a"), ScriptedModel([text_step("ra")])
        )
        b = await session.create_loop(
            LoopConfig(model="b"), ScriptedModel([text_step("rb")])
        )
        await session.submit_to_loop(a, "qa")
        await session.submit_to_loop(b, "qb")
        await session.wait_idle()
    restored = await LocalSession.restore(
        session_id=session.session_id,
        journal=journal,
        hub=InMemoryHub(),
        loops={
            a: LoopSetup(LoopConfig(model="a"), ScriptedModel()),
            b: LoopSetup(LoopConfig(model="b"), ScriptedModel()),
        },
    )
    async with restored:
        assert [
            describe_message(m) for m in (await restored.loop_state(a)).messages
        ] == ["User:qa", "AI:ra"]
        assert [
            describe_message(m) for m in (await restored.loop_state(b)).messages
        ] == ["User:qb", "AI:rb"]
        assert restored.active_loop == a


async def test_restore_from_snapshot_plus_later_events() -> None:
    """Contract §8.2 with snapshots (the Kafka shape): snapshot state + events after it
    fold to the full state.
    """

    class SnapshotJournal(InMemoryJournal):
        def __init__(self, cut: int) -> None:
            super().__init__()
            self.cut = cut

        async def recover(self, loop_id: LoopId) -> Recovery:
            events = self.events(loop_id)
            return Recovery(
                snapshot=fold_loop(events[: self.cut]), events=events[self.cut :]
            )

    async with open_rig(text_step("one"), text_step("two")) as rig:
        await rig.submit("a")
        await rig.idle()
        await rig.submit("b")
        await rig.idle()
        committed = rig.journal_events()
        session_id, loop_id = rig.session.session_id, rig.loop_id
        live = await rig.history()
    journal = SnapshotJournal(cut=4)
    await journal.append(loop_id, committed)
    session = await restore(journal, session_id, loop_id, ScriptedModel())
    async with session:
        state = await session.loop_state()
        assert state.messages == live
        assert state.turn_index == 2


async def test_restore_rejects_unknown_loop() -> None:
    """Contract §8.2: restoring a loop with no journal fails closed."""
    with pytest.raises(RestoreError) as error:
        await restore(InMemoryJournal(), SESSION, LOOP, ScriptedModel())
    assert error.value.reason == "empty_journal"
