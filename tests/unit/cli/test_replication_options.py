"""Every command that ensures topics takes the same replication settings."""

from __future__ import annotations

from typing import Any

import pytest
import typer

from turnstream.cli.main import app


def _params(*path: str) -> dict[str, Any]:
    # Duck-typed: typer may bring its own click, so no isinstance checks.
    command: Any = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    return {p.name: p for p in command.params}


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(("topics", "apply"), id="topics-apply"),
        pytest.param(("actor", "run"), id="actor-run"),
        pytest.param(("smoke",), id="smoke"),
    ],
)
def test_ensuring_commands_take_replication_and_partitions(
    path: tuple[str, ...],
) -> None:
    """--replication-factor (TURNSTREAM_TOPIC_REPLICATION_FACTOR) and --partitions
    (TURNSTREAM_TOPIC_PARTITIONS) on each, with no default: the cluster decides."""
    params = _params(*path)
    rf = params["replication_factor"]
    assert rf.opts == ["--replication-factor"]
    assert rf.envvar == "TURNSTREAM_TOPIC_REPLICATION_FACTOR"
    assert rf.default is None
    parts = params["partitions"]
    assert parts.envvar == "TURNSTREAM_TOPIC_PARTITIONS"


@pytest.mark.parametrize(
    "name", [pytest.param(n, id=n) for n in ("up", "down", "status")]
)
def test_broker_commands_take_nodes(name: str) -> None:
    """broker up/down/status --nodes N (TURNSTREAM_BROKER_NODES), 1 by default."""
    nodes = _params("broker", name)["nodes"]
    assert "--nodes" in nodes.opts
    assert nodes.envvar == "TURNSTREAM_BROKER_NODES"
    assert nodes.default == 1
