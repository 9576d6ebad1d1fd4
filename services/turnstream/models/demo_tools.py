"""The two tools of the CLI demo: ``add`` and ``word_count``.

Owns their :class:`~turnstream.runtime.model_client.ToolSpec` values and pure
implementations (no I/O, deterministic), which the runtime wraps in its tool
runner port, and :func:`format_number`, shared with :mod:`turnstream.models.demo`.
Imports only the model port; must not import httpx, aiokafka, fastavro or faust.
"""

from __future__ import annotations

import json
import math

from turnstream.runtime.model_client import ToolSpec

__all__ = [
    "ADD_TOOL",
    "WORD_COUNT_TOOL",
    "demo_tool_specs",
    "format_number",
    "run_demo_tool",
]

ADD_TOOL = ToolSpec(
    name="add",
    description="Add two numbers and return their sum.",
    input_schema=json.dumps(
        {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
            "additionalProperties": False,
        }
    ),
)
"""``add``: input ``{"a": number, "b": number}``; returns the sum as text."""

WORD_COUNT_TOOL = ToolSpec(
    name="word_count",
    description="Count the whitespace-separated words in a text.",
    input_schema=json.dumps(
        {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
            "additionalProperties": False,
        }
    ),
)
"""``word_count``: input ``{"text": string}``; returns the count as text."""


def demo_tool_specs() -> tuple[ToolSpec, ...]:
    """The demo tools, in the order they are offered to the model."""
    return (ADD_TOOL, WORD_COUNT_TOOL)


def run_demo_tool(name: str, input_json: str) -> str:
    """Run a demo tool and return its result text.

    Raises:
        ValueError: an unknown tool or input that does not fit its schema. The
            message names the tool and field, never the input's values.
    """
    arguments = _arguments(name, input_json)
    if name == ADD_TOOL.name:
        _expect_keys(name, arguments, {"a", "b"})
        total = _number(name, arguments, "a") + _number(name, arguments, "b")
        if isinstance(total, float) and not math.isfinite(total):
            raise ValueError(f"{name}: the sum overflows")
        return format_number(total)
    if name == WORD_COUNT_TOOL.name:
        _expect_keys(name, arguments, {"text"})
        text = arguments["text"]
        if not isinstance(text, str):
            raise ValueError(f"{name}: field 'text' must be a string")
        return str(len(text.split()))
    raise ValueError("unknown demo tool")


def format_number(value: float) -> str:
    """``value`` as the demo writes it: integral values without a fraction."""
    if isinstance(value, int):
        return str(value)
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def _arguments(name: str, input_json: str) -> dict[str, object]:
    if name not in (ADD_TOOL.name, WORD_COUNT_TOOL.name):
        raise ValueError("unknown demo tool")
    try:
        value: object = json.loads(input_json)
    except ValueError:
        raise ValueError(f"{name}: input is not valid JSON") from None
    if not isinstance(value, dict):
        # ValueError for every bad input: the tool-runner contract names it.
        raise ValueError(f"{name}: input must be a JSON object")  # noqa: TRY004
    return {str(key): item for key, item in value.items()}


def _expect_keys(name: str, arguments: dict[str, object], keys: set[str]) -> None:
    missing = sorted(keys - arguments.keys())
    if missing:
        raise ValueError(f"{name}: missing field {missing[0]!r}")
    if arguments.keys() - keys:
        raise ValueError(f"{name}: unexpected fields")


def _number(name: str, arguments: dict[str, object], key: str) -> int | float:
    value = arguments[key]
    # bool is an int subclass, but true is not a number in JSON Schema.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name}: field {key!r} must be a number")  # noqa: TRY004
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name}: field {key!r} must be finite")
    return value
