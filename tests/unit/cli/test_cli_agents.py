"""Hosting agents: --agent import paths, the built-in agent, the settings."""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from turnstream.cli.main import app
from turnstream.errors import ConfigError
from turnstream.loop_actor import (
    ActorSettings,
    hosted_agents,
    load_agent,
    parse_settings,
)
from turnstream.runtime import AccessRules

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "agents"


@pytest.fixture
def example_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))


def test_load_agent_from_a_users_package(example_path: None) -> None:
    """package.module:attribute names an Agent of the user's own package."""
    agent = load_agent("acme.agents:support")
    assert agent.name == "support"
    assert [t.spec.name for t in agent.tools] == ["add", "word_count"]


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("nosuch_pkg_16.mod:x", "cannot import 'nosuch_pkg_16.mod'"),
        ("acme.agents:nothing", "acme.agents has no 'nothing'"),
        ("acme.agents:log", "is a Logger, not a turnstream Agent"),
        ("acme.agents:tool_log", "is a callable that needs arguments"),
    ],
)
def test_load_agent_refuses_what_is_not_an_agent(
    example_path: None, path: str, message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load_agent(path)
    assert message in str(err.value)


def test_built_in_agent_declares_its_policy() -> None:
    """Without --agent: the 'turnstream' agent of --model/--tools, allowing the
    demo tools explicitly.
    """
    (agent,) = hosted_agents(ActorSettings(bootstrap="b:1"))
    assert agent.name == "turnstream"
    assert agent.model == "demo"
    assert isinstance(agent.access, AccessRules)
    assert agent.access.allow == frozenset({"add", "word_count"})
    (bare,) = hosted_agents(ActorSettings(bootstrap="b:1", tools="none"))
    assert bare.tools == ()


def test_settings_take_agents_from_the_environment() -> None:
    settings = parse_settings(
        {
            "KAFKA_BOOTSTRAP_SERVERS": "b:1",
            "TURNSTREAM_AGENTS": "acme.agents:support, acme.agents:auditor",
            "OPENAI_API_KEY": "sk-test",
        }
    )
    assert settings.agents == ("acme.agents:support", "acme.agents:auditor")
    assert settings.provider_keys["openai"].reveal() == "sk-test"
    assert "sk-test" not in repr(settings)
    with pytest.raises(ConfigError):
        ActorSettings(bootstrap="b:1", agents=("no-colon",))


_BAD_AGENTS = {
    "nameless_client": (
        "from turnstream.runtime import Agent\n"
        "class Client:\n"
        "    def stream(self, request):\n"
        "        raise NotImplementedError\n"
        "agent = Agent(name='a', model='m', client=Client())\n",
        "model client Client has no 'name'",
    ),
    "tool_without_run": (
        "from turnstream.runtime import Agent\n"
        "class Half:\n"
        "    spec = property(lambda self: None)\n"
        "agent = Agent(name='a', model='demo', tools=[Half()])\n",
        "tool Half has no 'run'",
    ),
    "raises_on_import": (
        "raise RuntimeError('a bug in the agent module')\n",
        "importing",
    ),
}


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[CliRunner]:
    for name in ("KAFKA_BOOTSTRAP_SERVERS", "TURNSTREAM_AGENTS", "TURNSTREAM_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield CliRunner()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


@pytest.mark.parametrize("case", sorted(_BAD_AGENTS))
def test_actor_run_refuses_a_broken_agent_with_exit_2(
    runner: CliRunner, tmp_path: Path, case: str
) -> None:
    """An agent that is not a whole agent (a client without ``name``, a tool
    without ``run``, a module that raises) is a usage error naming the cause,
    found before Kafka is tried.
    """
    source, message = _BAD_AGENTS[case]
    module = f"user_agent_{case}_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(source)
    result = runner.invoke(
        app,
        ["actor", "run", "--agent", f"{module}:agent", "--bootstrap", "127.0.0.1:1"],
    )
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "cannot reach Kafka" not in result.output


def test_a_missing_agent_module_hints_at_the_working_directory(
    runner: CliRunner, tmp_path: Path
) -> None:
    """``--agent`` imports from the current directory: the error says which."""
    result = runner.invoke(
        app, ["actor", "run", "--agent", "nosuch_pkg_43:agent", "--bootstrap", "b:1"]
    )
    assert result.exit_code == 2, result.output
    assert "cannot import 'nosuch_pkg_43'" in result.output
    assert str(tmp_path) in result.output.replace("\n", "")
