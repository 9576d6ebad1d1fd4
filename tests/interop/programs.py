"""The interop lane's example programs, and the Python view they must match."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from turnstream.commands import CommandBase
from turnstream.events import EventBase
from turnstream.state import LoopState
from turnstream.wire import Codec, SchemaSet, Topic

PROJECT_DIR = Path(__file__).resolve().parents[2]
SCHEMAS = PROJECT_DIR / "schemas"
JAVA_DIR = PROJECT_DIR / "examples" / "java"
GO_BIN = PROJECT_DIR / "examples" / "go" / "bin"
RUN_TIMEOUT = 60.0

CODEC = Codec(SchemaSet.load(SCHEMAS))


def java(main: str) -> list[str]:
    classpath = JAVA_DIR / "target" / "classpath.txt"
    if not classpath.is_file():
        pytest.fail("examples/java is not built: run `make test-interop`")
    deps = classpath.read_text().strip()
    return [
        "java",
        "-cp",
        f"{JAVA_DIR / 'target' / 'classes'}{os.pathsep}{deps}",
        f"dev.turnstream.interop.{main}",
    ]


def go(main: str) -> list[str]:
    binary = GO_BIN / main
    if not binary.is_file():
        pytest.fail("examples/go is not built: run `make test-interop`")
    return [str(binary)]


Program = Callable[[], list[str]]
READER_PROGRAMS: dict[str, Program] = {
    "java": lambda: java("Reader"),
    "go": lambda: go("reader"),
}
WRITER_PROGRAMS: dict[str, Program] = {
    "java": lambda: java("Writer"),
    "go": lambda: go("writer"),
}
READERS = [pytest.param(p, id=name) for name, p in READER_PROGRAMS.items()]


def run(argv: Sequence[str]) -> list[dict[str, Any]]:
    """Run an example program; its stdout is one JSON object per line."""
    done = subprocess.run(  # noqa: S603 - fixed argv
        argv,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
        cwd=PROJECT_DIR,
    )
    assert done.returncode == 0, (
        f"{argv[0]} … {argv[-3:]} exited {done.returncode}\n{done.stderr}"
    )
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def python_view(frame: bytes) -> tuple[str, str, str | None]:
    """(topic, type, id) of a frame, as the Python codec decodes it."""
    fingerprint = frame[2:10]
    topic = next(t for t in Topic if CODEC.schemas.reader_for(t, fingerprint))
    value: EventBase | CommandBase | LoopState
    match topic:
        case Topic.EVENTS:
            value = CODEC.unmarshal_event(frame)
        case Topic.DELTAS:
            value = CODEC.unmarshal_ephemeral(frame)
        case Topic.COMMANDS:
            value = CODEC.unmarshal_command(frame)
        case Topic.LOOPS:
            value = CODEC.unmarshal_state(frame)
    if isinstance(value, EventBase):
        ident = value.header.event_id
    elif isinstance(value, CommandBase):
        ident = value.command_id
    else:
        ident = value.loop_id
    return topic.value, type(value).__name__, None if ident is None else str(ident)
