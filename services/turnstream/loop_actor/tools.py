"""The demo tool set offered by the loop-actor deployable.

Owns :class:`DemoTool`, the runtime :class:`~turnstream.runtime.ports.Tool`
around one pure demo tool of :mod:`turnstream.models.demo_tools`, and
:func:`tool_set`, which maps the ``--tools`` setting to tools. Part of the
composition root; imports the models package and runtime ports only.
"""

from __future__ import annotations

from dataclasses import dataclass

from turnstream.errors import ConfigError
from turnstream.models import demo_tool_specs, run_demo_tool
from turnstream.runtime.model_client import ToolSpec
from turnstream.runtime.ports import Tool, ToolContext, ToolOutput

__all__ = ["TOOL_SETS", "DemoTool", "tool_set"]

TOOL_SETS = ("demo", "none")
"""The values the ``--tools`` setting accepts."""


@dataclass(frozen=True, slots=True)
class DemoTool:
    """One demo tool (``add`` or ``word_count``): pure, instant, deterministic."""

    tool_spec: ToolSpec

    @property
    def spec(self) -> ToolSpec:
        """Name, description and input schema."""
        return self.tool_spec

    async def run(self, input_json: str, ctx: ToolContext) -> ToolOutput:
        """Run the tool; bad input becomes an error result for the model."""
        try:
            return ToolOutput.text(run_demo_tool(self.tool_spec.name, input_json))
        except ValueError as exc:  # the message names the field, never the input
            return ToolOutput.error(str(exc))


def tool_set(name: str) -> tuple[Tool, ...]:
    """The tools a ``--tools`` value names.

    Raises:
        ConfigError: an unknown tool set.
    """
    if name == "demo":
        return tuple(DemoTool(spec) for spec in demo_tool_specs())
    if name == "none":
        return ()
    raise ConfigError(
        "tools", f"unknown tool set {name!r}; expected one of {TOOL_SETS}"
    )
