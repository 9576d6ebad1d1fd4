"""Hooks: contract §9.6 items 71-75 (runner semantics and their effect on turns)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from uuid import uuid4

import pytest

from turnstream.errors import ConfigError
from turnstream.events import (
    CancelReason,
    FailureKind,
    GateOpened,
    InputQueued,
    LoopIdle,
    StepDone,
    TurnFailed,
    TurnStarted,
)
from turnstream.runtime import (
    Around,
    Denial,
    Guard,
    HookCall,
    HookResult,
    HookSet,
    Operation,
    Outcome,
    compile_hooks,
    deny,
)
from turnstream.runtime.hooks import FinishFn
from turnstream.testing import (
    FunctionTool,
    Pause,
    call,
    open_rig,
    text_step,
    tool_step,
)

REVISION = "policy-1"


def a_call(operation: Operation = Operation.TURN) -> HookCall:
    return HookCall(
        operation=operation,
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        session_id=uuid4(),
        loop_id=uuid4(),
    )


class Journal:
    """Records the order in which hook callbacks ran."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.results: list[HookResult] = []

    def around(self, name: str, operation: Operation) -> Around:
        def begin(call: HookCall) -> FinishFn:
            self.lines.append(f"{name}.begin:{call.operation}")

            def finish(result: HookResult) -> None:
                self.lines.append(f"{name}.finish:{result.outcome}")
                self.results.append(result)

            return finish

        return Around(operation, begin)

    def guard(
        self, name: str, operation: Operation, error: BaseException | None = None
    ) -> Guard:
        async def check(call: HookCall) -> None:
            self.lines.append(f"{name}.guard")
            if error is not None:
                raise error

        return Guard(operation, check)


async def test_runner_orders_begins_guards_and_finishes() -> None:
    """Contract 9.6 #71 TestRunnerOrdersBeginsGuardsAndFinishesWithContextChaining:
    begins in order, guards, finishes reversed, once.
    """
    log = Journal()
    runner = compile_hooks(
        HookSet(
            policy_revision=REVISION,
            around=(log.around("a", Operation.TURN), log.around("b", Operation.TURN)),
            guards=(log.guard("g1", Operation.TURN), log.guard("g2", Operation.TURN)),
        )
    )
    started = await runner.start(a_call())
    assert started.blocked is None
    started.finish(Outcome.COMPLETED)
    started.finish(Outcome.FAILED)  # exactly once
    assert log.lines == [
        "a.begin:turn",
        "b.begin:turn",
        "g1.guard",
        "g2.guard",
        "b.finish:completed",
        "a.finish:completed",
    ]


async def test_runner_guard_failure_stops_later_guards_and_returns_finish() -> None:
    """Contract 9.6 #71 TestRunnerGuardFailureStopsLaterGuardsAndReturnsFinish /
    TestRunnerGuardPanicBecomesGuardError.
    """
    log = Journal()
    runner = compile_hooks(
        HookSet(
            policy_revision=REVISION,
            around=(log.around("a", Operation.TURN),),
            guards=(
                log.guard("g1", Operation.TURN, RuntimeError("secret policy detail")),
                log.guard("g2", Operation.TURN),
            ),
        )
    )
    started = await runner.start(a_call())
    assert started.blocked is not None
    assert started.blocked.denied is False
    assert "secret" not in started.blocked.reason
    started.finish(Outcome.FAILED)
    assert log.lines == ["a.begin:turn", "g1.guard", "a.finish:failed"]


async def test_runner_denial_and_timeout() -> None:
    """Contract 9.6 #71/#72: a Denial is a decision (with its reason); a guard past its
    timeout fails closed.
    """

    async def slow(_call: HookCall) -> None:
        await asyncio.Event().wait()

    denying = compile_hooks(
        HookSet(
            policy_revision=REVISION,
            guards=(Guard(Operation.TURN, _raiser(deny("no_way", "not today"))),),
        )
    )
    blocked = (await denying.start(a_call())).blocked
    assert blocked is not None
    assert (blocked.denied, blocked.reason) == (True, "not today")
    timing_out = compile_hooks(
        HookSet(
            policy_revision=REVISION,
            guards=(Guard(Operation.TURN, slow),),
            guard_timeout=0.01,
        )
    )
    blocked = (await timing_out.start(a_call())).blocked
    assert blocked is not None
    assert blocked.denied is False


def _raiser(error: BaseException):  # type: ignore[no-untyped-def]
    async def check(_call: HookCall) -> None:
        raise error

    return check


async def test_runner_failing_observers_fail_open() -> None:
    """Contract 9.6 #71: a failing begin or finish never changes the operation's
    outcome.
    """

    def bad_begin(_call: HookCall) -> FinishFn:
        raise RuntimeError("observer bug")

    def begin_with_bad_finish(_call: HookCall) -> FinishFn:
        def finish(_result: HookResult) -> None:
            raise RuntimeError("finish bug")

        return finish

    runner = compile_hooks(
        HookSet(
            around=(
                Around(Operation.STEP, bad_begin),
                Around(Operation.STEP, begin_with_bad_finish),
            )
        )
    )
    started = await runner.start(a_call(Operation.STEP))
    assert started.blocked is None
    started.finish(Outcome.COMPLETED)


@pytest.mark.parametrize(
    ("hook_set", "problem"),
    [
        pytest.param(
            HookSet(
                guards=(Guard(Operation.STEP, _raiser(RuntimeError())),),
                policy_revision=REVISION,
            ),
            "operation_not_guardable",
            id="step-not-guardable",
        ),
        pytest.param(
            HookSet(guards=(Guard(Operation.TURN, _raiser(RuntimeError())),)),
            "missing_policy_revision",
            id="missing-revision",
        ),
        pytest.param(
            HookSet(policy_revision=REVISION),
            "unexpected_policy_revision",
            id="unexpected-revision",
        ),
        pytest.param(
            HookSet(
                guards=(Guard(Operation.TURN, _raiser(RuntimeError())),),
                policy_revision="bad\nrev",
            ),
            "invalid_policy_revision",
            id="invalid-revision",
        ),
    ],
)
def test_validate_set(hook_set: HookSet, problem: str) -> None:
    """Contract 9.6 #72 TestValidateSet."""
    with pytest.raises(ConfigError) as error:
        compile_hooks(hook_set)
    assert error.value.reason == problem


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        pytest.param("", "r", id="empty-code"),
        pytest.param("Upper", "r", id="uppercase-code"),
        pytest.param("9lives", "r", id="digit-first"),
        pytest.param("x" * 65, "r", id="code-too-long"),
        pytest.param("ok", "   ", id="blank-reason"),
        pytest.param("ok", "line\nbreak", id="control-char"),
        pytest.param("ok", "x" * 1025, id="reason-too-long"),
    ],
)
def test_deny_validates(code: str, reason: str) -> None:
    """Contract 9.6 #72 TestDeny / TestAsDenialRevalidatesConstructedValues: malformed
    denials cannot be built.
    """
    with pytest.raises(ConfigError):
        deny(code, reason)
    with pytest.raises(ConfigError):
        Denial(code, reason)


async def test_turn_hooks_denial_publishes_no_started() -> None:
    """Contract 9.6 #73 TestTurnHooksDenialPublishesNoStartedAndReleasesAdmissionOnce:
    idle submit → TurnRejected{internal}, no model call.
    """
    log = Journal()
    hooks = compile_hooks(
        HookSet(
            policy_revision=REVISION,
            around=(log.around("turn", Operation.TURN),),
            guards=(Guard(Operation.TURN, _raiser(deny("blocked", "no turns"))),),
        )
    )
    async with open_rig(text_step("never"), hooks=hooks) as rig:
        cmd = await rig.submit("a")
        await rig.idle()
        assert rig.after_start() == [("TurnRejected", cmd, "internal")]
        assert rig.model.requests == []
        assert [r.outcome for r in log.results] == [Outcome.DENIED]


async def test_turn_hooks_denial_of_queued_entry_cancels_it() -> None:
    """Contract 9.6 #73 / §5.4: a queued entry whose turn is denied →
    InputCancelled{turn_failed}; the hook finishes after it.
    """
    pause = Pause()
    denied: list[str] = []

    async def only_first(call: HookCall) -> None:
        if call.turn_index > 1:
            raise deny("one_only", "just one turn")

    def begin(call: HookCall) -> FinishFn:
        def finish(result: HookResult) -> None:
            denied.append(f"{call.turn_index}:{result.outcome}")

        return finish

    hooks = compile_hooks(
        HookSet(
            policy_revision=REVISION,
            guards=(Guard(Operation.TURN, only_first),),
            around=(Around(Operation.TURN, begin),),
        )
    )
    async with open_rig([pause, *text_step("1")], hooks=hooks) as rig:
        await rig.submit("a")
        await pause.wait_reached()
        b = await rig.submit("b")
        await rig.recorder.wait_for_type(InputQueued)
        pause.release()
        await rig.idle()
        assert rig.after_start()[-3:] == [
            ("TurnDone", 1, "AI:1"),
            ("InputCancelled", b, CancelReason.TURN_FAILED),
            ("LoopIdle",),
        ]
        assert denied == ["1:completed", "2:denied"]


async def test_turn_hooks_begin_before_started_and_finish_after_durable_terminal() -> (
    None
):
    """Contract 9.6 #73 TestTurnHooksBeginBeforeStartedAndFinishAfterDurableTerminal."""
    seen: list[str] = []
    holder: dict[str, object] = {}

    def begin(_call: HookCall) -> FinishFn:
        rig = holder["rig"]
        seen.append(f"begin:{len(rig.journal_events())}")  # type: ignore[attr-defined]

        def finish(result: HookResult) -> None:
            kinds = [type(e).__name__ for e in rig.journal_events()]  # type: ignore[attr-defined]
            seen.append(f"finish:{result.outcome}:{kinds[-1]}")

        return finish

    hooks = compile_hooks(HookSet(around=(Around(Operation.TURN, begin),)))
    async with open_rig(text_step("x"), hooks=hooks) as rig:
        holder["rig"] = rig
        await rig.submit("a")
        await rig.idle()
        assert seen == ["begin:1", "finish:completed:TurnDone"]


async def test_inference_hooks_denial_never_opens_provider() -> None:
    """Contract 9.6 #74 TestInferenceHooksDenialNeverOpensProviderAndFinishesDenied."""
    log = Journal()
    hooks = compile_hooks(
        HookSet(
            policy_revision=REVISION,
            around=(log.around("inf", Operation.INFERENCE),),
            guards=(
                Guard(
                    Operation.INFERENCE,
                    _raiser(deny("no_model", "model calls are off")),
                ),
            ),
        )
    )
    async with open_rig(text_step("never"), hooks=hooks) as rig:
        await rig.submit("a")
        await rig.idle()
        failed = rig.recorder.of_type(TurnFailed)[0]
        assert failed.error.kind is FailureKind.HOOK_DENIED
        assert failed.error.message == "operation inference denied by hook policy"
        assert "model calls are off" not in failed.error.message
        assert rig.model.requests == []
        assert [r.outcome for r in log.results] == [Outcome.DENIED]
        assert isinstance(rig.events[-1], LoopIdle)


async def test_inference_guard_failure_blocks_with_failure_text() -> None:
    """Contract §5.4: an inference guard that fails (not a denial) → "blocked by hook
    failure".
    """
    hooks = compile_hooks(
        HookSet(
            policy_revision=REVISION,
            guards=(Guard(Operation.INFERENCE, _raiser(RuntimeError("boom"))),),
        )
    )
    async with open_rig(text_step("never"), hooks=hooks) as rig:
        await rig.submit("a")
        await rig.idle()
        failed = rig.recorder.of_type(TurnFailed)[0]
        assert failed.error.message == "operation inference blocked by hook failure"


async def test_tool_hooks_guard_precedes_resolution_and_denial_is_audited() -> None:
    """Contract 9.6 #75 TestToolHooks_GuardPrecedesResolutionAndDenialIsAudited: no
    gate, model-visible denial, turn goes on.
    """
    log = Journal()

    async def no_rm(call: HookCall) -> None:
        if call.tool_name == "rm":
            raise deny("no_rm", "rm is not allowed here")

    hooks = compile_hooks(
        HookSet(
            policy_revision=REVISION,
            guards=(Guard(Operation.TOOL_CALL, no_rm),),
            around=(log.around("tool", Operation.TOOL_CALL),),
        )
    )
    rm = FunctionTool("rm", approval=True)
    ls = FunctionTool("ls", lambda _i, _c: "files")
    steps = [tool_step(call("rm", id="a"), call("ls", id="b")), text_step("ok")]
    async with open_rig(*steps, tools=[rm, ls], hooks=hooks) as rig:
        await rig.submit("go")
        await rig.idle()
        assert not rig.recorder.of_type(GateOpened)
        step = rig.recorder.of_type(StepDone)[0]
        texts = ["".join(b.text for b in m.blocks) for m in step.messages[1:]]  # type: ignore[union-attr]
        assert texts == ["error: tool call denied: rm is not allowed here", "files"]
        assert rm.calls == []
        assert sorted(r.outcome for r in log.results) == [
            Outcome.COMPLETED,
            Outcome.DENIED,
        ]
        assert rig.after_start()[-2:] == [("TurnDone", 1, "AI:ok"), ("LoopIdle",)]


async def test_tool_hooks_execution_failures_do_not_fail_semantic_tool_call() -> None:
    """Contract 9.6 #75 TestToolHooks_ExecutionFailuresDoNotFailSemanticToolCall."""
    log = Journal()

    def explode(_i: str, _c: object) -> str:
        raise RuntimeError("bad")

    hooks = compile_hooks(HookSet(around=(log.around("tool", Operation.TOOL_CALL),)))
    async with open_rig(
        tool_step(call("explode", id="a")),
        text_step("ok"),
        tools=[FunctionTool("explode", explode)],
        hooks=hooks,
    ) as rig:
        await rig.submit("go")
        await rig.idle()
        [result] = log.results
        assert result.outcome is Outcome.COMPLETED
        assert result.is_error is True


async def test_step_hooks_wrap_each_step() -> None:
    """Contract §5.2: the Step operation opens once per step and finishes once."""
    log = Journal()
    hooks = compile_hooks(HookSet(around=(log.around("step", Operation.STEP),)))
    async with open_rig(
        tool_step(call("t")), text_step("ok"), tools=[FunctionTool("t")], hooks=hooks
    ) as rig:
        await rig.submit("go")
        await rig.idle()
        assert log.lines == [
            "step.begin:step",
            "step.finish:completed",
            "step.begin:step",
            "step.finish:completed",
        ]
        assert len(rig.recorder.of_type(TurnStarted)) == 1
