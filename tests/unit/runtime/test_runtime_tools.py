"""Tools and gates: contract §9.5 items 62-70."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest

from turnstream.errors import SessionError
from turnstream.events import (
    GateCloseReason,
    GateOpened,
    GateResolved,
    PermissionDecided,
    PermissionRequested,
    StepDone,
    ToolCallCompleted,
    ToolCallStarted,
    TurnDone,
    TurnInterrupted,
)
from turnstream.ids import GateId
from turnstream.runtime import LoopConfig, ToolContext, ToolLimits, ToolOutput
from turnstream.testing import (
    FunctionTool,
    Pause,
    StaticAccessPolicy,
    call,
    open_rig,
    text_step,
    tool_step,
)


def results(step: StepDone) -> list[tuple[str, bool, str]]:
    """(tool_use_id, is_error, text) of each tool result of a step, in order."""
    out = []
    for message in step.messages[1:]:
        text = "".join(getattr(b, "text", "") for b in message.blocks)
        out.append((message.tool_use_id, message.is_error, text))  # type: ignore[union-attr]
    return out


async def test_run_batch_result_order_matches_calls() -> None:
    """Contract 9.5 #62 TestRunBatch_ResultOrderMatchesCalls: results come back in call
    order, whatever the completion order.
    """
    second_done = asyncio.Event()

    async def first(_i: str, _c: ToolContext) -> str:
        await second_done.wait()
        return "first"

    async def second(_i: str, _c: ToolContext) -> str:
        second_done.set()
        return "second"

    tools = [FunctionTool("first", first), FunctionTool("second", second)]
    steps = [tool_step(call("first", id="a"), call("second", id="b")), text_step("x")]
    async with open_rig(*steps, tools=tools) as rig:
        await rig.submit("go")
        await rig.idle()
        completed = [e.tool_use_id for e in rig.recorder.of_type(ToolCallCompleted)]
        assert completed == ["b", "a"]
        assert results(rig.recorder.of_type(StepDone)[0]) == [
            ("a", False, "first"),
            ("b", False, "second"),
        ]


async def test_run_batch_tool_execution_id_binds_to_provider_tool_use_id() -> None:
    """Contract 9.5 #62 TestRunBatch_ToolExecutionIDBindsToProviderToolUseID."""
    seen: list[ToolContext] = []

    def record(_i: str, ctx: ToolContext) -> str:
        seen.append(ctx)
        return "ok"

    tool = FunctionTool("t", record)
    async with open_rig(
        tool_step(call("t", id="prov-1")), text_step("x"), tools=[tool]
    ) as rig:
        await rig.submit("go")
        await rig.idle()
        started = rig.recorder.of_type(ToolCallStarted)[0]
        completed = rig.recorder.of_type(ToolCallCompleted)[0]
        assert started.tool_use_id == completed.tool_use_id == "prov-1"
        assert started.tool_execution_id == completed.tool_execution_id
        assert seen[0].tool_execution_id == started.tool_execution_id
        assert seen[0].tool_use_id == "prov-1"
        assert seen[0].step_id == started.header.step_id


async def test_run_batch_all_started_before_any_completed_and_failure_visibility() -> (
    None
):
    """Contract 9.5 #63
    TestRunBatch_AllStartedBeforeAnyCompleted/FailureVisibility/UnknownTool/InvalidJSONArgs.
    """
    tool = FunctionTool("ok", lambda _i, _c: "fine")
    calls = [
        call("ok", id="a"),
        call("nope", id="b"),
        call("ok", "{not json", id="c"),
        call("ok", id="d"),
    ]
    async with open_rig(tool_step(*calls), text_step("x"), tools=[tool]) as rig:
        await rig.submit("go")
        await rig.idle()
        tool_events = [
            e for e in rig.events if isinstance(e, ToolCallStarted | ToolCallCompleted)
        ]
        kinds = [type(e).__name__ for e in tool_events]
        assert kinds == ["ToolCallStarted"] * 4 + ["ToolCallCompleted"] * 4
        assert [e.tool_use_id for e in tool_events[:4]] == ["a", "b", "c", "d"]
        assert results(rig.recorder.of_type(StepDone)[0]) == [
            ("a", False, "fine"),
            ("b", True, "error: unknown tool: nope"),
            ("c", True, "error: invalid tool arguments (not valid JSON)"),
            ("d", False, "fine"),
        ]
        assert tool.calls == ["{}", "{}"]


async def test_run_batch_id_gen_failure() -> None:
    """Contract 9.5 #63 TestRunBatch_IDGenFailure: a call whose id cannot be minted
    fails visibly; no gate opens.
    """
    pause = Pause()
    tool = FunctionTool("t", approval=True)
    script = tool_step(call("t", id="a"))
    script.insert(-1, pause)
    async with open_rig(script, text_step("x"), tools=[tool]) as rig:
        await rig.submit("go")
        await pause.wait_reached()
        rig.ids.fail_next(1)  # the next mint is the call's execution id
        pause.release()
        await rig.idle()
        assert not rig.recorder.of_type(GateOpened)
        assert results(rig.recorder.of_type(StepDone)[0]) == [
            ("a", True, "error: internal: could not generate call id")
        ]
        assert rig.recorder.of_type(TurnDone)


async def test_run_batch_sequential_drains_first() -> None:
    """Contract 9.5 #64 TestRunBatch_SequentialDrainsFirst: sequential tools run one by
    one before the parallel ones.
    """
    order: list[str] = []
    running = 0
    overlap = False

    async def serial(i: str, _c: ToolContext) -> str:
        nonlocal running, overlap
        running += 1
        overlap = overlap or running > 1
        order.append(f"s{i}")
        await asyncio.sleep(0)
        running -= 1
        return "s"

    def parallel(i: str, _c: ToolContext) -> str:
        order.append(f"p{i}")
        return "p"

    tools = [FunctionTool("s", serial, serial=True), FunctionTool("p", parallel)]
    calls = [call("p", "1", id="a"), call("s", "1", id="b"), call("s", "2", id="c")]
    async with open_rig(tool_step(*calls), text_step("x"), tools=tools) as rig:
        await rig.submit("go")
        await rig.idle()
        assert order == ["s1", "s2", "p1"]
        assert not overlap


async def test_run_batch_max_parallel_cap() -> None:
    """Contract 9.5 #64 TestRunBatch_MaxParallelCap: at most max_parallel calls run at
    once.
    """
    running = 0
    peak = 0

    async def busy(_i: str, _c: ToolContext) -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        for _ in range(3):
            await asyncio.sleep(0)
        running -= 1
        return "done"

    tool = FunctionTool("busy", busy)
    config = LoopConfig(model="m", tools=(tool,), limits=ToolLimits(max_parallel=2))
    calls = [call("busy", id=f"c{i}") for i in range(6)]
    async with open_rig(tool_step(*calls), text_step("x"), config=config) as rig:
        await rig.submit("go")
        await rig.idle()
        assert peak == 2
        assert len(tool.calls) == 6


async def test_run_batch_execution_failures_never_abort_the_batch() -> None:
    """Contract 9.5 #65
    TestRunBatch_PanicRecovered/ToolErrorBecomesResult/EmptyResultInjected.
    """

    def explode(_i: str, _c: ToolContext) -> str:
        raise RuntimeError("disk on fire")

    tools = [
        FunctionTool("explode", explode),
        FunctionTool("err", lambda _i, _c: ToolOutput.error("bad input")),
        FunctionTool("empty", lambda _i, _c: ""),
        FunctionTool("ok", lambda _i, _c: "fine"),
    ]
    calls = [
        call("explode", id="a"),
        call("err", id="b"),
        call("empty", id="c"),
        call("ok", id="d"),
    ]
    async with open_rig(tool_step(*calls), text_step("x"), tools=tools) as rig:
        await rig.submit("go")
        await rig.idle()
        assert results(rig.recorder.of_type(StepDone)[0]) == [
            ("a", True, "error: disk on fire"),
            ("b", True, "bad input"),
            ("c", True, "error: empty result"),
            ("d", False, "fine"),
        ]
        assert rig.recorder.of_type(TurnDone)


async def test_run_batch_tool_timeout_becomes_result() -> None:
    """Contract §6.2 step 5 + timeouts: a tool past its timeout yields an error result;
    the turn goes on.
    """

    async def slow(_i: str, _c: ToolContext) -> str:
        await asyncio.Event().wait()
        return "never"

    tool = FunctionTool("slow", slow)
    config = LoopConfig(model="m", tools=(tool,), tool_timeout=0.02)
    async with open_rig(
        tool_step(call("slow", id="a")), text_step("x"), config=config
    ) as rig:
        await rig.submit("go")
        await rig.idle()
        assert results(rig.recorder.of_type(StepDone)[0]) == [
            ("a", True, "error: tool timed out")
        ]


async def test_a_tool_timeout_and_an_error_result_are_each_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The operator sees which tool timed out or failed, never its input or output."""

    async def slow(_i: str, _c: ToolContext) -> str:
        await asyncio.Event().wait()
        return "never"

    tools = (
        FunctionTool("slow", slow),
        FunctionTool("err", lambda _i, _c: ToolOutput.error("secret detail")),
    )
    config = LoopConfig(model="m", tools=tools, tool_timeout=0.02)
    caplog.set_level(logging.INFO, logger="turnstream.runtime.tools")
    async with open_rig(
        tool_step(
            call("slow", id="a", input_json='{"q": "private"}'), call("err", id="b")
        ),
        text_step("x"),
        config=config,
    ) as rig:
        await rig.submit("go")
        await rig.idle()
    lines = [
        (r.levelname, r.getMessage(), getattr(r, "tool", None))
        for r in caplog.records
        if r.name == "turnstream.runtime.tools"
    ]
    assert sorted(lines) == [  # the calls run side by side: either may end first
        ("INFO", "tool returned an error result", "err"),
        ("WARNING", "tool timed out", "slow"),
    ]
    text = caplog.text
    assert "private" not in text
    assert "secret detail" not in text


async def test_run_batch_permission_decision_audit_auto_approve_and_deny() -> None:
    """Contract 9.5 #66 TestRunBatch_PermissionDecisionAuditAutoApproveAndDeny."""
    policy = StaticAccessPolicy(per_tool={"blocked": "deny"})
    tools = [FunctionTool("fine"), FunctionTool("blocked")]
    calls = [call("fine", id="a"), call("blocked", id="b")]
    async with open_rig(
        tool_step(*calls), text_step("x"), tools=tools, access_policy=policy
    ) as rig:
        await rig.submit("go")
        await rig.idle()
        decided = rig.recorder.of_type(PermissionDecided)
        assert [(d.subject, d.effect, d.reason) for d in decided] == [
            ("fine", "approve", "access_evaluated"),
            ("blocked", "deny", "access_denied"),
        ]
        started = rig.recorder.of_type(ToolCallStarted)
        assert [d.tool_execution_id for d in decided] == [
            s.tool_execution_id for s in started
        ]
        assert results(rig.recorder.of_type(StepDone)[0])[1] == (
            "b",
            True,
            "error: permission denied [not authorized]: denied by policy",
        )
        assert tools[1].calls == []


async def test_run_batch_permission_decision_audit_skips_gated_ask() -> None:
    """Contract 9.5 #66 TestRunBatch_PermissionDecisionAuditSkipsGatedAsk: a prompted
    call gets no PermissionDecided.
    """
    policy = StaticAccessPolicy(per_tool={"ask": "ask"})
    tools = [FunctionTool("ask"), FunctionTool("fine")]
    calls = [call("ask", id="a"), call("fine", id="b")]
    async with open_rig(
        tool_step(*calls), text_step("x"), tools=tools, access_policy=policy
    ) as rig:
        await rig.submit("go")
        requested = await rig.recorder.wait_for_type(PermissionRequested)
        await rig.session.respond_gate(requested.gate_id, "approve")
        await rig.idle()
        assert [d.subject for d in rig.recorder.of_type(PermissionDecided)] == ["fine"]
        assert [d[0] for d in rig.after_start()[1:5]] == [
            "GateOpened",
            "PermissionRequested",
            "GateResolved",
            "PermissionDecided",
        ]


async def test_access_policy_error_fails_closed() -> None:
    """Contract §6.1 (access): a policy that cannot answer denies the call
    (access_error).
    """

    class BrokenPolicy:
        async def decide(self, request: object) -> str:
            raise RuntimeError("policy store down")

    tool = FunctionTool("t")
    async with open_rig(
        tool_step(call("t", id="a")),
        text_step("x"),
        tools=[tool],
        access_policy=BrokenPolicy(),  # type: ignore[arg-type]
    ) as rig:
        await rig.submit("go")
        await rig.idle()
        decided = rig.recorder.of_type(PermissionDecided)[0]
        assert (decided.effect, decided.reason) == ("deny", "access_error")
        assert tool.calls == []


async def test_tool_result_message_and_shaping() -> None:
    """Contract 9.5 #67 TestToolResultMessage/TestRunTurnToolResultShaping: head +
    notice + tail under max_result_bytes.
    """
    big = "A" * 1500 + "B" * 1500
    tool = FunctionTool("big", lambda _i, _c: big)
    config = LoopConfig(
        model="m", tools=(tool,), limits=ToolLimits(max_result_bytes=300)
    )
    async with open_rig(
        tool_step(call("big", id="a")), text_step("x"), config=config
    ) as rig:
        await rig.submit("go")
        await rig.idle()
        [(tool_use_id, is_error, text)] = results(rig.recorder.of_type(StepDone)[0])
        assert tool_use_id == "a"
        assert not is_error
        assert text.startswith("A")
        assert text.endswith("B")
        assert "[tool output truncated: omitted" in text
        assert len(text.encode()) <= 300
        preview = rig.recorder.of_type(ToolCallCompleted)[0].result_preview
        assert preview.endswith("… [truncated]")
        assert len(preview.encode()) <= 2048 + len("… [truncated]".encode())


async def test_gate_routing_drops_unknown_invalid_and_duplicate_answers() -> None:
    """Contract 9.5 #68 TestListenDropsWrongCallID/WrongKind/DuplicateAfterDelivery and
    #70 RespondGate contract.
    """
    tool = FunctionTool("rm", lambda _i, _c: "done", approval=True)
    async with open_rig(
        tool_step(call("rm", id="a")), text_step("x"), tools=[tool]
    ) as rig:
        await rig.submit("go")
        requested = await rig.recorder.wait_for_type(PermissionRequested)
        with pytest.raises(SessionError) as unknown:
            await rig.session.respond_gate(GateId(uuid.uuid4()), "approve")
        assert unknown.value.reason == "gate_not_found"
        with pytest.raises(SessionError) as invalid:
            await rig.session.respond_gate(requested.gate_id, "Approve always")
        assert invalid.value.reason == "gate_action_invalid"
        assert tool.calls == []  # still parked, still answerable
        await rig.session.respond_gate(requested.gate_id, "approve")
        with pytest.raises(SessionError) as duplicate:
            await rig.session.respond_gate(requested.gate_id, "deny")
        assert duplicate.value.reason == "gate_not_found"
        await rig.idle()
        resolved = rig.recorder.of_type(GateResolved)
        assert [(r.reason, r.action) for r in resolved] == [
            (GateCloseReason.ANSWERED, "approve")
        ]
        assert tool.calls == ["{}"]


async def test_stale_answer_does_not_drop_later_valid_reply() -> None:
    """Contract 9.5 #68 TestListenStaleCommandDoesNotDropLaterValidReply."""
    tool = FunctionTool("rm", lambda _i, _c: "done", approval=True)
    steps = [
        tool_step(call("rm", id="a")),
        tool_step(call("rm", id="b")),
        text_step("x"),
    ]
    async with open_rig(*steps, tools=[tool]) as rig:
        await rig.submit("first")
        old = await rig.recorder.wait_for_type(PermissionRequested)
        await rig.session.interrupt()
        await rig.idle()
        await rig.submit("second")
        new = await rig.recorder.wait_for_type(PermissionRequested, count=2)
        with pytest.raises(SessionError):
            await rig.session.respond_gate(old.gate_id, "approve")
        await rig.session.respond_gate(new.gate_id, "approve")
        await rig.idle()
        assert rig.recorder.of_type(TurnDone)[0].turn_index == 2


async def test_install_before_emit_and_answer_on_gate_opened() -> None:
    """Contract 9.5 #69 TestRequestUserInput_EmitsAfterAck: the gate is installed before
    any gate event is seen.
    """
    tool = FunctionTool("rm", lambda _i, _c: "done", approval=True)
    async with open_rig(
        tool_step(call("rm", id="a")), text_step("x"), tools=[tool]
    ) as rig:
        await rig.submit("go")
        opened = await rig.recorder.wait_for_type(GateOpened)
        await rig.session.respond_gate(opened.gate_id, "approve")  # answerable at once
        await rig.idle()
        assert rig.recorder.of_type(TurnDone)
        journal_types = [type(e).__name__ for e in rig.journal_events()]
        opened_at = journal_types.index("GateOpened")
        assert journal_types[opened_at + 1] == "PermissionRequested"


async def test_cancel_while_blocked_on_gate_abandons_after_terminal() -> None:
    """Contract 9.5 #69 TestRequestUserInput_CancelWhileBlockedOnReply / §10.1.17:
    GateResolved{abandoned} after the terminal.
    """
    tool = FunctionTool("rm", lambda _i, _c: "done", approval=True)
    async with open_rig(tool_step(call("rm", id="a")), tools=[tool]) as rig:
        await rig.submit("go")
        requested = await rig.recorder.wait_for_type(PermissionRequested)
        assert await rig.session.interrupt() is True
        await rig.idle()
        assert rig.after_start()[-3:] == [
            ("TurnInterrupted", 1),
            ("GateResolved", "abandoned", ""),
            ("LoopIdle",),
        ]
        with pytest.raises(SessionError):  # a late approval is dropped
            await rig.session.respond_gate(requested.gate_id, "approve")
        assert tool.calls == []


async def test_deny_answer_becomes_model_visible_result() -> None:
    """Contract §4.9: a denied gate yields a permission-denied result and the turn goes
    on.
    """
    tool = FunctionTool("rm", lambda _i, _c: "done", approval=True)
    async with open_rig(
        tool_step(call("rm", id="a")), text_step("ok"), tools=[tool]
    ) as rig:
        await rig.submit("go")
        requested = await rig.recorder.wait_for_type(PermissionRequested)
        await rig.session.respond_gate(requested.gate_id, "deny")
        await rig.idle()
        assert results(rig.recorder.of_type(StepDone)[0]) == [
            ("a", True, "error: permission denied: the request was denied")
        ]
        assert tool.calls == []
        assert rig.recorder.of_type(TurnDone)


async def test_respond_gate_append_failure_leaves_gate_answerable() -> None:
    """Contract 9.5 #70 TestRespondGateAppendFailureLeavesGateAnswerable."""
    tool = FunctionTool("rm", lambda _i, _c: "done", approval=True)
    async with open_rig(
        tool_step(call("rm", id="a")), text_step("x"), tools=[tool]
    ) as rig:
        await rig.submit("go")
        requested = await rig.recorder.wait_for_type(PermissionRequested)
        rig.journal.fail_next(1)
        with pytest.raises(SessionError) as failed:
            await rig.session.respond_gate(requested.gate_id, "approve")
        assert failed.value.reason == "gate_append_failed"
        await rig.session.respond_gate(requested.gate_id, "approve")
        await rig.idle()
        assert tool.calls == ["{}"]
        assert not [e for e in rig.events if isinstance(e, TurnInterrupted)]


class _Plain:
    async def run(self, ctx: object, input_json: str) -> str:
        return ""


class _Audited(_Plain):
    def audit_summary(self, input_json: str) -> str:
        return "audited"


class _Dynamic(_Plain):
    def __getattr__(self, name: str) -> object:
        if name == "audit_summary":
            return lambda input_json: "dynamic"
        raise AttributeError(name)


class _NoneOnClass(_Plain):
    audit_summary = None


@pytest.mark.parametrize(
    "make",
    [
        _Plain,
        _Audited,
        _Dynamic,
        _NoneOnClass,
        lambda: _with_instance_method(_Plain()),
        lambda: _with_instance_none(_Audited()),
    ],
    ids=[
        "plain",
        "on-class",
        "getattr",
        "none-on-class",
        "on-instance",
        "none-on-instance",
    ],
)
def test_tool_traits_answer_as_isinstance_does(make: object) -> None:
    """The per-class answer never differs from the protocol's isinstance."""
    from turnstream.runtime.ports import ApprovalTool, AuditableTool, SequentialTool
    from turnstream.runtime.tools import has_trait

    for _ in range(2):  # the second call is the cached one
        tool = make()  # type: ignore[operator]
        for trait in (AuditableTool, SequentialTool, ApprovalTool):
            assert has_trait(tool, trait) == isinstance(tool, trait), trait.__name__


def _with_instance_method(tool: _Plain) -> _Plain:
    tool.audit_summary = lambda input_json: "mine"  # type: ignore[attr-defined]
    return tool


def _with_instance_none(tool: _Audited) -> _Audited:
    tool.audit_summary = None  # type: ignore[assignment, method-assign]
    return tool


async def test_step_done_carries_the_timing_of_each_call_that_ran() -> None:
    """Durable per-call times: one ``ToolTiming`` per call that ran, in call order."""
    tools = [
        FunctionTool("ok", lambda _i, _c: "fine"),
        FunctionTool("err", lambda _i, _c: ToolOutput.error("bad input")),
    ]
    policy = StaticAccessPolicy(per_tool={"blocked": "deny"})
    calls = [call("ok", id="a"), call("blocked", id="b"), call("err", id="c")]
    async with open_rig(
        tool_step(*calls),
        text_step("x"),
        tools=[*tools, FunctionTool("blocked")],
        access_policy=policy,
    ) as rig:
        await rig.submit("go")
        await rig.idle()
        step = rig.recorder.of_type(StepDone)[0]
    timings = [(t.tool_use_id, t.tool_name, t.is_error) for t in step.tool_timings]
    assert timings == [("a", "ok", False), ("c", "err", True)]  # "b" never ran
    for timing in step.tool_timings:
        assert timing.started_at.tzinfo is not None
        assert timing.duration_us >= 0
