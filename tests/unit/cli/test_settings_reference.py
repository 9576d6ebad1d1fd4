"""The settings declarations are the one source of the options and the reference.

Every declared setting of a deployable is listed once in its command's
``--help`` (an option, or a variable under "Environment only") and once in
``docs/settings.md``, whose tables hold nothing undeclared. The reference is
regenerated with ``TURNSTREAM_UPDATE_GOLDEN=1`` (or ``python -m
turnstream.cli.settings_doc``).
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from turnstream.cli.main import app
from turnstream.cli.settings_doc import DEPLOYABLES, SHARED, Deployable, own, render
from turnstream.config import Setting
from turnstream.loop_actor.settings import SETTINGS as ACTOR_SETTINGS
from turnstream.loop_actor.settings import ActorSettings

REFERENCE = Path(__file__).resolve().parents[3] / "docs" / "settings.md"
_IDS = [" ".join(d.command) for d in DEPLOYABLES]


def _help(deployable: Deployable) -> str:
    result = CliRunner().invoke(
        app, [*deployable.command, "--help"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    return result.output


def _option_names(text: str) -> list[str]:
    """Every flag named in an option's heading line of ``--help``."""
    names: list[str] = []
    for line in text.splitlines():
        match = re.match(r"^  (-[^\s].*?)(?:  |$)", line)
        if match is None:
            continue
        for token in match.group(1).replace(",", " ").split():
            if token.startswith("-"):
                names.extend(token.split("/"))
    return names


def _table_rows(section: str) -> list[tuple[list[str], str]]:
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) != 4 or cells[0] in ("Flag", "---"):
            continue
        flags = re.findall(r"`(-[^`]+)`", cells[0])
        rows.append((flags, cells[1].strip("`")))
    return rows


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end != -1 else len(text)]


def test_the_reference_is_generated_from_the_declarations() -> None:
    """docs/settings.md is what the declarations render (regenerate to update)."""
    text = render()
    if os.environ.get("TURNSTREAM_UPDATE_GOLDEN") == "1":
        REFERENCE.parent.mkdir(exist_ok=True)
        REFERENCE.write_text(text, encoding="utf-8")
    assert REFERENCE.read_text(encoding="utf-8") == text, (
        "stale: run python -m turnstream.cli.settings_doc"
    )


@pytest.mark.parametrize("deployable", DEPLOYABLES, ids=_IDS)
def test_every_setting_is_in_help_once(deployable: Deployable) -> None:
    """Each flag heads one option; each environment-only variable is named once
    in the help's closing paragraph; no option is undeclared."""
    text = _help(deployable)
    names = _option_names(text)
    epilog = text[text.index("Environment only") :]
    declared: set[str] = {"--help"}
    for setting in deployable.settings:
        if setting.flags:
            for flag in setting.flags:
                assert names.count(flag) == 1, (flag, names)
            declared.update(setting.flags)
        else:
            assert setting.env is not None
            assert len(re.findall(rf"\b{setting.env}\b", epilog)) == 1, setting.env
    assert set(names) <= declared, set(names) - declared


@pytest.mark.parametrize("deployable", DEPLOYABLES, ids=_IDS)
def test_every_setting_is_in_the_reference_once(deployable: Deployable) -> None:
    """In the deployable's table or the shared one, once; nothing undeclared."""
    text = REFERENCE.read_text(encoding="utf-8")
    command = " ".join(deployable.command)
    mine = _table_rows(_section(text, f"`turnstream {command}`"))
    shared = _table_rows(_section(text, "## Shared"))
    rows = mine + shared

    def listed(setting: Setting) -> int:
        return sum(
            1
            for flags, env in rows
            if (setting.flag is not None and setting.flag in flags)
            or (setting.flag is None and env == setting.env)
        )

    for setting in deployable.settings:
        assert listed(setting) == 1, setting.name
    declared = {(s.flag, s.env) for s in (*own(deployable), *SHARED)}
    for flags, env in mine:
        assert (flags[0] if flags else None, env or None) in declared, (flags, env)


def test_the_actors_declared_defaults_are_its_settings_defaults() -> None:
    """The table's default is the one ActorSettings applies."""
    defaults = {
        f.name: f.default
        for f in dataclasses.fields(ActorSettings)
        if f.default is not dataclasses.MISSING
    }
    for setting in ACTOR_SETTINGS:
        if setting.default is not None and setting.name in defaults:
            assert defaults[setting.name] == setting.default, setting.name
