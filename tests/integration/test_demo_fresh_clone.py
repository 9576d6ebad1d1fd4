"""The README's main-job command, run from a fresh copy of the tree.

The tree is copied without the virtualenv, the broker's data, the jar cache and
tool caches, and ``turnstream demo`` runs there against the session's broker
(``KAFKA_BOOTSTRAP_SERVERS``, so no second broker starts) with the current venv's
Python and ``PYTHONPATH=<copy>/services``, so the copy's code is what runs. The
full from-scratch path (venv, jars, broker) is what ``.ci/run`` itself does.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.cluster import free_port_range

PROJECT_DIR = Path(__file__).resolve().parents[2]
_SKIP_NAMES = {
    ".venv",
    ".git",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".hypothesis",
}
_SKIP_PATHS = {PROJECT_DIR / "var", PROJECT_DIR / "infra" / "kafka" / ".cache"}

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _ignore(directory: str, names: list[str]) -> set[str]:
    here = Path(directory)
    return {n for n in names if n in _SKIP_NAMES or here / n in _SKIP_PATHS}


def fresh_copy(target: Path) -> Path:
    """The working tree as a fresh clone would have it (no venv, data or caches)."""
    shutil.copytree(PROJECT_DIR, target, ignore=_ignore, symlinks=True)
    return target


def copy_env(copy: Path, bootstrap: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TURNSTREAM_") and k not in {"PYTHONPATH"}
    }
    env.update(
        KAFKA_BOOTSTRAP_SERVERS=bootstrap,
        PYTHONPATH=str(copy / "services"),
        PYTHONUNBUFFERED="1",
        COLUMNS="200",
    )
    return env


def line_types(output: str) -> list[tuple[str, str]]:
    """(event type, whole line) of every rendered event line, in order."""
    found = []
    for line in output.splitlines():
        match = re.match(r"^([A-Z][A-Za-z]+)\s+loop=", line)
        if match:
            found.append((match.group(1), line))
    return found


def assert_in_order(lines: list[tuple[str, str]], wanted: list[str]) -> None:
    """``wanted`` (type or 'Type #n') appears as a subsequence of the lines."""
    position = 0
    for item in wanted:
        kind, _, index = item.partition(" ")
        while position < len(lines):
            seen_kind, line = lines[position]
            position += 1
            if seen_kind == kind and (not index or f" {index} " in f"{line} "):
                break
        else:
            raise AssertionError(f"{item} not found in order; lines: {lines}")


@pytest.mark.timeout(300)
def test_demo_runs_from_a_fresh_clone(kafka_bootstrap: str, tmp_path: Path) -> None:
    """`turnstream demo` shows the tool turn, the queued chain and the interrupt."""
    copy = fresh_copy(tmp_path / "turnstream")
    env = copy_env(copy, kafka_bootstrap)
    assert not (copy / ".venv").exists()
    where = subprocess.run(
        [sys.executable, "-c", "import turnstream; print(turnstream.__file__)"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert where.stdout.strip().startswith(str(copy / "services")), where.stdout

    result = subprocess.run(  # noqa: S603 - our own interpreter, fixed arguments
        [
            sys.executable,
            "-m",
            "turnstream.cli.main",
            "demo",
            "--bootstrap",
            kafka_bootstrap,
        ],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )

    output = result.stdout
    assert result.returncode == 0, f"{output}\n--- stderr ---\n{result.stderr}"
    assert "Traceback" not in result.stderr
    assert "demo OK" in output
    lines = line_types(output)
    assert_in_order(
        lines,
        [
            "TurnStarted #1",
            "TokenDelta #1",
            "ToolCallStarted #1",
            "ToolCallCompleted #1",
            "StepDone #1",
            "TurnDone #1",
            "TurnStarted #2",
            "TurnDone #2",
            "TurnStarted #3",
            "TokenDelta #3",
            "TurnInterrupted #3",
        ],
    )
    kinds = [kind for kind, _ in lines]
    queued = kinds.index("InputQueued")
    done_1 = next(
        i for i, (k, line) in enumerate(lines) if k == "TurnDone" and "#1" in line
    )
    start_2 = next(
        i for i, (k, line) in enumerate(lines) if k == "TurnStarted" and "#2" in line
    )
    assert queued < start_2, "InputQueued must come before the queued turn starts"
    between = [
        k for k in kinds[done_1 + 1 : start_2] if not k.startswith(("Tok", "Tool"))
    ]
    assert between == [], f"the queued turn must chain right after TurnDone: {between}"
    assert kinds.count("ToolCallStarted") >= 2


def _free_port() -> int:
    # Below the ephemeral range: the broker manager refuses ports inside it.
    return free_port_range(1)


@pytest.mark.timeout(300)
def test_demo_on_a_fresh_broker_prints_no_error_line(tmp_path: Path) -> None:
    """A first `make demo`: the demo's own new broker, and not one ERROR line.

    On empty storage the group coordinator is not there at first; aiokafka logs
    ``GroupCoordinatorNotAvailableError`` at ERROR and retries. That is not an
    error for the person running the demo, so it must not reach the output.
    """
    copy = fresh_copy(tmp_path / "turnstream")
    cache = (PROJECT_DIR / "infra" / "kafka" / ".cache").resolve()
    (copy / "infra" / "kafka" / ".cache").symlink_to(cache)  # no jar download
    env = copy_env(copy, "")
    del env["KAFKA_BOOTSTRAP_SERVERS"]
    env.update(
        TURNSTREAM_BROKER_PORT=str(_free_port()),
        TURNSTREAM_CONTROLLER_PORT=str(_free_port()),
    )
    command = [sys.executable, "-m", "turnstream.cli.main"]
    try:
        result = subprocess.run(  # noqa: S603 - our own interpreter, fixed arguments
            [*command, "demo"],
            cwd=copy,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
    finally:
        subprocess.run(  # noqa: S603 - our own interpreter, fixed arguments
            [*command, "broker", "down"],
            cwd=copy,
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )

    output = f"{result.stdout}\n--- stderr ---\n{result.stderr}"
    assert result.returncode == 0, output
    assert "formatting broker storage" in result.stdout, output  # a fresh broker
    assert "demo OK" in result.stdout, output
    errors = [line for line in output.splitlines() if "ERROR" in line]
    assert errors == [], output
    assert "Traceback" not in output
