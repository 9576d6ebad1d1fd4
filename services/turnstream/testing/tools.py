"""Tool and access-policy fakes.

Owns :class:`FunctionTool` (a tool from a function, with every optional trait
switchable) and :class:`StaticAccessPolicy`. Imports runtime ports only.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from turnstream.runtime.model_client import ToolSpec
from turnstream.runtime.ports import (
    AccessEffect,
    AccessRequest,
    ToolContext,
    ToolOutput,
)

__all__ = ["FunctionTool", "StaticAccessPolicy", "ToolFn"]

ToolFn = Callable[[str, ToolContext], "Awaitable[str | ToolOutput] | str | ToolOutput"]


@dataclass(eq=False)
class FunctionTool:
    """A tool whose behaviour is a (sync or async) function of its input.

    Attributes:
        retry_safe: the ``IdempotentTool`` trait: a call may run again after
            a crash.
        calls: every input it was run with, in order.
    """

    name: str
    fn: ToolFn = lambda input_json, _ctx: input_json
    description: str = ""
    approval: bool = False
    serial: bool = False
    summary: Callable[[str], str] | None = None
    retry_safe: bool = False
    calls: list[str] = field(default_factory=list)

    @property
    def spec(self) -> ToolSpec:
        """The tool's spec."""
        return ToolSpec(name=self.name, description=self.description)

    async def run(self, input_json: str, ctx: ToolContext) -> ToolOutput:
        """Call the function; a string becomes a text result."""
        self.calls.append(input_json)
        result = self.fn(input_json, ctx)
        if inspect.isawaitable(result):
            result = await result
        return ToolOutput.text(result) if isinstance(result, str) else result

    def sequential(self) -> bool:
        """Trait: run in the serial phase."""
        return self.serial

    def requires_approval(self, input_json: str) -> bool:
        """Trait: open a gate before running."""
        return self.approval

    def idempotent(self) -> bool:
        """Trait: may run again after a crash (same idempotency key)."""
        return self.retry_safe

    def audit_summary(self, input_json: str) -> str:
        """Trait: a summary (the tool name unless ``summary`` is given)."""
        return self.summary(input_json) if self.summary else self.name


@dataclass(eq=False)
class StaticAccessPolicy:
    """Answers from a table: ``per_tool`` first, then ``default``."""

    default: AccessEffect = "approve"
    per_tool: Mapping[str, AccessEffect] = field(default_factory=dict)
    requests: list[AccessRequest] = field(default_factory=list)

    async def decide(self, request: AccessRequest) -> AccessEffect:
        """The configured effect for the call's tool."""
        self.requests.append(request)
        return self.per_tool.get(request.tool_name, self.default)
