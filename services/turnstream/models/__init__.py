"""Model clients: adapters implementing the :class:`ModelClient` port.

Contents:

- :class:`OpenAIChatClient` (``openai.py``): OpenAI-compatible streaming Chat
  Completions, for OpenAI and any server speaking the dialect.
- :class:`AnthropicMessagesClient` (``anthropic.py``): the Anthropic Messages
  API event stream, thinking signatures included.
- :class:`DemoModel` (``demo.py``): a deterministic offline model that calls
  the demo tools of ``demo_tools.py`` (:func:`demo_tool_specs`,
  :func:`run_demo_tool`).
- :class:`ModelTimeouts`: per-operation and whole-request timeouts.
- :func:`model_from_spec`: ``demo`` / ``openai:NAME`` / ``anthropic:NAME`` to a
  client, for composition roots and the CLI.

Internal: ``_sse.py`` (event-stream decoding), ``_http.py`` (the streaming
POST and its error mapping), ``_openai_stream.py`` and ``_anthropic_stream.py``
(the two dialects' stream parsers). Every failure leaves as
:class:`turnstream.errors.ProviderError`; no client puts an API key, prompt
text or tool arguments into an error, a log line or a repr.

Adapters layer: may import httpx; must not import aiokafka, fastavro or faust,
nor the Kafka, wire or composition-root packages.
"""

from __future__ import annotations

import httpx

from turnstream.errors import ConfigError
from turnstream.models._http import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_POOL_TIMEOUT,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_STREAM_TIMEOUT,
    DEFAULT_WRITE_TIMEOUT,
    ModelTimeouts,
)
from turnstream.models.anthropic import (
    DEFAULT_ANTHROPIC_BASE_URL,
    AnthropicMessagesClient,
)
from turnstream.models.demo import DemoModel
from turnstream.models.demo_tools import demo_tool_specs, run_demo_tool
from turnstream.models.openai import DEFAULT_OPENAI_BASE_URL, OpenAIChatClient
from turnstream.runtime.model_client import ModelClient

__all__ = [
    "DEFAULT_ANTHROPIC_BASE_URL",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_DRAIN_TIMEOUT",
    "DEFAULT_OPENAI_BASE_URL",
    "DEFAULT_POOL_TIMEOUT",
    "DEFAULT_READ_TIMEOUT",
    "DEFAULT_STREAM_TIMEOUT",
    "DEFAULT_WRITE_TIMEOUT",
    "AnthropicMessagesClient",
    "DemoModel",
    "ModelTimeouts",
    "OpenAIChatClient",
    "demo_tool_specs",
    "model_from_spec",
    "run_demo_tool",
]

_SPEC_FORMS = "expected 'demo', 'openai:NAME' or 'anthropic:NAME'"


def model_from_spec(
    spec: str,
    *,
    base_url: str | None,
    api_key: str | None,
    chunk_delay: float = 0.0,
    timeouts: ModelTimeouts | None = None,
    http: httpx.AsyncClient | None = None,
) -> ModelClient:
    """Build the model client a spec names.

    ``demo`` ignores ``base_url``, ``api_key`` and ``http``. ``openai:NAME``
    defaults ``base_url`` to OpenAI's API, which then needs an ``api_key``;
    with any other ``base_url`` (a local server) the key is optional.
    ``anthropic:NAME`` always needs an ``api_key``. An HTTP client
    built here owns a connection pool: close it with its ``aclose()``, or pass
    a shared ``http`` client that the caller closes.

    Args:
        spec: ``demo``, ``openai:NAME`` or ``anthropic:NAME``.
        base_url: the API root, or None for the provider's default.
        api_key: the provider credential, or None.
        chunk_delay: seconds between the demo model's chunks.
        timeouts: timeouts for the HTTP clients (defaults otherwise).
        http: a shared ``httpx.AsyncClient`` for the HTTP clients.

    Raises:
        ConfigError: an unknown provider, an empty model name, a missing
            credential, a bad base URL or a bad ``chunk_delay``.
    """
    provider, sep, name = spec.strip().partition(":")
    if provider == "demo" and not sep:
        return DemoModel(chunk_delay=chunk_delay)
    if not sep or not name.strip():
        raise ConfigError("model", _SPEC_FORMS)
    name = name.strip()
    if provider == "openai":
        url = base_url or DEFAULT_OPENAI_BASE_URL
        if url.rstrip("/") == DEFAULT_OPENAI_BASE_URL and not api_key:
            raise ConfigError("api_key", "required for the OpenAI API")
        return OpenAIChatClient(
            base_url=url, model=name, api_key=api_key, timeouts=timeouts, http=http
        )
    if provider == "anthropic":
        if not api_key:
            raise ConfigError("api_key", "required for the Anthropic API")
        return AnthropicMessagesClient(
            base_url=base_url or DEFAULT_ANTHROPIC_BASE_URL,
            model=name,
            api_key=api_key,
            timeouts=timeouts,
            http=http,
        )
    raise ConfigError("model", f"unknown provider; {_SPEC_FORMS}")
