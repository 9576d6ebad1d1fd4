"""Structured logs: one JSON object per line, extras kept, contents redacted."""

from __future__ import annotations

import io
import json
import logging

import pytest

from turnstream.observability.logs import REDACTED, LogFormat, configure_logging


@pytest.fixture
def restore_root() -> object:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield root
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def test_json_lines_carry_fields_and_redact_contents(restore_root: object) -> None:
    """Each record is one JSON line with ts/level/logger/msg and its extras."""
    stream = io.StringIO()
    configure_logging(LogFormat.JSON, stream=stream)

    logging.getLogger("turnstream.test").info(
        "turn started",
        extra={
            "loop_id": "abc",
            "turn_index": 2,
            "text": "secret prompt",
            "api_key": "k",
        },
    )

    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert entry["level"] == "info"
    assert entry["logger"] == "turnstream.test"
    assert entry["msg"] == "turn started"
    assert entry["loop_id"] == "abc"
    assert entry["turn_index"] == 2
    assert entry["text"] == REDACTED
    assert entry["api_key"] == REDACTED
    assert entry["ts"].endswith("Z")
    assert "secret prompt" not in stream.getvalue()


def test_json_lines_name_the_exception_type(restore_root: object) -> None:
    """An exception is logged with its type (and traceback) inside the JSON."""
    stream = io.StringIO()
    configure_logging(LogFormat.JSON, stream=stream)

    try:
        raise KeyError("x")
    except KeyError:
        logging.getLogger("t").exception("failed")

    entry = json.loads(stream.getvalue())
    assert entry["exc_type"] == "KeyError"
    assert "Traceback" in entry["exc"]


def test_text_format_is_key_value(restore_root: object) -> None:
    """The text format puts extras after the message as key=value."""
    stream = io.StringIO()
    configure_logging(LogFormat.TEXT, stream=stream)

    logging.getLogger("t").warning("lag", extra={"partition": 1})

    line = stream.getvalue().strip()
    assert line.endswith("WARNING t: lag partition=1")


def test_configure_logging_quiets_client_libraries(restore_root: object) -> None:
    """aiokafka's INFO chatter is held back at the libraries' level."""
    configure_logging(LogFormat.TEXT, stream=io.StringIO(), libraries=logging.ERROR)

    assert logging.getLogger("aiokafka").level == logging.ERROR
