"""One step's tool batch (contract §6.2).

Owns :func:`run_batch` and the model-visible failure texts. Order of work:

1. per call, in call order: mint a ``ToolExecutionId``, start the ToolCall
   hook, then the pre-execution checks (hook denial, id failure, unknown tool,
   invalid JSON);
2. access, sequentially in call order (each call's idempotency key names it
   by step, tool and its ordinal among the step's calls of that tool). A
   resumed turn's first step reuses the decisions committed before the crash
   instead: a denied call stays denied; an approved call may have run -- an
   idempotent tool's runs again (same key), any other's is not run and the
   model gets an ``outcome unknown`` error result. Otherwise: no policy (``None`` or
   :class:`NoAccessPolicy`) denies every call (``access_gate_missing``); else
   the policy decides first and its ``deny`` is final (``access_denied``, no
   gate, even for an approval tool); ``ask`` -- or ``approve`` of an approval
   tool that requires it -- opens a gate and waits; every call decided
   without a prompt gets a durable ``PermissionDecided``;
3. every ``ToolCallStarted`` (all calls, failed or not, in call order) before
   any execution;
4. pre-execution failures complete at once, then sequential tools one by one,
   then the rest with at most ``max_parallel`` at a time; each completion
   emits ``ToolCallCompleted`` (completion order);
5. a tool failure never aborts the batch; results come back in call order.

Imports ports, hooks, the handshake and value types; never an adapter.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Literal, TypeGuard
from uuid import UUID

from turnstream.content import TextBlock, ToolResultMessage, text_of
from turnstream.events import (
    PermissionDecided,
    ToolCallCompleted,
    ToolCallStarted,
    ToolTiming,
)
from turnstream.ids import StepId, ToolExecutionId
from turnstream.runtime.accumulate import ToolCall
from turnstream.runtime.effects import EffectStage, StagedRecord
from turnstream.runtime.gates import APPROVE, DENY
from turnstream.runtime.handshake import ApprovalRequest, TurnLink, TurnSpec, step_call
from turnstream.runtime.hooks import Operation, Outcome, Started
from turnstream.runtime.ports import (
    AccessRequest,
    ApprovalTool,
    AuditableTool,
    IdempotentTool,
    NoAccessPolicy,
    SequentialTool,
    Tool,
    ToolContext,
)
from turnstream.runtime.user_code import log_user_error

__all__ = ["OUTCOME_UNKNOWN", "preview", "run_batch", "shape_result", "summarize"]

OUTCOME_UNKNOWN = (
    "error: outcome unknown [restart]: this call was approved before the agent "
    "restarted and may have run; it was not run again"
)
"""The result a resumed step gives a non-idempotent call approved before a crash."""

_log = logging.getLogger(__name__)
_ZERO_ID = ToolExecutionId(UUID(int=0))
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_MAX_SUMMARY = 1024
_MAX_PREVIEW_BYTES = 2048
_MAX_PREVIEW_LINES = 20
_MAX_ERROR_TEXT = 1024
_PREVIEW_MARKER = "… [truncated]"
_NOTICE_ROOM = 96  # bytes kept free for the truncation notice


def _clip_bytes(text: str, limit: int) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[:limit].decode(errors="ignore")


# The method each optional tool trait is known by.
_TRAIT_METHODS: dict[type, str] = {
    SequentialTool: "sequential",
    IdempotentTool: "idempotent",
    ApprovalTool: "requires_approval",
    AuditableTool: "audit_summary",
}
_CLASS_TRAITS: dict[tuple[type, type], bool | None] = {}


def has_trait(tool: object, trait: type) -> bool:
    """``isinstance(tool, trait)`` for a tool trait, answered per class once.

    A runtime-checkable protocol's isinstance looks every member up again on
    each call (slow before Python 3.12), and it runs several times per tool
    call. The class decides it unless the class has a ``__getattr__`` (then
    isinstance asks every time) or the instance holds the method itself.
    """
    if tool is None:
        return False
    cls = type(tool)
    method = _TRAIT_METHODS[trait]
    static = _CLASS_TRAITS.get((cls, trait), ...)
    if static is ...:
        static = _CLASS_TRAITS[(cls, trait)] = (
            None
            if hasattr(cls, "__getattr__")
            else callable(getattr(cls, method, None))
        )
    if static is None or (not static and method in getattr(tool, "__dict__", ())):
        return isinstance(tool, trait)
    return static


def _auditable(tool: object) -> TypeGuard[AuditableTool]:
    return has_trait(tool, AuditableTool)


def _sequential(tool: object) -> TypeGuard[SequentialTool]:
    return has_trait(tool, SequentialTool)


def _approval(tool: object) -> TypeGuard[ApprovalTool]:
    return has_trait(tool, ApprovalTool)


def _idempotent(tool: object) -> TypeGuard[IdempotentTool]:
    return has_trait(tool, IdempotentTool)


def summarize(tool: Tool | None, name: str, input_json: str) -> str:
    """A redacted, bounded one-line summary of a call (the name by default)."""
    summary = name
    if _auditable(tool):
        try:
            summary = tool.audit_summary(input_json) or name
        except Exception:  # noqa: BLE001 - a summary is cosmetic; it never fails a call
            summary = name
    return _clip_bytes(_CONTROL.sub(" ", summary), _MAX_SUMMARY)


def preview(text: str) -> str:
    """A result preview: at most 20 lines and 2 KiB, with a marker if cut."""
    lines = text.split("\n")
    cut = "\n".join(lines[:_MAX_PREVIEW_LINES])
    cut = _clip_bytes(cut, _MAX_PREVIEW_BYTES)
    return cut if cut == text else cut + _PREVIEW_MARKER


def shape_result(text: str, limit: int) -> str:
    """Shorten ``text`` to about ``limit`` bytes: head, notice, tail (UTF-8 safe)."""
    data = text.encode()
    if not limit or len(data) <= limit:
        return text
    keep = max(limit - _NOTICE_ROOM, 0)
    head = data[: keep // 2].decode(errors="ignore")
    tail = data[len(data) - (keep - keep // 2) :].decode(errors="ignore")
    omitted = len(data) - len(head.encode()) - len(tail.encode())
    notice = f"\n[tool output truncated: omitted {omitted} of {len(data)} bytes]\n"
    return head + notice + tail


@dataclass(slots=True)
class _Call:
    """One call's progress through the batch (owned by the turn task)."""

    call: ToolCall
    index: int
    execution_id: ToolExecutionId
    tool: Tool | None
    summary: str
    hook: Started
    text: str | None = None
    is_error: bool = False
    outcome: Outcome = Outcome.COMPLETED
    key: str = ""
    timing: ToolTiming | None = None
    effects: tuple[StagedRecord, ...] = ()

    def fail(self, text: str, outcome: Outcome = Outcome.COMPLETED) -> None:
        self.text, self.is_error, self.outcome = text, True, outcome

    @property
    def runnable(self) -> bool:
        return self.text is None and self.tool is not None


async def run_batch(
    spec: TurnSpec,
    link: TurnLink,
    calls: Sequence[ToolCall],
    *,
    step_id: StepId,
    step_index: int,
) -> tuple[
    tuple[ToolResultMessage, ...], tuple[ToolTiming, ...], tuple[StagedRecord, ...]
]:
    """Run one step's calls.

    Returns:
        One result message per call, in call order, the timing of each call
        that ran (in call order), and the records the calls that returned
        staged (in call order, each call's in staging order).
    """
    states: list[_Call] = []
    try:
        for index, call in enumerate(calls):
            states.append(await _prepare(spec, call, index, step_id, step_index))
        earlier = _decided_before(spec, step_index)
        ordinals: dict[str, int] = {}
        for state in states:
            if not state.runnable:
                continue
            name = state.call.name
            nth = ordinals[name] = ordinals.get(name, -1) + 1
            state.key = f"{spec.turn_id}:{step_index}:{name}:{nth}"
            before = earlier.get(name, ())
            if nth < len(before):
                _decided_earlier(state, before[nth])
            else:
                await _resolve_access(spec, link, state, step_id)
        for state in states:
            await link.publish(_started(spec, state, step_id))
        for state in states:
            if not state.runnable:
                await _complete(spec, link, state, step_id)
        runnable = [s for s in states if s.runnable]
        serial = [s for s in runnable if _is_sequential(s.tool)]
        parallel = [s for s in runnable if not _is_sequential(s.tool)]
        for state in serial:
            await _execute(spec, link, state, step_id)
        limit = asyncio.Semaphore(spec.config.limits.max_parallel)

        async def bounded(state: _Call) -> None:
            async with limit:
                await _execute(spec, link, state, step_id)

        async with asyncio.TaskGroup() as group:
            for state in parallel:
                group.create_task(bounded(state))
    finally:
        # On cancellation the calls still open finish as canceled (once only).
        for state in states:
            state.hook.finish(Outcome.CANCELED)
    results = tuple(_result_message(spec, s) for s in states)
    timings = tuple(s.timing for s in states if s.timing is not None)
    return results, timings, tuple(r for s in states for r in s.effects)


def _decided_before(spec: TurnSpec, step_index: int) -> dict[str, tuple[str, ...]]:
    """A resumed step's decisions from before the crash: effects per tool."""
    if step_index != spec.first_step or not spec.decided:
        return {}
    effects: dict[str, list[str]] = {}
    for name, effect in spec.decided:
        effects.setdefault(name, []).append(effect)
    return {name: tuple(e) for name, e in effects.items()}


def _decided_earlier(state: _Call, effect: str) -> None:
    """Reuse a decision committed before a crash (nothing new is committed).

    An approved call may have run: its tool runs it again only if it is
    idempotent (with the same key); else the model is told the outcome is
    unknown, once -- as this call's result.
    """
    if effect != APPROVE:
        state.fail("error: permission denied: decided before a restart")
    elif not (_idempotent(state.tool) and state.tool.idempotent()):
        _log.warning(
            "tool call outcome unknown after a restart; not run again",
            extra={"tool": state.call.name},
        )
        state.fail(OUTCOME_UNKNOWN)


def _is_sequential(tool: Tool | None) -> bool:
    return _sequential(tool) and tool.sequential()


async def _prepare(
    spec: TurnSpec, call: ToolCall, index: int, step_id: StepId, step_index: int
) -> _Call:
    """Mint the id, start the hook, run the pre-execution checks in order."""
    try:
        execution_id: ToolExecutionId | None = ToolExecutionId(spec.factory.new_id())
    except Exception:  # noqa: BLE001 - fail secure: the call fails, no gate opens
        execution_id = None
    tool = spec.config.find_tool(call.name)
    summary = summarize(tool, call.name, call.input_json)
    hook = await spec.hooks.start(
        replace(
            step_call(spec, Operation.TOOL_CALL, step_id, step_index),
            tool_name=call.name,
            tool_use_id=call.tool_use_id,
            tool_execution_id=execution_id,
            summary=summary,
        )
    )
    state = _Call(call, index, execution_id or _ZERO_ID, tool, summary, hook)
    if hook.blocked is not None:
        if hook.blocked.denied:
            text = f"error: tool call denied: {hook.blocked.reason}"
            state.fail(text, Outcome.DENIED)
        else:
            state.fail("error: internal: tool call blocked by hook", Outcome.FAILED)
    elif execution_id is None:
        state.fail("error: internal: could not generate call id")
    elif tool is None:
        state.fail(f"error: unknown tool: {_clip_bytes(call.name, _MAX_SUMMARY)}")
    elif not _valid_json(call.input_json):
        state.fail("error: invalid tool arguments (not valid JSON)")
    return state


def _valid_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


async def _resolve_access(
    spec: TurnSpec, link: TurnLink, state: _Call, step_id: StepId
) -> None:
    """Decide whether a runnable call may run: policy first, then a gate.

    No policy denies every call (``access_gate_missing``, contract §6.1: a nil
    access gate denies). With one, it decides first; its ``deny`` is final --
    an approval tool's gate opens only when the policy did not deny.
    """
    policy = spec.access_policy
    if policy is None or isinstance(policy, NoAccessPolicy):
        await _decided(
            spec, link, state, step_id, effect="deny", reason="access_gate_missing"
        )
        state.fail("error: permission denied [unavailable]: no access policy")
        return
    request = AccessRequest(
        tool_name=state.call.name,
        summary=state.summary,
        tool_execution_id=state.execution_id,
    )
    reason = "access_evaluated"
    try:
        async with asyncio.timeout(spec.config.tool_timeout):
            effect = await policy.decide(request)
    except TimeoutError:
        _log.warning("access policy timed out", extra={"tool": state.call.name})
        effect, reason = "deny", "access_error"
    except Exception as exc:  # noqa: BLE001 - fail closed: an unanswerable policy denies
        log_user_error(_log, "access policy raised", exc, tool=state.call.name)
        effect, reason = "deny", "access_error"
    tool = state.tool
    ask = effect == "ask" or (
        effect == "approve"
        and _approval(tool)
        and tool.requires_approval(state.call.input_json)
    )
    if ask:
        answer = await link.request_approval(
            ApprovalRequest(
                step_id=step_id,
                tool_execution_id=state.execution_id,
                tool_name=state.call.name,
                summary=state.summary,
            )
        )
        if answer == DENY:
            state.fail("error: permission denied: the request was denied")
        elif answer != APPROVE:
            state.fail("error: permission denied [unavailable]: no approval gate")
        return
    if effect == "approve":
        await _decided(spec, link, state, step_id, effect="approve", reason=reason)
        return
    if reason == "access_evaluated":
        reason = "access_denied"
    await _decided(spec, link, state, step_id, effect="deny", reason=reason)
    state.fail("error: permission denied [not authorized]: denied by policy")


async def _decided(
    spec: TurnSpec,
    link: TurnLink,
    state: _Call,
    step_id: StepId,
    *,
    effect: Literal["approve", "deny"],
    reason: str,
) -> None:
    """Commit the durable ``PermissionDecided`` of a call decided without a prompt."""
    decided = PermissionDecided(
        header=spec.factory.header(turn_id=spec.turn_id, step_id=step_id),
        tool_execution_id=state.execution_id,
        effect=effect,
        reason=reason,
        subject=state.call.name,
    )
    await link.commit([decided])


def _started(spec: TurnSpec, state: _Call, step_id: StepId) -> ToolCallStarted:
    return ToolCallStarted(
        header=spec.factory.header(turn_id=spec.turn_id, step_id=step_id),
        tool_execution_id=state.execution_id,
        tool_use_id=state.call.tool_use_id,
        tool_name=state.call.name,
        summary=state.summary,
    )


async def _execute(
    spec: TurnSpec, link: TurnLink, state: _Call, step_id: StepId
) -> None:
    """Run one approved call; any failure becomes a model-visible result."""
    tool = state.tool
    if tool is None:  # unreachable: only runnable calls get here
        return
    stage = EffectStage(spec.check_effect_topic)
    ctx = ToolContext(
        session_id=spec.session_id,
        loop_id=spec.loop_id,
        turn_id=spec.turn_id,
        step_id=step_id,
        tool_execution_id=state.execution_id,
        tool_use_id=state.call.tool_use_id,
        idempotency_key=state.key,
        effects=stage,
    )
    clock = asyncio.get_running_loop().time
    started = clock()
    started_at = spec.factory.now()
    returned = False
    try:
        async with asyncio.timeout(spec.config.tool_timeout):
            output = await tool.run(state.call.input_json, ctx)
        returned = True
    except TimeoutError:
        # One line per call an operator should see; never its input or output.
        _log.warning(
            "tool timed out",
            extra={
                "tool": state.call.name,
                "loop_id": str(spec.loop_id),
                "turn_id": str(spec.turn_id),
                "timeout_s": spec.config.tool_timeout,
            },
        )
        state.fail("error: tool timed out")
    except Exception as exc:  # noqa: BLE001 - a tool failure is a result, not a turn failure
        log_user_error(_log, "tool raised", exc, tool=state.call.name)
        detail = str(exc) or type(exc).__name__
        state.fail(f"error: {_clip_bytes(detail, _MAX_ERROR_TEXT)}")
    else:
        text = text_of(output.content)
        if not text:
            state.fail("error: empty result")
        else:
            state.text, state.is_error = text, output.is_error
        if state.is_error:
            _log.info(
                "tool returned an error result",
                extra={
                    "tool": state.call.name,
                    "loop_id": str(spec.loop_id),
                    "turn_id": str(spec.turn_id),
                    "duration_ms": round((clock() - started) * 1000, 1),
                },
            )
    finally:
        # Only a call that returned keeps its records: one that raised, timed
        # out or was cancelled took no effect through its stage.
        state.effects = stage.close(keep=returned)
    # On the injected clock, so a test's fixed clock gives fixed timings.
    ran = spec.factory.now() - started_at
    state.timing = ToolTiming(
        tool_use_id=state.call.tool_use_id,
        tool_name=state.call.name,
        started_at=started_at,
        duration_us=max(ran // timedelta(microseconds=1), 0),
        is_error=state.is_error,
    )
    await _complete(spec, link, state, step_id)


async def _complete(
    spec: TurnSpec, link: TurnLink, state: _Call, step_id: StepId
) -> None:
    text = state.text or ""
    await link.publish(
        ToolCallCompleted(
            header=spec.factory.header(turn_id=spec.turn_id, step_id=step_id),
            tool_execution_id=state.execution_id,
            tool_use_id=state.call.tool_use_id,
            is_error=state.is_error,
            result_preview=preview(text),
        )
    )
    state.hook.finish(state.outcome, is_error=state.is_error)


def _result_message(spec: TurnSpec, state: _Call) -> ToolResultMessage:
    text = shape_result(state.text or "", spec.config.limits.max_result_bytes)
    return ToolResultMessage(
        tool_use_id=state.call.tool_use_id,
        is_error=state.is_error,
        blocks=(TextBlock(text=text),),
    )
