"""A turn a crash left open continues on restore (``on_restore="continue"``).

The journal of a loop that "dies" mid-turn is copied at the crash point; a new
session restores it with a continuing agent. The turn must go on after its last
committed ``StepDone`` (announced by ``TurnResumed``), end ``TurnDone`` with
every step once, keep a gate open at the crash answerable, and fail with
``resume_limit`` instead of resuming for ever.
"""

from __future__ import annotations

import asyncio

from tests.support.eventually import assert_eventually

from turnstream.content import (
    AIMessage,
    TextBlock,
    ToolResultMessage,
    UserMessage,
    text_of,
)
from turnstream.events import (
    FailureKind,
    GateCloseReason,
    GateOpened,
    GateResolved,
    Header,
    PermissionDecided,
    PermissionRequested,
    StepDone,
    TurnDone,
    TurnFailed,
    TurnInterrupted,
    TurnResumed,
    TurnStarted,
)
from turnstream.ids import GateId, LoopId, SessionId
from turnstream.memory import InMemoryHub, InMemoryJournal
from turnstream.runtime import (
    LocalSession,
    LoopConfig,
    LoopSetup,
    fold_loop,
    restore_loop,
    tool,
)
from turnstream.runtime.config import RestorePolicy
from turnstream.runtime.ports import IdempotentTool, ToolContext
from turnstream.runtime.tools import OUTCOME_UNKNOWN
from turnstream.state import CallDecision
from turnstream.testing import (
    FixedClock,
    FunctionTool,
    ScriptedModel,
    SequentialIds,
    StaticAccessPolicy,
    call,
    describe_message,
    open_rig,
    text_step,
    tool_step,
)

CONTINUE = RestorePolicy(on_restore="continue")


def user(text: str) -> UserMessage:
    return UserMessage(blocks=(TextBlock(text=text),))


async def restore(  # noqa: PLR0917 - the restore helper of this module's tests
    journal: InMemoryJournal,
    session_id: SessionId,
    loop_id: LoopId,
    model: ScriptedModel,
    tool: FunctionTool,
    access: StaticAccessPolicy | None = None,
) -> LocalSession:
    config = LoopConfig(model="m", tools=(tool,), restore=CONTINUE)
    return await LocalSession.restore(
        session_id=session_id,
        journal=journal,
        hub=InMemoryHub(),
        loops={loop_id: LoopSetup(config, model)},
        clock=FixedClock(),
        ids=SequentialIds(50_000),
        access_policy=access or StaticAccessPolicy(),
    )


async def crash_at_third_call(
    journal: InMemoryJournal, *, retry_safe: bool = True
) -> tuple[SessionId, LoopId, list[tuple[str, str]]]:
    """Run a continuing turn until its third tool call runs; copy the journal.

    Returns the session, the loop and each call's (input, idempotency key).
    """
    ran: list[tuple[str, str]] = []
    third = asyncio.Event()
    never = asyncio.Event()

    async def hangs_on_third(input_json: str, ctx: ToolContext) -> str:
        ran.append((input_json, ctx.idempotency_key))
        if len(ran) == 3:  # step 3 runs: steps 1 and 2 are committed
            third.set()
            await never.wait()
        return f"r{len(ran)}"

    tool = FunctionTool("t", hangs_on_third, retry_safe=retry_safe)
    config = LoopConfig(model="m", tools=(tool,), restore=CONTINUE)
    script = [
        *[
            tool_step(call("t", id=f"u{i}", input_json=f'{{"n":{i}}}'))
            for i in (1, 2, 3)
        ]
    ]
    async with open_rig(*script, tools=[tool], config=config) as rig:
        await rig.submit("go")
        await third.wait()  # the process "dies" here, mid step 3
        await journal.append(rig.loop_id, rig.journal_events())
        return rig.session.session_id, rig.loop_id, ran


async def test_restore_continues_the_open_turn_after_its_last_committed_step() -> None:
    """TurnResumed{steps 2}, then steps 3-5 and the answer; 1 and 2 never again.

    Step 3's call was approved and running at the crash; its tool is
    idempotent, so it runs again -- with the key of its first attempt.
    """
    journal = InMemoryJournal()
    session_id, loop_id, first_run = await crash_at_third_call(journal)
    assert [i for i, _ in first_run] == ['{"n":1}', '{"n":2}', '{"n":3}']
    before = len(journal.events(loop_id))
    ran: list[tuple[str, str]] = []

    def counts(input_json: str, ctx: ToolContext) -> str:
        ran.append((input_json, ctx.idempotency_key))
        return "ok"

    model = ScriptedModel(
        [
            *[
                tool_step(call("t", id=f"u{i}", input_json=f'{{"n":{i}}}'))
                for i in (3, 4, 5)
            ],
            text_step("all five"),
        ]
    )
    session = await restore(
        journal, session_id, loop_id, model, FunctionTool("t", counts, retry_safe=True)
    )
    async with session:
        await session.wait_idle()
        state = await session.loop_state()
    tail = journal.events(loop_id)[before:]
    resumed = tail[0]
    assert isinstance(resumed, TurnResumed)
    assert (resumed.turn_index, resumed.steps, resumed.resumes, resumed.reason) == (
        1,
        2,
        1,
        "owner_restored",
    )
    started = next(e for e in journal.events(loop_id) if isinstance(e, TurnStarted))
    assert resumed.header.turn_id == started.header.turn_id
    assert [i for i, _ in ran] == ['{"n":3}', '{"n":4}', '{"n":5}']
    turn_id = started.header.turn_id
    assert [k for _, k in first_run] == [f"{turn_id}:{s}:t:0" for s in (0, 1, 2)]
    assert ran[0][1] == first_run[2][1]  # the same call, the same key
    assert [k for _, k in ran] == [f"{turn_id}:{s}:t:0" for s in (2, 3, 4)]
    # The first request after the restore is the committed history, nothing else.
    assert [describe_message(m) for m in model.requests[0].messages] == [
        "User:go",
        "AI:tool_use:u1",
        "Tool:u1:r1",
        "AI:tool_use:u2",
        "Tool:u2:r2",
    ]
    turn = [
        e for e in journal.events(loop_id) if e.header.turn_id == started.header.turn_id
    ]
    names = [type(e).__name__ for e in turn]
    assert names.count("StepDone") == 6  # 5 tool steps and the answer
    assert [e for e in turn if isinstance(e, TurnInterrupted)] == []
    done = turn[-1]
    assert isinstance(done, TurnDone)
    assert done.turn_index == 1
    assert state.open_turn is None
    assert [
        describe_message(m)
        for e in turn
        if isinstance(e, StepDone)
        for m in e.messages[:1]
    ] == [f"AI:tool_use:u{i}" for i in range(1, 6)] + ["AI:all five"]


async def test_a_call_approved_before_the_crash_is_not_run_again() -> None:
    """A non-idempotent call approved at the crash: outcome unknown, reported once.

    Its ``PermissionDecided{approve}`` is committed, its result is not: it may
    have run. The resumed step does not run it again (and decides nothing
    again); the model gets the typed ``outcome unknown`` error as its result,
    and the turn goes on.
    """
    journal = InMemoryJournal()
    session_id, loop_id, _ = await crash_at_third_call(journal, retry_safe=False)
    before = len(journal.events(loop_id))
    ran: list[str] = []

    def counts(input_json: str, _ctx: ToolContext) -> str:
        ran.append(input_json)
        return "ok"

    model = ScriptedModel(
        [
            *[
                tool_step(call("t", id=f"u{i}", input_json=f'{{"n":{i}}}'))
                for i in (3, 4, 5)
            ],
            text_step("done"),
        ]
    )
    session = await restore(
        journal, session_id, loop_id, model, FunctionTool("t", counts)
    )
    async with session:
        await session.wait_idle()
    assert ran == ['{"n":4}', '{"n":5}']
    tail = journal.events(loop_id)[before:]
    steps = [e for e in tail if isinstance(e, StepDone)]
    results = [m for e in steps for m in e.messages[1:]]
    unknown = [r for r in results if isinstance(r, ToolResultMessage) and r.is_error]
    assert [(r.tool_use_id, text_of(r.blocks)) for r in unknown] == [
        ("u3", OUTCOME_UNKNOWN)
    ]
    # Nothing decided again for it: steps 4 and 5 decide their own calls only.
    assert [type(e).__name__ for e in tail].count("PermissionDecided") == 2
    assert [type(e).__name__ for e in tail][-2:] == ["TurnDone", "LoopIdle"]
    # The model saw the unknown outcome as step 3's result, once.
    assert [describe_message(m) for m in model.requests[1].messages][-2:] == [
        "AI:tool_use:u3",
        f"Tool:u3:{OUTCOME_UNKNOWN}",
    ]


async def test_restore_fails_a_turn_resumed_too_often() -> None:
    """A crash loop ends TurnFailed{resume_limit}, never one more TurnResumed."""
    journal = InMemoryJournal()
    session_id, loop_id, _ = await crash_at_third_call(journal)
    policy = RestorePolicy(on_restore="continue", max_resumes=2)
    ids, clock = SequentialIds(70_000), FixedClock()
    for resumes in (1, 2):
        state = await restore_loop(
            journal, loop_id, clock=clock, ids=ids, policy=policy
        )
        assert state.open_turn is not None
        assert state.open_turn.resumes == resumes
    state = await restore_loop(journal, loop_id, clock=clock, ids=ids, policy=policy)
    assert state.open_turn is None
    events = journal.events(loop_id)
    assert [type(e).__name__ for e in events[-3:]] == [
        "TurnResumed",
        "TurnResumed",
        "TurnFailed",
    ]
    failed = events[-1]
    assert isinstance(failed, TurnFailed)
    assert failed.error.kind is FailureKind.RESUME_LIMIT
    assert session_id == state.session_id


async def test_a_gate_open_at_the_crash_is_answered_after_the_resume() -> None:
    """The resumed call takes the crashed step's gate over; its answer runs it."""
    journal = InMemoryJournal()
    ask = StaticAccessPolicy(per_tool={"t": "ask"})
    tool = FunctionTool("t", lambda _i, _c: "never")
    config = LoopConfig(model="m", tools=(tool,), restore=CONTINUE)
    async with open_rig(
        tool_step(call("t", id="u1")), tools=[tool], config=config, access_policy=ask
    ) as rig:
        await rig.submit("go")
        await rig.recorder.wait_for_type(PermissionRequested)  # dies here
        await journal.append(rig.loop_id, rig.journal_events())
        session_id, loop_id = rig.session.session_id, rig.loop_id
    opened = next(e for e in journal.events(loop_id) if isinstance(e, GateOpened))
    before = len(journal.events(loop_id))
    ran: list[str] = []

    def counts(input_json: str, _ctx: object) -> str:
        ran.append(input_json)
        return "ran"

    model = ScriptedModel([tool_step(call("t", id="u1")), text_step("done")])
    session = await restore(
        journal, session_id, loop_id, model, FunctionTool("t", counts), ask
    )
    async with session:
        # The resumed step asks again (the same call) and takes the gate over.
        async def asked() -> None:
            assert len(ask.requests) == 2

        await assert_eventually(asked, timeout=5)
        await session.respond_gate(GateId(opened.gate_id), "approve")
        await session.wait_idle()
    tail = journal.events(loop_id)[before:]
    names = [type(e).__name__ for e in tail]
    assert names[0] == "TurnResumed"
    assert "GateOpened" not in names  # no second gate: the old one was taken over
    resolved = [e for e in tail if isinstance(e, GateResolved)]
    assert [(r.gate_id, r.reason.value, r.action) for r in resolved] == [
        (opened.gate_id, "answered", "approve")
    ]
    assert ran == ["{}"]
    ends = [e for e in tail if e.header.turn_id == opened.header.turn_id]
    assert isinstance(ends[-1], TurnDone)


def test_tools_declare_whether_a_call_may_run_again() -> None:
    """``@tool(idempotent=True)`` has the IdempotentTool trait; the default not."""

    def effect(n: int) -> str:
        return str(n)

    assert tool(idempotent=True)(effect).idempotent() is True
    assert tool(effect).idempotent() is False
    assert isinstance(tool(effect), IdempotentTool)
    assert FunctionTool("t").idempotent() is False


def test_fold_keeps_the_open_steps_decisions_until_its_step_commits() -> None:
    """Decided and answered calls are the open step's decisions; StepDone resets."""
    ids = SequentialIds(90_000)
    session, loop, turn, step, gate = (ids.new_id() for _ in range(5))

    def header(**kw: object) -> Header:
        return Header(event_id=ids.new_id(), session_id=session, loop_id=loop, **kw)  # type: ignore[arg-type]

    at = {"turn_id": turn, "step_id": step}
    events = [
        TurnStarted(header=header(turn_id=turn), turn_index=1, message=user("a")),
        PermissionDecided(
            header=header(**at),
            tool_execution_id=ids.new_id(),
            effect="approve",
            reason="access_evaluated",
            subject="t",
        ),
        GateOpened(header=header(**at), gate_id=gate, kind="permission"),
        PermissionRequested(
            header=header(**at),
            tool_execution_id=ids.new_id(),
            gate_id=gate,
            tool_name="g",
            summary="g once",
        ),
    ]
    opened = fold_loop(events).open_turn
    assert opened is not None
    assert [(g.tool_name, g.summary) for g in opened.gates] == [("g", "g once")]
    answered = GateResolved(
        header=header(**at),
        gate_id=gate,
        reason=GateCloseReason.ANSWERED,
        action="deny",
    )
    state = fold_loop([*events, answered])
    assert state.open_turn is not None
    assert state.open_turn.gates == ()
    assert state.open_turn.decisions == (
        CallDecision(tool_name="t", effect="approve"),
        CallDecision(tool_name="g", effect="deny"),
    )
    done = StepDone(header=header(**at), messages=(AIMessage(),))
    after = fold_loop([done], state).open_turn
    assert after is not None
    assert (after.steps, after.decisions) == (1, ())
