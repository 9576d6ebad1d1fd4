"""Loop configuration: what one loop runs with, validated once.

Owns :class:`ToolLimits` and :class:`LoopConfig` (frozen dataclasses: they
hold tool objects, which are not values). Invalid settings raise
:class:`turnstream.errors.ConfigError` at construction. A running turn keeps
the configuration it started with. Imports only ports, the model port and
value types; never an adapter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from turnstream.errors import ConfigError
from turnstream.runtime.model_client import ToolSpec
from turnstream.runtime.output_schema import check_schema
from turnstream.runtime.ports import Tool
from turnstream.runtime.user_code import check_tool

__all__ = [
    "DEFAULT_COMMIT_TIMEOUT",
    "DEFAULT_DRAIN_TIMEOUT",
    "DEFAULT_INBOX_CAPACITY",
    "DEFAULT_MAX_RESUMES",
    "DEFAULT_STEP_TIMEOUT",
    "DEFAULT_TOOL_TIMEOUT",
    "DEFAULT_TRUNCATED_COMMIT_GRACE",
    "ON_RESTORE_MODES",
    "LoopConfig",
    "OnRestore",
    "RestorePolicy",
    "ToolLimits",
]

DEFAULT_INBOX_CAPACITY = 64
"""Queued inputs a loop holds behind a running turn (contract §4.1)."""
DEFAULT_DRAIN_TIMEOUT = 5.0
"""Seconds a cancelled turn gets to end before the actor detaches it (§4.8)."""
DEFAULT_STEP_TIMEOUT = 300.0
"""Seconds one model call (the whole stream of a step) may take."""
DEFAULT_TOOL_TIMEOUT = 600.0
"""Seconds one tool call may run."""
DEFAULT_COMMIT_TIMEOUT = 10.0
"""Seconds one journal commit may take."""
DEFAULT_TRUNCATED_COMMIT_GRACE = 0.25
"""Seconds the safe prefix of an interrupted step may take to commit (§4.5)."""

DEFAULT_MAX_RESUMES = 3
"""Times one turn may be resumed after a crash before it fails (a crash loop)."""

OnRestore = Literal["interrupt", "continue"]
ON_RESTORE_MODES: tuple[OnRestore, ...] = ("interrupt", "continue")

_MIN_RESULT_BYTES = 256


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(name, "must be positive")


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolLimits:
    """Per-turn tool limits (contract §6.1 defaults 25 / 100 / 8).

    Attributes:
        max_tool_steps: tool-using steps allowed in one turn.
        max_tool_calls: tool calls allowed in one turn.
        max_parallel: calls of one step that run at the same time.
        max_result_bytes: a tool result longer than this is shortened
            (head + notice + tail); 0 means unbounded, else at least 256.
    """

    max_tool_steps: int = 25
    max_tool_calls: int = 100
    max_parallel: int = 8
    max_result_bytes: int = 0

    def __post_init__(self) -> None:
        for name in ("max_tool_steps", "max_tool_calls", "max_parallel"):
            if getattr(self, name) < 1:
                raise ConfigError(name, "must be at least 1")
        if self.max_result_bytes and self.max_result_bytes < _MIN_RESULT_BYTES:
            raise ConfigError("max_result_bytes", "must be 0 or at least 256")


@dataclass(frozen=True, slots=True, kw_only=True)
class RestorePolicy:
    """What a new owner does with a turn a crash left open.

    Attributes:
        on_restore: ``interrupt`` ends it ``TurnInterrupted`` (the contract's
            restore rule); ``continue`` resumes it after its last committed
            ``StepDone`` (``TurnResumed``).
        max_resumes: a turn already resumed this many times ends
            ``TurnFailed{resume_limit}`` instead (a crash loop).
    """

    on_restore: OnRestore = "interrupt"
    max_resumes: int = DEFAULT_MAX_RESUMES

    def __post_init__(self) -> None:
        if self.on_restore not in ON_RESTORE_MODES:
            raise ConfigError("on_restore", "must be 'interrupt' or 'continue'")
        if self.max_resumes < 0:
            raise ConfigError("max_resumes", "must be at least 0")

    @property
    def continues(self) -> bool:
        """An open turn is resumed, not interrupted."""
        return self.on_restore == "continue"


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class LoopConfig:
    """Everything one loop runs with.

    Attributes:
        model: the model name put in every request.
        system_prompt: sent with every request; never part of history.
        tools: the tools offered to the model (names must be unique).
        limits: tool limits per turn.
        output_schema: if set, the final answer must be JSON matching it
            (see :mod:`turnstream.runtime.output_schema` for the supported subset).
        inbox_capacity: queued inputs allowed behind a running turn.
        drain_timeout: seconds a cancelled turn may take to end.
        step_timeout: seconds each step's model call may take.
        tool_timeout: seconds each tool call may take.
        commit_timeout: seconds each journal commit may take.
        truncated_commit_grace: seconds the interrupted safe prefix may take.
        max_tokens: optional output cap put in every request.
        agent_name: stamped on LoopStarted and LoopIdle: the agent the loop
            is bound to.
        display_name: a label carried by LoopStarted.
        models: further models a submit may choose for its turn (``model``
            is always allowed).
        reopen_after_shutdown: a submit after a client's ``Shutdown``
            reopens the loop (default: refused, ``shutting_down``).
        hosted: ``False`` when this process does not host the loop's agent:
            every input is refused ``unknown_agent`` and nothing else is
            written (a new loop is not announced, so not bound).
        restore: what a new owner does with a turn a crash left open.
    """

    model: str
    system_prompt: str = ""
    tools: tuple[Tool, ...] = ()
    limits: ToolLimits = field(default_factory=ToolLimits)
    output_schema: Mapping[str, object] | None = None
    inbox_capacity: int = DEFAULT_INBOX_CAPACITY
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT
    step_timeout: float = DEFAULT_STEP_TIMEOUT
    tool_timeout: float = DEFAULT_TOOL_TIMEOUT
    commit_timeout: float = DEFAULT_COMMIT_TIMEOUT
    truncated_commit_grace: float = DEFAULT_TRUNCATED_COMMIT_GRACE
    max_tokens: int | None = None
    agent_name: str = ""
    display_name: str = ""
    models: tuple[str, ...] = ()
    reopen_after_shutdown: bool = False
    hosted: bool = True
    restore: RestorePolicy = field(default_factory=RestorePolicy)

    def __post_init__(self) -> None:
        if not self.model.strip():
            raise ConfigError("model", "must not be blank")
        if self.inbox_capacity < 1:
            raise ConfigError("inbox_capacity", "must be at least 1")
        for name in (
            "drain_timeout",
            "step_timeout",
            "tool_timeout",
            "commit_timeout",
            "truncated_commit_grace",
        ):
            _positive(name, getattr(self, name))
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ConfigError("max_tokens", "must be at least 1")
        for index, tool in enumerate(self.tools):
            check_tool(tool, f"tools[{index}]")
        names = [t.spec.name for t in self.tools]
        if len(set(names)) != len(names):
            raise ConfigError("tools", "tool names must be unique")
        if any(not n.strip() for n in names):
            raise ConfigError("tools", "tool names must not be blank")
        if any(not m.strip() for m in self.models):
            raise ConfigError("models", "model names must not be blank")
        if self.output_schema is not None:
            try:
                check_schema(self.output_schema)
            except ValueError as exc:
                raise ConfigError("output_schema", str(exc)) from None

    def allowed_models(self) -> tuple[str, ...]:
        """The models a submit may choose: the default one first."""
        return tuple(dict.fromkeys((self.model, *self.models)))

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """The tool list of every request, in configuration order."""
        return tuple(t.spec for t in self.tools)

    def find_tool(self, name: str) -> Tool | None:
        """The tool called ``name``, if configured."""
        for tool in self.tools:
            if tool.spec.name == name:
                return tool
        return None
