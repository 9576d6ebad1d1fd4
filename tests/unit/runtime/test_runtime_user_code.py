"""The user's code: its failures are logged once with a traceback, never its text."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest

from turnstream.errors import ConfigError
from turnstream.events import FailureKind, ToolCallCompleted, TurnFailed
from turnstream.observability.logs import JsonFormatter, TextFormatter
from turnstream.runtime.agent import Agent
from turnstream.runtime.config import LoopConfig
from turnstream.runtime.hooks import Around, HookCall, HookRunner, HookSet, Operation
from turnstream.runtime.model_client import ModelEvent, ModelRequest
from turnstream.runtime.user_code import (
    check_model_client,
    check_tool,
    frames_only,
    log_user_error,
)
from turnstream.testing.model import ScriptedModel, call, text_step, tool_step
from turnstream.testing.rig import open_rig
from turnstream.testing.tools import FunctionTool, StaticAccessPolicy

SECRET = "the user's prompt: my card is 4111-1111"


def _errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.levelno >= logging.ERROR and r.name.startswith("turnstream")
    ]


def _rendered(record: logging.LogRecord) -> str:
    return JsonFormatter().format(record) + TextFormatter().format(record)


def _explode_with_secret() -> None:
    raise ValueError(SECRET)


class NamelessModel:
    """A model client whose author forgot the ``name`` property."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        raise AssertionError("never reached")


class ExplodingModel(ScriptedModel):
    """A client whose stream raises with conversation text in the message."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        _explode_with_secret()
        raise AssertionError("unreachable")


async def test_model_client_bug_is_logged_once_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A client without ``name`` fails the turn (turn_panic) and the log names
    the frame where it broke -- not only the exception type.
    """
    caplog.set_level(logging.ERROR)
    async with open_rig(model=NamelessModel()) as rig:  # type: ignore[arg-type]
        await rig.submit("a")
        await rig.idle()
        failed = rig.recorder.of_type(TurnFailed)[0]
    assert failed.error.kind is FailureKind.TURN_PANIC
    [record] = _errors(caplog)
    assert record.exc_type == "AttributeError"  # type: ignore[attr-defined]
    trace = record.exc  # type: ignore[attr-defined]
    assert trace.startswith("Traceback (most recent call last):")
    assert "step.py" in trace
    assert "spec.model.name" in trace  # the source line of the failing frame


async def test_model_client_exception_is_logged_without_its_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A client's exception is logged once at ERROR with its frames; its message
    (which may hold the prompt) appears in no rendering of the record.
    """
    caplog.set_level(logging.ERROR)
    async with open_rig(model=ExplodingModel([])) as rig:
        await rig.submit("a")
        await rig.idle()
        failed = rig.recorder.of_type(TurnFailed)[0]
    assert failed.error.kind is FailureKind.PROVIDER
    [record] = _errors(caplog)
    assert record.getMessage() == "model client raised"
    assert record.exc_type == "ValueError"  # type: ignore[attr-defined]
    assert "_explode_with_secret" in record.exc  # type: ignore[attr-defined]
    assert SECRET not in _rendered(record)
    assert SECRET not in caplog.text


async def test_tool_exception_is_logged_once_and_still_a_result(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A tool that raises: one ERROR record with the tool's frame; the model
    still sees the message as the error result (as before).
    """
    caplog.set_level(logging.ERROR)

    def broken(_input: str, _ctx: object) -> str:
        _explode_with_secret()
        return "unreachable"

    tool = FunctionTool("t", broken)  # type: ignore[arg-type]
    async with open_rig(
        tool_step(call("t", id="a")),
        text_step("x"),
        tools=[tool],
        access_policy=StaticAccessPolicy(),
    ) as rig:
        await rig.submit("go")
        await rig.idle()
        completed = rig.recorder.of_type(ToolCallCompleted)[0]
    assert completed.is_error
    assert SECRET in completed.result_preview
    [record] = _errors(caplog)
    assert (record.getMessage(), record.tool) == ("tool raised", "t")  # type: ignore[attr-defined]
    assert "broken" in record.exc  # type: ignore[attr-defined]
    assert SECRET not in _rendered(record)


async def test_access_policy_and_hook_exceptions_are_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A raising policy denies (access_error) and a raising hook is skipped;
    each failure is one ERROR record with a traceback.
    """
    caplog.set_level(logging.ERROR)

    class BrokenPolicy:
        async def decide(self, request: object) -> str:
            _explode_with_secret()
            return "approve"

    def begin(call: HookCall) -> None:
        _explode_with_secret()

    hooks = HookRunner(HookSet(around=(Around(Operation.TOOL_CALL, begin),)))
    async with open_rig(
        tool_step(call("t", id="a")),
        text_step("x"),
        tools=[FunctionTool("t")],
        hooks=hooks,
        access_policy=BrokenPolicy(),  # type: ignore[arg-type]
    ) as rig:
        await rig.submit("go")
        await rig.idle()
    records = _errors(caplog)
    assert [r.getMessage() for r in records] == [
        "hook begin failed",
        "access policy raised",
    ]
    for record in records:
        assert "_explode_with_secret" in record.exc  # type: ignore[attr-defined]
        assert SECRET not in _rendered(record)


def test_frames_only_follows_the_chain_and_withholds_every_message() -> None:
    """Cause and context are both shown, innermost first, messages withheld."""
    try:
        try:
            _explode_with_secret()
        except ValueError as exc:
            raise KeyError(SECRET) from exc
    except KeyError as outer:
        trace = frames_only(outer)
    assert SECRET not in trace
    assert trace.index("ValueError") < trace.index("KeyError")
    assert "direct cause" in trace
    assert trace.count("Traceback (most recent call last):") == 2


def test_log_user_error_writes_type_and_frames(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The helper logs at ERROR with ``exc_type``, ``exc`` and the ids given."""
    caplog.set_level(logging.ERROR)
    try:
        _explode_with_secret()
    except ValueError as exc:
        log_user_error(logging.getLogger("turnstream.test"), "boom", exc, tool="t")
    [record] = _errors(caplog)
    assert (record.exc_type, record.tool) == ("ValueError", "t")  # type: ignore[attr-defined]
    assert SECRET not in _rendered(record)


class _NoRun:
    @property
    def spec(self) -> object:
        return None


@pytest.mark.parametrize(
    ("check", "value", "named"),
    [
        pytest.param(check_model_client, NamelessModel(), "'name'", id="client-name"),
        pytest.param(check_model_client, object(), "'name', 'stream'", id="client"),
        pytest.param(check_tool, _NoRun(), "'run'", id="tool-run"),
        pytest.param(check_tool, FunctionTool("ok"), None, id="tool-ok"),
    ],
)
def test_interface_checks_name_the_missing_member(
    check: object, value: object, named: str | None
) -> None:
    """A client or tool lacking a member is refused naming it; a whole one passes."""
    assert callable(check)
    if named is None:
        check(value)
        return
    with pytest.raises(ConfigError, match=named):
        check(value)


def test_agent_with_a_nameless_client_is_refused() -> None:
    """``Agent(client=...)`` refuses a client that is not a ModelClient."""
    with pytest.raises(ConfigError, match="has no 'name'") as info:
        Agent(name="a", model="m", client=NamelessModel())  # type: ignore[arg-type]
    assert info.value.setting == "agent.client"


def test_loop_config_refuses_a_tool_without_run() -> None:
    """A tool without ``run`` is a ConfigError at configuration, not a turn bug."""
    with pytest.raises(ConfigError, match="has no 'run'"):
        LoopConfig(model="m", tools=(_NoRun(),))  # type: ignore[arg-type]
