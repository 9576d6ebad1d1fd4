"""Conformance: the exact event sequences of contract §10.3 (A-F).

Session-level activity events (SessionActive/SessionIdle/…) are not part of
turnstream (a decision taken for multi-process loops). Every tool call is
decided: the rig approves each with a ``PermissionDecided`` unless a test gives
another policy, and no policy at all denies (``access_gate_missing``); each
sequence is asserted in full, as delivered live and as committed in the journal.
"""

from __future__ import annotations

import asyncio

import pytest

from turnstream.content import TextBlock, ToolResultMessage, Usage, UserMessage
from turnstream.errors import ProviderError
from turnstream.events import (
    Agency,
    CancelReason,
    FailureKind,
    GateOpened,
    InputQueued,
    LoopStarted,
    PermissionRequested,
    RejectReason,
    StepDone,
    TokenDelta,
    TurnDone,
    TurnStarted,
)
from turnstream.memory import InMemoryHub, InMemoryJournal
from turnstream.runtime import (
    INTERRUPTED_NOTICE,
    TRUNCATED_NOTICE,
    EventFilter,
    LocalSession,
    LoopConfig,
    LoopSetup,
    NoAccessPolicy,
    ToolLimits,
)
from turnstream.testing import (
    EventRecorder,
    FixedClock,
    FunctionTool,
    Hang,
    Pause,
    ScriptedModel,
    SequentialIds,
    StaticAccessPolicy,
    call,
    describe_message,
    empty_step,
    failing_step,
    open_rig,
    text_step,
    tool_step,
)


def types(events: object) -> list[str]:
    return [type(e).__name__ for e in events]  # type: ignore[attr-defined]


async def test_sequence_a_text_only_turn() -> None:
    """Contract 10.3 A: TurnStarted → TokenDeltaxk → StepDone → TurnDone → LoopIdle."""
    usage = Usage(input_tokens=5, output_tokens=2)
    async with open_rig(text_step("Hel", "lo", usage=usage)) as rig:
        cmd = await rig.submit("hi")
        await rig.idle()

        assert rig.after_start(deltas=True) == [
            ("TurnStarted", 1, cmd, "User:hi"),
            ("TokenDelta", "Hel"),
            ("TokenDelta", "lo"),
            ("StepDone", ("AI:Hello",)),
            ("TurnDone", 1, "AI:Hello"),
            ("LoopIdle",),
        ]
        assert types(rig.journal_events()) == [
            "LoopStarted",
            "TurnStarted",
            "StepDone",
            "TurnDone",
            "LoopIdle",
        ]
        started = rig.recorder.of_type(TurnStarted)[0]
        assert started.header.cause is not None
        assert started.header.cause.agency is Agency.USER
        done = rig.recorder.of_type(TurnDone)[0]
        assert done.usage == usage
        assert done.message == rig.recorder.of_type(StepDone)[0].ai_message
        for delta in rig.recorder.of_type(TokenDelta):
            assert delta.header.turn_id == started.header.turn_id
            assert delta.header.event_id is None


async def test_sequence_b_two_tool_steps_then_text_with_access_policy() -> None:
    """Contract 10.3 B: two auto-approved tool steps, then a text answer."""
    lookup = FunctionTool("lookup", lambda i, _c: f"found {i}")
    policy = StaticAccessPolicy()
    steps = [
        tool_step(call("lookup", '{"q":1}', id="u1"), usage=Usage(output_tokens=1)),
        tool_step(call("lookup", '{"q":2}', id="u2"), usage=Usage(output_tokens=2)),
        text_step("done", usage=Usage(output_tokens=3)),
    ]
    async with open_rig(*steps, tools=[lookup], access_policy=policy) as rig:
        cmd = await rig.submit("go")
        await rig.idle()

        assert rig.after_start() == [
            ("TurnStarted", 1, cmd, "User:go"),
            ("PermissionDecided", "lookup", "approve", "access_evaluated"),
            ("ToolCallStarted", "u1"),
            ("ToolCallCompleted", "u1", False),
            ("StepDone", ("AI:tool_use:u1", 'Tool:u1:found {"q":1}')),
            ("PermissionDecided", "lookup", "approve", "access_evaluated"),
            ("ToolCallStarted", "u2"),
            ("ToolCallCompleted", "u2", False),
            ("StepDone", ("AI:tool_use:u2", 'Tool:u2:found {"q":2}')),
            ("StepDone", ("AI:done",)),
            ("TurnDone", 1, "AI:done"),
            ("LoopIdle",),
        ]
        assert [describe_message(m) for m in await rig.history()] == [
            "User:go",
            "AI:tool_use:u1",
            'Tool:u1:found {"q":1}',
            "AI:tool_use:u2",
            'Tool:u2:found {"q":2}',
            "AI:done",
        ]
        assert rig.recorder.of_type(TurnDone)[0].usage == Usage(output_tokens=6)
        assert types(rig.journal_events()) == [
            "LoopStarted",
            "TurnStarted",
            "PermissionDecided",
            "StepDone",
            "PermissionDecided",
            "StepDone",
            "StepDone",
            "TurnDone",
            "LoopIdle",
        ]


@pytest.mark.parametrize(
    "policy",
    [pytest.param(None, id="none"), pytest.param(NoAccessPolicy(), id="no-policy")],
)
async def test_sequence_b_without_policy_denies_every_call(
    policy: NoAccessPolicy | None,
) -> None:
    """Contract §6.1 (a nil access gate denies): a loop made with ``LoopSetup``
    and no policy records ``PermissionDecided{deny, access_gate_missing}`` and
    never runs the tool.
    """
    lookup = FunctionTool("lookup")
    journal, hub = InMemoryJournal(), InMemoryHub()
    session = LocalSession(journal=journal, hub=hub, ids=SequentialIds())
    recorder = EventRecorder(hub.subscribe(EventFilter.everything(), capacity=100))
    setup = LoopSetup(
        config=LoopConfig(model="m", tools=(lookup,)),
        model=ScriptedModel([tool_step(call("lookup", id="u1")), text_step("ok")]),
        access_policy=policy,
    )
    async with session:
        loop_id = await session.create_loop(
            setup.config, setup.model, access_policy=setup.access_policy
        )
        cmd = await session.submit_to_loop(loop_id, "go")
        await session.wait_idle(loop_id)
        denied = "Tool:u1:error: permission denied [unavailable]: no access policy"
        assert recorder.described(skip=(TokenDelta, LoopStarted)) == [
            ("TurnStarted", 1, cmd, "User:go"),
            ("PermissionDecided", "lookup", "deny", "access_gate_missing"),
            ("ToolCallStarted", "u1"),
            ("ToolCallCompleted", "u1", True),
            ("StepDone", ("AI:tool_use:u1", denied)),
            ("StepDone", ("AI:ok",)),
            ("TurnDone", 1, "AI:ok"),
            ("LoopIdle",),
        ]


async def test_sequence_b_several_calls_started_in_order_completed_as_they_finish() -> (
    None
):
    """Contract 10.3 B (several calls): all Started in call order, Completed as they
    finish, results in call order.
    """
    fast_done = asyncio.Event()

    async def slow(_i: str, _c: object) -> str:
        await fast_done.wait()
        return "slow"

    async def fast(_i: str, _c: object) -> str:
        fast_done.set()
        return "fast"

    tools = [FunctionTool("slow", slow), FunctionTool("fast", fast)]
    steps = [
        tool_step(call("slow", id="a"), call("fast", id="b")),
        text_step("ok"),
    ]
    async with open_rig(*steps, tools=tools, access_policy=StaticAccessPolicy()) as rig:
        cmd = await rig.submit("go")
        await rig.idle()
        assert rig.after_start()[:8] == [
            ("TurnStarted", 1, cmd, "User:go"),
            ("PermissionDecided", "slow", "approve", "access_evaluated"),
            ("PermissionDecided", "fast", "approve", "access_evaluated"),
            ("ToolCallStarted", "a"),
            ("ToolCallStarted", "b"),
            ("ToolCallCompleted", "b", False),
            ("ToolCallCompleted", "a", False),
            ("StepDone", ("AI:tool_use:a|tool_use:b", "Tool:a:slow", "Tool:b:fast")),
        ]


async def test_sequence_b_gated_call_resolves_before_batch_starts() -> None:
    """Contract 10.3 B (gated call): GateOpened → PermissionRequested → GateResolved,
    before ToolCallStarted.
    """
    remove = FunctionTool("rm", lambda _i, _c: "removed", approval=True)
    listing = FunctionTool("ls", lambda _i, _c: "a b")
    steps = [tool_step(call("rm", id="u1"), call("ls", id="u2")), text_step("ok")]
    async with open_rig(*steps, tools=[remove, listing]) as rig:
        cmd = await rig.submit("clean up")
        requested = await rig.recorder.wait_for_type(PermissionRequested)
        await rig.session.respond_gate(requested.gate_id, "approve")
        await rig.idle()

        assert rig.after_start() == [
            ("TurnStarted", 1, cmd, "User:clean up"),
            ("GateOpened", "permission"),
            ("PermissionRequested", "rm"),
            ("GateResolved", "answered", "approve"),
            ("PermissionDecided", "ls", "approve", "access_evaluated"),
            ("ToolCallStarted", "u1"),
            ("ToolCallStarted", "u2"),
            ("ToolCallCompleted", "u1", False),
            ("ToolCallCompleted", "u2", False),
            (
                "StepDone",
                ("AI:tool_use:u1|tool_use:u2", "Tool:u1:removed", "Tool:u2:a b"),
            ),
            ("StepDone", ("AI:ok",)),
            ("TurnDone", 1, "AI:ok"),
            ("LoopIdle",),
        ]
        opened = rig.recorder.of_type(GateOpened)[0]
        assert opened.gate_id == requested.gate_id
        assert opened.actions == ("approve", "deny")


async def test_sequence_b_policy_deny_of_an_approval_tool_opens_no_gate() -> None:
    """Contract §6.2 (a policy's deny is final): a tool that asks for approval
    but is denied by the policy gets ``PermissionDecided{deny, access_denied}``;
    no gate opens and the tool never runs.
    """
    remove = FunctionTool("rm", lambda _i, _c: "removed", approval=True)
    policy = StaticAccessPolicy(per_tool={"rm": "deny"})
    steps = [tool_step(call("rm", id="u1")), text_step("ok")]
    async with open_rig(*steps, tools=[remove], access_policy=policy) as rig:
        cmd = await rig.submit("clean up")
        await rig.idle()
        denied = "Tool:u1:error: permission denied [not authorized]: denied by policy"
        assert rig.after_start() == [
            ("TurnStarted", 1, cmd, "User:clean up"),
            ("PermissionDecided", "rm", "deny", "access_denied"),
            ("ToolCallStarted", "u1"),
            ("ToolCallCompleted", "u1", True),
            ("StepDone", ("AI:tool_use:u1", denied)),
            ("StepDone", ("AI:ok",)),
            ("TurnDone", 1, "AI:ok"),
            ("LoopIdle",),
        ]
        assert remove.calls == []


async def test_sequence_c_interrupted_mid_stream() -> None:
    """Contract 10.3 C: prefix StepDone → TurnInterrupted → InputCancelled(machine) →
    LoopIdle → retained user input starts.
    """
    pause = Pause()
    steps = [
        [*text_step("Hel", "lo")[:2], pause],
        text_step("second"),
    ]
    async with open_rig(*steps) as rig:
        cmd0 = await rig.submit("first")
        await pause.wait_reached()
        user_cmd = await rig.submit("user follow-up")
        machine_cmd = await rig.submit("machine work", agency=Agency.MACHINE)
        await rig.recorder.wait_for_type(InputQueued, count=2)
        assert await rig.session.interrupt() is True
        await rig.recorder.wait_for_type(TurnDone)
        await rig.idle()

        notice = f"AI:Hello|{INTERRUPTED_NOTICE}"
        assert rig.after_start(deltas=True) == [
            ("TurnStarted", 1, cmd0, "User:first"),
            ("TokenDelta", "Hel"),
            ("TokenDelta", "lo"),
            ("InputQueued", user_cmd),
            ("InputQueued", machine_cmd),
            ("StepDone", (notice,)),
            ("TurnInterrupted", 1),
            ("InputCancelled", machine_cmd, CancelReason.TURN_INTERRUPTED),
            ("LoopIdle",),
            ("TurnStarted", 2, user_cmd, "User:user follow-up"),
            ("TokenDelta", "second"),
            ("StepDone", ("AI:second",)),
            ("TurnDone", 2, "AI:second"),
            ("LoopIdle",),
        ]
        assert types(rig.journal_events()) == [
            "LoopStarted",
            "TurnStarted",
            "StepDone",
            "TurnInterrupted",
            "InputCancelled",
            "LoopIdle",
            "TurnStarted",
            "StepDone",
            "TurnDone",
            "LoopIdle",
        ]


async def test_sequence_c_clean_stream_end_despite_cancellation_commits_nothing() -> (
    None
):
    """Contract 10.3 C (note): a step whose stream completed but whose commit was
    cancelled is discarded.
    """
    gate_open = asyncio.Event()

    async def blocking(_i: str, _c: object) -> str:
        gate_open.set()
        await asyncio.Event().wait()
        return "never"

    tool = FunctionTool("block", blocking)
    async with open_rig(tool_step(call("block", id="u1")), tools=[tool]) as rig:
        cmd = await rig.submit("x")
        await gate_open.wait()
        assert await rig.session.interrupt() is True
        await rig.idle()
        assert rig.after_start() == [
            ("TurnStarted", 1, cmd, "User:x"),
            ("PermissionDecided", "block", "approve", "access_evaluated"),
            ("ToolCallStarted", "u1"),
            ("TurnInterrupted", 1),
            ("LoopIdle",),
        ]
        assert [describe_message(m) for m in await rig.history()] == ["User:x"]


@pytest.mark.parametrize(
    ("second_step", "tail", "kind"),
    [
        pytest.param(
            [Pause(), *failing_step(ProviderError("p", "down"))],
            [],
            FailureKind.PROVIDER,
            id="provider-error-before-content",
        ),
        pytest.param(
            [Pause(), *failing_step(ProviderError("p", "down"), "partial")],
            [("StepDone", (f"AI:partial|{TRUNCATED_NOTICE}",))],
            FailureKind.PROVIDER,
            id="mid-stream-error-commits-truncated-prefix",
        ),
        pytest.param(
            [Pause(), *empty_step()],
            [],
            FailureKind.EMPTY_RESPONSE,
            id="empty-stream",
        ),
        pytest.param(
            [Pause(), *tool_step(call("lookup", id="u2"))],
            [],
            FailureKind.TOOL_LIMIT,
            id="tool-limit",
        ),
    ],
)
async def test_sequence_d_failed_after_one_committed_step(
    second_step: list[object], tail: list[tuple[object, ...]], kind: FailureKind
) -> None:
    """Contract 10.3 D: TurnFailed → InputCancelled{turn_failed} → LoopIdle; committed
    step kept.
    """
    pause = second_step[0]
    assert isinstance(pause, Pause)
    lookup = FunctionTool("lookup", lambda _i, _c: "r")
    config = LoopConfig(model="m", tools=(lookup,), limits=ToolLimits(max_tool_steps=1))
    async with open_rig(
        tool_step(call("lookup", id="u1")),
        second_step,
        config=config,  # type: ignore[arg-type]
    ) as rig:
        cmd = await rig.submit("go")
        await pause.wait_reached()
        queued = await rig.submit("later")
        await rig.recorder.wait_for_type(InputQueued)
        pause.release()
        await rig.idle()

        assert rig.after_start() == [
            ("TurnStarted", 1, cmd, "User:go"),
            ("PermissionDecided", "lookup", "approve", "access_evaluated"),
            ("ToolCallStarted", "u1"),
            ("ToolCallCompleted", "u1", False),
            ("StepDone", ("AI:tool_use:u1", "Tool:u1:r")),
            ("InputQueued", queued),
            *tail,
            ("TurnFailed", 1, kind),
            ("InputCancelled", queued, CancelReason.TURN_FAILED),
            ("LoopIdle",),
        ]
        history = [describe_message(m) for m in await rig.history()]
        expected = ["User:go", "AI:tool_use:u1", "Tool:u1:r"]
        expected += [m for d in tail for m in d[1]]  # type: ignore[attr-defined]
        assert history == expected


async def test_sequence_e1_queued_inputs_chain_without_loop_idle_between() -> None:
    """Contract 10.3 E1: TurnDone(T1) → TurnStarted(T2, A) → … → TurnDone(T3) → one
    LoopIdle.
    """
    pause = Pause()
    steps = [
        [*text_step("one")[:1], pause, *text_step("one")[1:]],
        text_step("two"),
        text_step("three"),
    ]
    async with open_rig(*steps) as rig:
        cmd0 = await rig.submit("t1")
        await pause.wait_reached()
        a = await rig.submit("A")
        b = await rig.submit("B")
        await rig.recorder.wait_for_type(InputQueued, count=2)
        pause.release()
        await rig.recorder.wait_for_type(TurnDone, count=3)
        await rig.idle()

        assert rig.after_start() == [
            ("TurnStarted", 1, cmd0, "User:t1"),
            ("InputQueued", a),
            ("InputQueued", b),
            ("StepDone", ("AI:one",)),
            ("TurnDone", 1, "AI:one"),
            ("TurnStarted", 2, a, "User:A"),
            ("StepDone", ("AI:two",)),
            ("TurnDone", 2, "AI:two"),
            ("TurnStarted", 3, b, "User:B"),
            ("StepDone", ("AI:three",)),
            ("TurnDone", 3, "AI:three"),
            ("LoopIdle",),
        ]


async def test_sequence_e2_queued_inputs_fold_after_tool_step() -> None:
    """Contract 10.3 E2: StepDone(tool) → TurnFoldedInto(A) → TurnFoldedInto(B) → next
    request sees them.
    """
    release = asyncio.Event()

    async def waits(_i: str, _c: object) -> str:
        await release.wait()
        return "r"

    tool = FunctionTool("work", waits)
    steps = [tool_step(call("work", id="u1")), text_step("answer")]
    async with open_rig(*steps, tools=[tool]) as rig:
        cmd0 = await rig.submit("t1")
        a = await rig.submit("A")
        b = await rig.submit("B")
        await rig.recorder.wait_for_type(InputQueued, count=2)
        release.set()
        await rig.idle()

        assert rig.after_start() == [
            ("TurnStarted", 1, cmd0, "User:t1"),
            ("InputQueued", a),
            ("InputQueued", b),
            ("PermissionDecided", "work", "approve", "access_evaluated"),
            ("ToolCallStarted", "u1"),
            ("ToolCallCompleted", "u1", False),
            ("StepDone", ("AI:tool_use:u1", "Tool:u1:r")),
            ("TurnFoldedInto", 1, a, "User:A"),
            ("TurnFoldedInto", 1, b, "User:B"),
            ("StepDone", ("AI:answer",)),
            ("TurnDone", 1, "AI:answer"),
            ("LoopIdle",),
        ]
        second_request = rig.model.requests[1]
        assert [describe_message(m) for m in second_request.messages] == [
            "User:t1",
            "AI:tool_use:u1",
            "Tool:u1:r",
            "User:A",
            "User:B",
        ]


async def test_sequence_e_65th_queued_input_is_rejected_queue_full() -> None:
    """Contract 10.3 E: a 65th queued input (inbox at 64) → TurnRejected{queue_full}."""
    pause = Pause()
    async with open_rig([pause, *text_step("x")]) as rig:
        await rig.submit("t1")
        await pause.wait_reached()
        queued = [await rig.submit(f"q{i}") for i in range(64)]
        rejected = await rig.submit("one too many")
        await rig.recorder.wait_for(
            lambda e: e.reply_to() == rejected  # type: ignore[union-attr]
        )
        replies = rig.after_start()[1:]
        assert replies[:64] == [("InputQueued", c) for c in queued]
        assert replies[64] == ("TurnRejected", rejected, RejectReason.QUEUE_FULL)


async def test_sequence_e_no_fold_input_stops_the_fold_scan() -> None:
    """Contract 10.3 E (NoFold): only the leading foldable run folds; the NoFold input
    starts its own turn.
    """
    release = asyncio.Event()

    async def waits(_i: str, _c: object) -> str:
        await release.wait()
        return "r"

    tool = FunctionTool("work", waits)
    steps = [
        tool_step(call("work", id="u1")),
        text_step("t1"),
        text_step("t2"),
        text_step("t3"),
    ]
    async with open_rig(*steps, tools=[tool]) as rig:
        cmd0 = await rig.submit("start")
        a = await rig.submit("A")
        b = await rig.submit("B", no_fold=True)
        c = await rig.submit("C")
        await rig.recorder.wait_for_type(InputQueued, count=3)
        release.set()
        await rig.recorder.wait_for_type(TurnDone, count=3)
        await rig.idle()
        described = rig.after_start()
        assert ("TurnFoldedInto", 1, a, "User:A") in described
        assert [d for d in described if d[0] in ("TurnFoldedInto", "TurnStarted")] == [
            ("TurnStarted", 1, cmd0, "User:start"),
            ("TurnFoldedInto", 1, a, "User:A"),
            ("TurnStarted", 2, b, "User:B"),
            ("TurnStarted", 3, c, "User:C"),
        ]


async def test_sequence_f_restore_after_crash_mid_turn() -> None:
    """Contract 10.3 F: TurnStarted + StepDone without terminal → restore appends
    TurnInterrupted; next turn is k+1.
    """
    lookup = FunctionTool("lookup", lambda _i, _c: "r")
    crash_copy = InMemoryJournal()
    async with open_rig(
        text_step("earlier"),
        tool_step(call("lookup", id="u1")),
        [Hang()],
        tools=[lookup],
    ) as rig:
        await rig.submit("first turn")
        await rig.idle()
        await rig.submit("crashing turn")
        await rig.recorder.wait_for_type(StepDone, count=2)
        # The process "dies" here: copy exactly what had been committed.
        committed = rig.journal_events()
        await crash_copy.append(rig.loop_id, committed)
        session_id = rig.session.session_id
        loop_id = rig.loop_id
    assert types(committed) == [
        "LoopStarted",
        "TurnStarted",
        "StepDone",
        "TurnDone",
        "LoopIdle",
        "TurnStarted",
        "PermissionDecided",
        "StepDone",
    ]
    crashed_turn = committed[5]
    assert isinstance(crashed_turn, TurnStarted)

    hub = InMemoryHub()
    early = hub.subscribe(EventFilter.everything())
    model = ScriptedModel([text_step("after restore")])
    config = LoopConfig(model="m", tools=(lookup,))
    session = await LocalSession.restore(
        session_id=session_id,
        journal=crash_copy,
        hub=hub,
        loops={loop_id: LoopSetup(config, model)},
        clock=FixedClock(),
        ids=SequentialIds(start=1000),
    )
    tail = crash_copy.events(loop_id)[len(committed) :]
    assert types(tail) == ["TurnInterrupted"]
    assert tail[0].header.turn_id == crashed_turn.header.turn_id
    assert tail[0].turn_index == 2  # type: ignore[union-attr]
    async with session:
        state = await session.loop_state(loop_id)
        assert [describe_message(m) for m in state.messages] == [
            "User:first turn",
            "AI:earlier",
            "User:crashing turn",
            "AI:tool_use:u1",
            "Tool:u1:r",
        ]
        assert state.turn_index == 2
        assert state.open_turn is None
        await session.wait_idle()
        assert early.poll() == []  # nothing of the restore is delivered live
        cmd = await session.submit("next")
        await session.wait_idle()
        seen = early.poll()
        assert not any(isinstance(e, LoopStarted) for e in seen)
        started = [e for e in seen if isinstance(e, TurnStarted)]
        assert [(s.turn_index, s.reply_to()) for s in started] == [(3, cmd)]
        assert model.requests[0].messages[-1] == UserMessage(
            blocks=(TextBlock(text="next"),)
        )
        assert isinstance(model.requests[0].messages[-2], ToolResultMessage)
