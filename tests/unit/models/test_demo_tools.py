"""The demo tools: specs and pure implementations."""

from __future__ import annotations

import json

import pytest

from turnstream.models import demo_tool_specs, run_demo_tool


def test_demo_tool_specs_offer_add_and_word_count() -> None:
    """Both tools come with a JSON Schema object for their input."""
    specs = {spec.name: spec for spec in demo_tool_specs()}

    assert list(specs) == ["add", "word_count"]
    assert json.loads(specs["add"].input_schema) == {
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    }
    assert json.loads(specs["word_count"].input_schema)["required"] == ["text"]
    assert all(spec.description for spec in specs.values())


@pytest.mark.parametrize(
    ("name", "input_json", "expected"),
    [
        pytest.param("add", '{"a": 12, "b": 30}', "42", id="ints"),
        pytest.param("add", '{"a": 1.5, "b": 2.25}', "3.75", id="floats"),
        pytest.param("add", '{"a": 0.5, "b": 0.5}', "1", id="integral-float"),
        pytest.param("add", '{"a": -2, "b": 2}', "0", id="negative"),
        pytest.param(
            "add", '{"a": 9007199254740993, "b": 1}', "9007199254740994", id="big-int"
        ),
        pytest.param("word_count", '{"text": "one two  three\\n"}', "3", id="words"),
        pytest.param("word_count", '{"text": ""}', "0", id="empty"),
    ],
)
def test_run_demo_tool_returns_the_result_text(
    name: str, input_json: str, expected: str
) -> None:
    """Results are plain text; integral sums print without a fraction."""
    assert run_demo_tool(name, input_json) == expected


@pytest.mark.parametrize(
    ("name", "input_json"),
    [
        pytest.param("subtract", '{"a": 1, "b": 2}', id="unknown-tool"),
        pytest.param("add", "{secret-args", id="not-json"),
        pytest.param("add", '["secret-args"]', id="not-an-object"),
        pytest.param("add", '{"a": 1}', id="missing-field"),
        pytest.param("add", '{"a": 1, "b": 2, "secret-args": 3}', id="extra-field"),
        pytest.param("add", '{"a": "secret-args", "b": 2}', id="string-number"),
        pytest.param("add", '{"a": true, "b": 2}', id="bool-number"),
        pytest.param("add", '{"a": NaN, "b": 2}', id="nan"),
        pytest.param("add", '{"a": 1e308, "b": 1e308}', id="overflow"),
        pytest.param("word_count", '{"text": ["secret-args"]}', id="text-not-string"),
    ],
)
def test_run_demo_tool_rejects_bad_input(name: str, input_json: str) -> None:
    """Bad input is a ValueError whose message never repeats the input."""
    with pytest.raises(ValueError, match=r".") as caught:
        run_demo_tool(name, input_json)

    assert "secret-args" not in str(caught.value)
