"""``--help`` reads well in an 80-column terminal: nothing cut, no raw markup."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from turnstream.cli.main import app

COMMANDS = [
    ["chat"],
    ["tail"],
    ["demo"],
    ["smoke"],
    ["actor", "run"],
    ["topics", "apply"],
    ["broker", "up"],
    ["broker", "jars"],
    ["analytics", "run"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_at_80_columns_shows_full_names(command: list[str]) -> None:
    """Every option's variable name appears whole; no ellipsis, no reST backticks."""
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    text = result.output
    assert "…" not in text
    assert "``" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    if command[0] != "broker":
        # Every Kafka command names the bootstrap variable in full.
        assert "KAFKA_BOOTSTRAP_SERVERS" in " ".join(text.split())
