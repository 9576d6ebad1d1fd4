"""Operation hooks: observers (Around) and policy guards (contract §5).

Owns the hook declaration (:class:`HookSet`, :class:`Guard`, :class:`Around`),
its validation and compilation (:func:`compile_hooks` -> :class:`HookRunner`),
the call/result values handed to callbacks, :class:`Denial` and :func:`deny`.

Semantics (contract §5.3):

* matching ``begin`` callbacks run in registration order; a failing begin is
  logged and skipped (observers fail open);
* then matching guards, in registration order; the first that raises stops.
  A :class:`Denial` is an intentional policy decision; any other exception,
  or a guard that overruns ``guard_timeout``, blocks the operation (fail
  closed) without surfacing the guard's text;
* :meth:`Started.finish` runs the finish callbacks in reverse order, exactly
  once, whatever happened; a failing finish is logged and never changes the
  operation's outcome (a hook never replaces a terminal event).

A :class:`Tracer` (:meth:`HookRunner.traced`) sees every operation's begin
and finish like an Around hook, but is not one: it never makes an operation
"observed" (the actor's commit batching stays as without hooks), and without
one the hook path pays a single ``is None`` check.

Operations: ``turn`` (guardable), ``step``, ``inference`` (guardable) and
``tool_call`` (guardable). Imports only value types, the model port and errors.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Protocol
from uuid import UUID

from turnstream.content import Usage, UserMessage
from turnstream.errors import ConfigError
from turnstream.runtime.model_client import ModelRequest
from turnstream.runtime.user_code import log_user_error

__all__ = [
    "Around",
    "BeginFn",
    "Blocked",
    "Denial",
    "FinishFn",
    "Guard",
    "GuardFn",
    "HookCall",
    "HookResult",
    "HookRunner",
    "HookSet",
    "Operation",
    "Outcome",
    "Started",
    "Tracer",
    "compile_hooks",
    "deny",
]

_log = logging.getLogger(__name__)

_CODE = re.compile(r"[a-z][a-z0-9_.\-]{0,63}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_MAX_REASON = 1024
_MAX_REVISION = 128


class Operation(StrEnum):
    """An operation hooks can observe and (some) guard."""

    TURN = "turn"
    STEP = "step"
    INFERENCE = "inference"
    TOOL_CALL = "tool_call"


GUARDABLE = frozenset({Operation.TURN, Operation.INFERENCE, Operation.TOOL_CALL})


class Outcome(StrEnum):
    """How an operation ended, as its finish callbacks see it."""

    COMPLETED = "completed"
    DENIED = "denied"
    FAILED = "failed"
    CANCELED = "canceled"


@dataclass(frozen=True, slots=True, kw_only=True)
class HookCall:
    """What a callback sees of an operation (a snapshot; never raw tool input).

    Only the fields of the call's operation are set: ``input`` for a turn,
    ``step_index`` for a step, ``request`` for an inference, the ``tool_*``
    fields and ``summary`` for a tool call. ``command_id`` is the submit a
    turn answers.
    """

    operation: Operation
    started_at: datetime
    session_id: UUID
    loop_id: UUID
    turn_id: UUID | None = None
    step_id: UUID | None = None
    turn_index: int = 0
    step_index: int = 0
    input: UserMessage | None = None
    request: ModelRequest | None = None
    tool_name: str = ""
    tool_use_id: str = ""
    tool_execution_id: UUID | None = None
    summary: str = ""
    command_id: UUID | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class HookResult:
    """How an operation ended; passed to every finish callback.

    ``usage`` is an inference's token usage (a completed turn's total).
    """

    call: HookCall
    outcome: Outcome
    error: BaseException | None = None
    is_error: bool = False
    usage: Usage | None = None


class Denial(Exception):
    """A guard's intentional refusal, with a machine code and a human reason.

    Build it with :func:`deny` or directly; either way it is validated, so a
    malformed denial raises :class:`ConfigError` inside the guard, which then
    counts as a guard failure (fail closed).
    """

    def __init__(self, code: str, reason: str) -> None:
        if not _CODE.fullmatch(code):
            raise ConfigError("denial.code", "1-64 chars of [a-z0-9_.-], from a-z")
        if not reason.strip() or len(reason.encode()) > _MAX_REASON:
            raise ConfigError("denial.reason", "non-blank, at most 1024 bytes")
        if _CONTROL.search(reason):
            raise ConfigError("denial.reason", "no control characters")
        self.code = code
        self.reason = reason
        super().__init__(f"denied ({code})")


def deny(code: str, reason: str) -> Denial:
    """Build a validated :class:`Denial` (raise it from a guard)."""
    return Denial(code, reason)


GuardFn = Callable[[HookCall], Awaitable[None]]
"""A guard: return to allow, raise :class:`Denial` to deny."""
FinishFn = Callable[[HookResult], None]
"""Called once when the operation ends."""
BeginFn = Callable[[HookCall], FinishFn | None]
"""Called when the operation starts; may return its finish callback."""


class Tracer(Protocol):
    """Records operations as spans (the port ``turnstream.tracing`` implements).

    ``begin`` returns the span's end (called once, with the result), or
    ``None`` when the operation is not sampled. It must not raise.
    """

    def begin(self, call: HookCall) -> FinishFn | None:
        """Start the span of ``call``."""
        ...


@dataclass(frozen=True, slots=True)
class Guard:
    """A policy check on a guardable operation."""

    operation: Operation
    check: GuardFn


@dataclass(frozen=True, slots=True)
class Around:
    """An observer of an operation's begin and finish."""

    operation: Operation
    begin: BeginFn


@dataclass(frozen=True, slots=True, kw_only=True)
class HookSet:
    """A declared set of hooks; compile it once with :func:`compile_hooks`.

    Attributes:
        policy_revision: required (non-blank, at most 128 bytes, no control
            characters) iff there is at least one guard; forbidden otherwise.
        guard_timeout: seconds a guard may take before it counts as failed.
    """

    policy_revision: str = ""
    guards: tuple[Guard, ...] = ()
    around: tuple[Around, ...] = ()
    guard_timeout: float = 5.0


@dataclass(frozen=True, slots=True)
class Blocked:
    """A guard verdict: ``denied`` (with the denial's reason) or a failure."""

    denied: bool
    reason: str = ""


@dataclass(slots=True)
class Started:
    """A started operation: its verdict and its once-only finish."""

    call: HookCall
    blocked: Blocked | None
    _finishers: list[FinishFn] = field(default_factory=list)
    _done: bool = False
    _span: FinishFn | None = None

    @property
    def observed(self) -> bool:
        """Whether a finish callback waits (it may look at the journal)."""
        return bool(self._finishers)

    def finish(
        self,
        outcome: Outcome,
        error: BaseException | None = None,
        *,
        is_error: bool = False,
        usage: Usage | None = None,
    ) -> None:
        """Run the finish callbacks in reverse order; later calls do nothing."""
        if self._done:
            return
        self._done = True
        if not self._finishers and self._span is None:
            return
        result = HookResult(
            call=self.call,
            outcome=outcome,
            error=error,
            is_error=is_error,
            usage=usage,
        )
        if self._span is not None:
            _end_span(self._span, result)
        for finisher in reversed(self._finishers):
            try:
                finisher(result)
            except Exception as exc:  # noqa: BLE001 - observers fail open; the outcome stands
                log_user_error(_log, "hook finish failed", exc, op=self.call.operation)


def _end_span(end: FinishFn, result: HookResult) -> None:
    try:
        end(result)
    except Exception as exc:  # noqa: BLE001 - tracing never changes an outcome
        log_user_error(_log, "span end failed", exc, op=result.call.operation)


class HookRunner:
    """An immutable, compiled hook set. ``HookRunner()`` is the empty runner."""

    def __init__(
        self, hook_set: HookSet | None = None, *, tracer: Tracer | None = None
    ) -> None:
        self._set = hook_set = hook_set or HookSet()
        self._guards = hook_set.guards
        self._around = hook_set.around
        self._timeout = hook_set.guard_timeout
        self.policy_revision = hook_set.policy_revision
        self.tracer = tracer

    def traced(self, tracer: Tracer) -> HookRunner:
        """This hook set with ``tracer`` recording every operation."""
        return HookRunner(self._set, tracer=tracer)

    def handles(self, operation: Operation) -> bool:
        """Whether any callback watches ``operation`` (the cheap path)."""
        return any(g.operation is operation for g in self._guards) or any(
            a.operation is operation for a in self._around
        )

    async def start(self, call: HookCall) -> Started:
        """Run begins then guards for ``call``; the caller must ``finish`` it."""
        started = Started(call=call, blocked=None)
        if self.tracer is not None:
            try:
                started._span = self.tracer.begin(call)
            except Exception as exc:  # noqa: BLE001 - tracing never blocks an operation
                log_user_error(_log, "span begin failed", exc, op=call.operation)
        for around in self._around:
            if around.operation is not call.operation:
                continue
            try:
                finisher = around.begin(call)
            except Exception as exc:  # noqa: BLE001 - observers fail open
                log_user_error(_log, "hook begin failed", exc, op=call.operation)
                continue
            if finisher is not None:
                started._finishers.append(finisher)
        for guard in self._guards:
            if guard.operation is not call.operation:
                continue
            started.blocked = await self._check(guard, call)
            if started.blocked is not None:
                break
        return started

    async def _check(self, guard: Guard, call: HookCall) -> Blocked | None:
        try:
            async with asyncio.timeout(self._timeout):
                await guard.check(call)
        except Denial as denial:
            return Blocked(denied=True, reason=denial.reason)
        except TimeoutError:
            _log.warning("hook guard timed out", extra={"op": call.operation})
            return Blocked(denied=False)
        except Exception as exc:  # noqa: BLE001 - fail closed; the guard's text is never surfaced
            log_user_error(_log, "hook guard failed", exc, op=call.operation)
            return Blocked(denied=False)
        return None


def compile_hooks(hook_set: HookSet) -> HookRunner:
    """Validate ``hook_set`` and compile it.

    Raises:
        ConfigError: a guard on an operation that cannot be guarded, a
            missing/unexpected/invalid policy revision, or a bad timeout.
    """
    for index, guard in enumerate(hook_set.guards):
        if guard.operation not in GUARDABLE:
            raise ConfigError(f"guards[{index}]", "operation_not_guardable")
    revision = hook_set.policy_revision
    if hook_set.guards:
        if not revision.strip():
            raise ConfigError("policy_revision", "missing_policy_revision")
        if len(revision.encode()) > _MAX_REVISION or _CONTROL.search(revision):
            raise ConfigError("policy_revision", "invalid_policy_revision")
    elif revision:
        raise ConfigError("policy_revision", "unexpected_policy_revision")
    if not hook_set.guard_timeout > 0:
        raise ConfigError("guard_timeout", "must be positive")
    return HookRunner(hook_set)
