"""Settings of the turn commands (``actor run``, ``chat``, ``tail``, ``demo``).

Owns the exit codes of those commands (:class:`ExitCode`), the names of the
environment variables they read, and the pure, validate-once resolution of
flags plus an environment mapping into narrow typed settings:

- :class:`ModelChoice` -- ``demo`` / ``openai:NAME`` / ``anthropic:NAME`` plus its
  base URL and API key (the key from ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``,
  never a flag, never shown by ``repr``);
- :class:`KafkaTarget` -- the bootstrap servers, per-call timeout, security
  settings (TLS, SASL; read by the loop actor's own
  :func:`~turnstream.loop_actor.settings.parse_security`) and topic names;
- :class:`MetricsEndpoint` -- where ``/metrics`` and ``/ready`` are served (port 0:
  off);
- :func:`parse_loop_id`, :func:`parse_log_format`.

Every problem is a :class:`~turnstream.errors.ConfigError` whose message names
the flag or variable, so the command prints one line and exits 2. The
environment is read only from the mapping passed in. Must not import aiokafka.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final

from turnstream.errors import ConfigError
from turnstream.kafka.clients import KafkaClients
from turnstream.kafka.connection import KafkaConnection, resolve_bootstrap
from turnstream.kafka.security import KafkaSecurity, Secret
from turnstream.kafka.topology import TopicNames
from turnstream.loop_actor.settings import ActorSettings, parse_security, parse_settings
from turnstream.observability.logs import LogFormat

__all__ = [
    "API_KEY_ENV",
    "DEFAULT_GROUP_ID",
    "DEFAULT_METRICS_PORT",
    "ENV",
    "ExitCode",
    "KafkaTarget",
    "MetricsEndpoint",
    "ModelChoice",
    "actor_settings",
    "parse_log_format",
    "parse_log_level",
    "parse_loop_id",
]


class ExitCode(IntEnum):
    """Exit codes of every ``turnstream`` command."""

    OK = 0
    """The turn (or demo, or command) ended as expected."""
    FAILED = 1
    """A failed turn or operation: ``TurnFailed``, the demo's lifecycle not seen,
    topics that exist with other settings, a broker that refused a request."""
    USAGE = 2
    """A bad flag, variable, model spec or topic file; missing topics."""
    UNREACHABLE = 3
    """Kafka did not answer."""
    INTERRUPTED = 130
    """The turn was interrupted (Ctrl-C or an ``Interrupt`` command)."""


class ENV:
    """Environment variables the turn commands read (flags win over them)."""

    BOOTSTRAP: Final = "KAFKA_BOOTSTRAP_SERVERS"
    MODEL: Final = "TURNSTREAM_MODEL"
    BASE_URL: Final = "TURNSTREAM_MODEL_BASE_URL"
    MODEL_API_KEY: Final = "TURNSTREAM_MODEL_API_KEY"
    CHUNK_DELAY: Final = "TURNSTREAM_DEMO_CHUNK_DELAY"
    TOOLS: Final = "TURNSTREAM_TOOLS"
    AGENTS: Final = "TURNSTREAM_AGENTS"
    SYSTEM_PROMPT: Final = "TURNSTREAM_SYSTEM_PROMPT"
    KAFKA_TIMEOUT: Final = "TURNSTREAM_KAFKA_TIMEOUT"
    GROUP_ID: Final = "TURNSTREAM_GROUP_ID"
    METRICS_PORT: Final = "TURNSTREAM_METRICS_PORT"
    METRICS_HOST: Final = "TURNSTREAM_METRICS_HOST"
    LOG_FORMAT: Final = "TURNSTREAM_LOG_FORMAT"
    LOG_LEVEL: Final = "TURNSTREAM_LOG_LEVEL"
    TOPIC_PREFIX: Final = "TURNSTREAM_TOPIC_PREFIX"
    TOPIC_SUFFIX: Final = "TURNSTREAM_TOPIC_SUFFIX"


API_KEY_ENV: Final[Mapping[str, str]] = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
}
"""Where each provider's API key is read from (else ``TURNSTREAM_MODEL_API_KEY``)."""
DEFAULT_GROUP_ID: Final = "turnstream-loop-actor"
"""The loop actors' consumer group (the deployable's default too)."""
DEFAULT_METRICS_PORT: Final = 9464
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
        if provider in API_KEY_ENV:
            key = (
                env.get(API_KEY_ENV[provider], "").strip()
                or env.get(ENV.MODEL_API_KEY, "").strip()
                or None
            )
            needs_key = provider == "anthropic" or url is None
            if needs_key and key is None:
                raise ConfigError(
                    API_KEY_ENV[provider],
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


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaTarget:
    """Where Kafka is, how long each call may take, and the topic names.

    Attributes:
        connection: bootstrap servers and timeouts.
        topics: the topic names (with a test prefix/suffix if given).
        prefix: the topic-name prefix (for ``topics apply``).
        suffix: the topic-name suffix.
        security: protocol, SASL and TLS settings for every client.
        external: the servers were named (flag or ``KAFKA_BOOTSTRAP_SERVERS``),
            so commands that would start the local broker leave it alone.
    """

    connection: KafkaConnection
    topics: TopicNames
    prefix: str = ""
    suffix: str = ""
    security: KafkaSecurity = field(default_factory=KafkaSecurity)
    external: bool = False

    @property
    def bootstrap(self) -> str:
        """The bootstrap servers."""
        return self.connection.bootstrap

    def clients(self, client_id: str) -> KafkaClients:
        """The factory of this command's Kafka clients (all with ``security``)."""
        return KafkaClients(
            connection=self.connection, security=self.security, client_id=client_id
        )

    @classmethod
    def resolve(
        cls,
        *,
        bootstrap: str | None,
        env: Mapping[str, str],
        timeout: float = 10.0,
        prefix: str | None = None,
        suffix: str | None = None,
        security: Mapping[str, str | None] | None = None,
    ) -> KafkaTarget:
        """Bootstrap from the flag, ``KAFKA_BOOTSTRAP_SERVERS`` or the local broker.

        Args:
            bootstrap: the ``--bootstrap`` flag.
            env: the environment.
            timeout: seconds per Kafka call.
            prefix: the topic-name prefix (else ``TURNSTREAM_TOPIC_PREFIX``).
            suffix: the topic-name suffix (else ``TURNSTREAM_TOPIC_SUFFIX``).
            security: the security flags by setting name (``--security-protocol``
                …; unset ones come from ``TURNSTREAM_KAFKA_*``, passwords only
                from there).

        Raises:
            ConfigError: a malformed bootstrap, a non-positive timeout or bad
                security settings.
        """
        if not math.isfinite(timeout) or timeout <= 0:
            raise ConfigError("--timeout", "must be a positive number of seconds")
        servers = resolve_bootstrap(bootstrap, env)
        connection = KafkaConnection(
            bootstrap=servers, request_timeout=timeout, connect_timeout=timeout
        )
        pre = prefix if prefix is not None else env.get(ENV.TOPIC_PREFIX, "")
        suf = suffix if suffix is not None else env.get(ENV.TOPIC_SUFFIX, "")
        return cls(
            connection=connection,
            topics=TopicNames.with_affixes(prefix=pre, suffix=suf),
            prefix=pre,
            suffix=suf,
            security=parse_security(security or {}, env),
            external=bool((bootstrap or "").strip())
            or bool(env.get(ENV.BOOTSTRAP, "").strip()),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricsEndpoint:
    """Where the health endpoint listens.

    Attributes:
        host: the bind address (loopback by default).
        port: the TCP port; 0 turns the endpoint off.
    """

    host: str = "127.0.0.1"
    port: int = DEFAULT_METRICS_PORT

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError("--metrics-port", f"{self.port} is not a TCP port")
        if not self.host.strip():
            raise ConfigError("--metrics-host", "must not be empty")

    @property
    def enabled(self) -> bool:
        """Whether to serve at all."""
        return self.port != 0


def parse_loop_id(raw: str, *, setting: str = "--loop") -> uuid.UUID:
    """A loop id given as a UUID (with or without dashes).

    Raises:
        ConfigError: not a UUID.
    """
    try:
        return uuid.UUID(raw.strip())
    except ValueError:
        raise ConfigError(setting, f"{raw!r} is not a loop id (a UUID)") from None


def parse_log_format(raw: str, *, setting: str = "--log-format") -> LogFormat:
    """``json`` or ``text``.

    Raises:
        ConfigError: anything else.
    """
    try:
        return LogFormat(raw.strip().lower())
    except ValueError:
        raise ConfigError(setting, f"{raw!r}: expected 'json' or 'text'") from None


def parse_log_level(raw: str, *, setting: str = "--log-level") -> int:
    """A stdlib level by name (``DEBUG`` … ``CRITICAL``, any case).

    Raises:
        ConfigError: an unknown level name.
    """
    level = logging.getLevelNamesMapping().get(raw.strip().upper())
    if level is None:
        raise ConfigError(setting, f"{raw!r}: expected DEBUG, INFO, WARNING or ERROR")
    return level


def actor_settings(
    *,
    target: KafkaTarget,
    group: str,
    model: ModelChoice,
    tools: str,
    system_prompt: str | None,
    env: Mapping[str, str],
    tuning: Mapping[str, str | None] | None = None,
    agents: Sequence[str] = (),
) -> ActorSettings:
    """The deployable's settings: the environment's, with these flags applied.

    Kafka security comes from ``target`` (flags, then ``TURNSTREAM_KAFKA_*``), so
    the actor's clients reach the same cluster the command's own checks did.
    ``tuning`` holds the service flags by setting name (``txn_prefix``,
    ``session_timeout_ms``, ``commit_deadline``, ``schema_dir``), validated with
    the environment by :func:`~turnstream.loop_actor.settings.parse_settings`.

    Raises:
        ConfigError: an invalid setting (named in the message).
    """
    base = parse_settings(
        {**env, "KAFKA_BOOTSTRAP_SERVERS": target.bootstrap},
        tuning or {},
        security=target.security,
    )
    api_key = Secret(model.api_key) if model.api_key is not None else base.model_api_key
    return dataclasses.replace(
        base,
        bootstrap=target.bootstrap,
        group_id=group,
        topic_prefix=target.prefix,
        topic_suffix=target.suffix,
        model=model.spec,
        model_base_url=model.base_url,
        model_api_key=api_key,
        chunk_delay=model.chunk_delay,
        tools=tools,
        system_prompt=system_prompt
        if system_prompt is not None
        else base.system_prompt,
        agents=tuple(agents) or base.agents,
        request_timeout=target.connection.request_timeout,
        security=target.security,
    )
