"""Which model the loop actor runs, checked at start-up without building a client.

Owns :class:`ModelChoice` (``demo`` / ``openai:NAME`` / ``anthropic:NAME`` plus
its base URL and API key) and the names of the model credentials' variables:
each provider's (:data:`PROVIDER_KEY_ENV`), else ``TURNSTREAM_MODEL_API_KEY``.
The keys are read from the environment only, never a flag, and never shown by
``repr``. Reads the environment only from the mapping passed in.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from turnstream.errors import ConfigError

__all__ = ["MODEL_API_KEY_ENV", "PROVIDER_KEY_ENV", "ModelChoice"]

PROVIDER_KEY_ENV: Final[Mapping[str, str]] = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
}
"""Where each provider's API key is read from (else ``TURNSTREAM_MODEL_API_KEY``)."""
MODEL_API_KEY_ENV: Final = "TURNSTREAM_MODEL_API_KEY"
_PROVIDERS: Final = ("demo", "openai", "anthropic")
_SPEC_FORMS: Final = "expected 'demo', 'openai:NAME' or 'anthropic:NAME'"
_URL: Final = re.compile(r"^https?://[^\s/]+(/\S*)?$")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelChoice:
    """Which model the loop actor runs, checked without building a client.

    Attributes:
        spec: the spec as given (``demo``, ``openai:NAME``, ``anthropic:NAME``).
        provider: ``demo``, ``openai`` or ``anthropic``.
        name: the model name (``demo`` for the demo model).
        base_url: the API root, or None for the provider's default.
        api_key: the credential read from the environment (hidden from repr).
        chunk_delay: seconds between the demo model's chunks.
    """

    spec: str
    provider: str
    name: str
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    chunk_delay: float = 0.0

    @classmethod
    def parse(
        cls,
        spec: str,
        *,
        base_url: str | None,
        env: Mapping[str, str],
        chunk_delay: float = 0.0,
    ) -> ModelChoice:
        """Validate a model spec and pick up its API key from ``env``.

        The rules are ``model_from_spec``'s: ``openai:NAME`` needs
        ``OPENAI_API_KEY`` unless ``--base-url`` points elsewhere (a local
        server); ``anthropic:NAME`` always needs ``ANTHROPIC_API_KEY``.

        Raises:
            ConfigError: an unknown provider, an empty name, a malformed base URL,
                a missing key or a bad chunk delay.
        """
        provider, sep, name = spec.strip().partition(":")
        provider, name = provider.strip().lower(), name.strip()
        if provider not in _PROVIDERS or (provider == "demo") == bool(sep):
            raise ConfigError("--model", f"{spec!r}: {_SPEC_FORMS}")
        if provider != "demo" and not name:
            raise ConfigError("--model", f"{spec!r}: the model name is empty")
        if not math.isfinite(chunk_delay) or chunk_delay < 0:
            raise ConfigError("--chunk-delay", "must be a finite number >= 0")
        url = (base_url or "").strip() or None
        if url is not None and not _URL.match(url):
            raise ConfigError("--base-url", f"{url!r} is not an http(s) URL")
        key = None
        if provider in PROVIDER_KEY_ENV:
            key = (
                env.get(PROVIDER_KEY_ENV[provider], "").strip()
                or env.get(MODEL_API_KEY_ENV, "").strip()
                or None
            )
            needs_key = provider == "anthropic" or url is None
            if needs_key and key is None:
                raise ConfigError(
                    PROVIDER_KEY_ENV[provider],
                    f"required for --model {provider}:… (set it in the environment)",
                )
        return cls(
            spec=spec.strip(),
            provider=provider,
            name=name or "demo",
            base_url=url,
            api_key=key,
            chunk_delay=chunk_delay,
        )

    @property
    def label(self) -> str:
        """What a LoopStarted event and a log line may show (no credentials)."""
        return self.spec
