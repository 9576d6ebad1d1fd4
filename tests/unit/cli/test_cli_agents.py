"""Hosting agents: --agent import paths, the built-in agent, the settings."""

from __future__ import annotations

from pathlib import Path

import pytest

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
