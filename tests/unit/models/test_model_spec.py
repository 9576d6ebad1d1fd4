"""model_from_spec and the models package's table of contents."""

from __future__ import annotations

import pytest
from tests.unit.models.helpers import API_KEY, assert_no_secret

from turnstream import models
from turnstream.errors import ConfigError
from turnstream.models import (
    AnthropicMessagesClient,
    DemoModel,
    OpenAIChatClient,
    model_from_spec,
)
from turnstream.runtime.model_client import ModelClient


def test_models_all_names_resolve() -> None:
    """__all__ is a table of contents: every name exists, none is private."""
    for name in models.__all__:
        assert hasattr(models, name), name
        assert not name.startswith("_")
    assert sorted(models.__all__) == sorted(set(models.__all__))


def test_clients_satisfy_the_model_port() -> None:
    """Each client is a ModelClient (checked statically by mypy on this file)."""
    clients: list[ModelClient] = [
        DemoModel(),
        OpenAIChatClient(base_url="http://127.0.0.1:1/v1", model="m"),
        AnthropicMessagesClient(api_key=API_KEY, model="m"),
    ]

    assert [client.name for client in clients] == ["demo", "openai", "anthropic"]


def test_spec_demo() -> None:
    """ "demo" builds the demo model with the given chunk delay."""
    model = model_from_spec("demo", base_url=None, api_key=None, chunk_delay=0.05)

    assert isinstance(model, DemoModel)
    assert repr(model) == "DemoModel(chunk_delay=0.05)"


def test_spec_openai_compatible_local_server_needs_no_key() -> None:
    """openai:NAME with a base_url of its own (a local server) takes no key."""
    model = model_from_spec(
        "openai:llama3.1", base_url="http://127.0.0.1:11434/v1", api_key=None
    )

    assert isinstance(model, OpenAIChatClient)
    assert model.model == "llama3.1"
    assert "127.0.0.1:11434/v1" in repr(model)


def test_spec_openai_default_url_with_key() -> None:
    """openai:NAME without a base_url targets OpenAI's API."""
    model = model_from_spec("openai:gpt-4o-mini", base_url=None, api_key=API_KEY)

    assert isinstance(model, OpenAIChatClient)
    assert "https://api.openai.com/v1" in repr(model)
    assert_no_secret(repr(model))


def test_spec_anthropic() -> None:
    """anthropic:NAME builds the Messages client, on a custom base_url if given."""
    model = model_from_spec(
        "anthropic:claude-sonnet-4-5", base_url="http://proxy.test", api_key=API_KEY
    )

    assert isinstance(model, AnthropicMessagesClient)
    assert model.model == "claude-sonnet-4-5"
    assert "http://proxy.test" in repr(model)


@pytest.mark.parametrize(
    ("spec", "base_url", "api_key", "chunk_delay", "setting"),
    [
        pytest.param("gemini:pro", None, API_KEY, 0.0, "model", id="unknown-provider"),
        pytest.param("openai", None, API_KEY, 0.0, "model", id="no-model-name"),
        pytest.param("openai:", None, API_KEY, 0.0, "model", id="empty-model-name"),
        pytest.param("demo:fast", None, None, 0.0, "model", id="demo-with-name"),
        pytest.param("", None, None, 0.0, "model", id="empty"),
        pytest.param("openai:gpt-4o", None, None, 0.0, "api_key", id="openai-no-key"),
        pytest.param(
            "anthropic:claude", None, None, 0.0, "api_key", id="anthropic-no-key"
        ),
        pytest.param(
            "openai:m", "localhost:8000", None, 0.0, "base_url", id="bad-base-url"
        ),
        pytest.param("demo", None, None, -1.0, "chunk_delay", id="negative-delay"),
    ],
)
def test_spec_errors_are_config_errors(
    spec: str,
    base_url: str | None,
    api_key: str | None,
    chunk_delay: float,
    setting: str,
) -> None:
    """Bad specs fail at start-up with a ConfigError naming the setting."""
    with pytest.raises(ConfigError) as caught:
        model_from_spec(
            spec, base_url=base_url, api_key=api_key, chunk_delay=chunk_delay
        )

    assert caught.value.setting == setting
    assert_no_secret(str(caught.value))
