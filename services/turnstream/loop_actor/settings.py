"""The loop-actor deployable's settings, read once from flags and environment.

Owns :class:`ActorSettings`, :func:`parse_settings` and :func:`parse_security`
(the Kafka security part; the ``turnstream`` CLI commands that talk to Kafka use
it too, so every process reads TLS and SASL settings the same way). Every
setting has a flag and an environment variable (the flag wins); secrets (the
model API key, the SASL password, the TLS key password) are read from the
environment only, so they never show in a process listing, and they are held as
:class:`~turnstream.kafka.security.Secret` (masked in every ``repr``).

The only module of the deployable that reads the environment, and only from
the mapping passed in. Part of the composition root.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from turnstream.errors import ConfigError
from turnstream.kafka.connection import resolve_bootstrap
from turnstream.kafka.security import (
    KafkaSecurity,
    SaslMechanism,
    Secret,
    SecurityProtocol,
)
from turnstream.loop_actor.gc_policy import DEFAULT_GC_THRESHOLD
from turnstream.loop_actor.tools import TOOL_SETS
from turnstream.tracing import TracingSettings

__all__ = [
    "ENV",
    "PROVIDER_KEY_ENV",
    "SECRET_ENV",
    "ActorSettings",
    "parse_security",
    "parse_settings",
]

ENV = {
    "group_id": "TURNSTREAM_GROUP_ID",
    "topic_prefix": "TURNSTREAM_TOPIC_PREFIX",
    "topic_suffix": "TURNSTREAM_TOPIC_SUFFIX",
    "model": "TURNSTREAM_MODEL",
    "model_base_url": "TURNSTREAM_MODEL_BASE_URL",
    "chunk_delay": "TURNSTREAM_DEMO_CHUNK_DELAY",
    "tools": "TURNSTREAM_TOOLS",
    "agents": "TURNSTREAM_AGENTS",
    "system_prompt": "TURNSTREAM_SYSTEM_PROMPT",
    "txn_prefix": "TURNSTREAM_TXN_PREFIX",
    "session_timeout_ms": "TURNSTREAM_SESSION_TIMEOUT_MS",
    "heartbeat_interval_ms": "TURNSTREAM_HEARTBEAT_INTERVAL_MS",
    "rebalance_timeout_ms": "TURNSTREAM_REBALANCE_TIMEOUT_MS",
    "drain_timeout": "TURNSTREAM_DRAIN_TIMEOUT",
    "instance_id": "TURNSTREAM_INSTANCE_ID",
    "leave_on_stop": "TURNSTREAM_LEAVE_ON_STOP",
    "request_timeout": "TURNSTREAM_KAFKA_TIMEOUT",
    "commit_deadline": "TURNSTREAM_COMMIT_DEADLINE",
    "gc_threshold": "TURNSTREAM_GC_THRESHOLD",
    "max_resident_loops": "TURNSTREAM_MAX_RESIDENT_LOOPS",
    "schema_dir": "TURNSTREAM_SCHEMA_DIR",
    "log_level": "TURNSTREAM_LOG_LEVEL",
    "security_protocol": "TURNSTREAM_KAFKA_SECURITY_PROTOCOL",
    "sasl_mechanism": "TURNSTREAM_KAFKA_SASL_MECHANISM",
    "sasl_username": "TURNSTREAM_KAFKA_SASL_USERNAME",
    "ssl_cafile": "TURNSTREAM_KAFKA_SSL_CAFILE",
    "ssl_certfile": "TURNSTREAM_KAFKA_SSL_CERTFILE",
    "ssl_keyfile": "TURNSTREAM_KAFKA_SSL_KEYFILE",
}
"""Setting name to environment variable (flags use the same names, dashed)."""

_BOOLEANS = {
    "true": True,
    "1": True,
    "yes": True,
    "false": False,
    "0": False,
    "no": False,
}

PROVIDER_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
"""Each provider's credential variable (for the hosted agents' models)."""

SECRET_ENV = {
    "model_api_key": "TURNSTREAM_MODEL_API_KEY",
    "sasl_password": "TURNSTREAM_KAFKA_SASL_PASSWORD",
    "ssl_key_password": "TURNSTREAM_KAFKA_SSL_KEY_PASSWORD",
}
"""Secrets: environment only."""

_MIN_SESSION_TIMEOUT_MS = 6000  # the broker's default group.min.session.timeout.ms
_MAX_GC_THRESHOLD = 1_000_000  # beyond it the young collection itself is a long pause


@dataclass(frozen=True, slots=True, kw_only=True)
class ActorSettings:
    """Everything the loop-actor service is configured with.

    Attributes:
        bootstrap: Kafka bootstrap servers.
        group_id: the consumer group (shared by every actor process).
        topic_prefix: prefix of every topic name (isolated topic sets).
        topic_suffix: suffix of every topic name.
        model: ``demo``, ``openai:NAME`` or ``anthropic:NAME``.
        model_base_url: the model API root (provider default if unset).
        model_api_key: the model credential (environment only).
        chunk_delay: seconds between the demo model's chunks.
        tools: the tool set: ``demo`` or ``none``.
        system_prompt: sent with every model request.
        agents: import paths (``package.module:attribute``) of the agents the
            service hosts; empty: the built-in ``turnstream`` agent made of
            ``model``, ``tools`` and ``system_prompt``.
        provider_keys: each provider's credential, for the agents' models
            (environment only).
        txn_prefix: prefix of the transactional ids.
        session_timeout_ms: consumer-group session timeout: how long a crashed
            actor's partitions wait before another actor takes them (unless
            its replacement, with the same instance id, comes first).
        heartbeat_interval_ms: consumer heartbeat period (below a third of
            the session timeout).
        rebalance_timeout_ms: how long a rebalance waits for members to rejoin.
        drain_timeout: seconds running turns may take to finish on SIGTERM
            before they are interrupted and the partitions handed over.
        instance_id: ``auto`` (static membership, ``<host>-<slot>``), ``none``
            (dynamic membership) or an explicit static instance id.
        leave_on_stop: this instance is going away for good (a scale-in, not
            a restart in place): on a planned stop a static member leaves the
            group once its partitions are handed over, so the other actors
            take them at once instead of after the session timeout.
        request_timeout: seconds per Kafka call.
        commit_deadline: seconds a commit may retry before it fails.
        gc_threshold: the garbage collector's first-generation threshold for
            this process (``0``: CPython's own, 700); see
            :mod:`turnstream.loop_actor.gc_policy`.
        max_resident_loops: loops kept live in memory (actor and decoded
            state); beyond it the least recently used idle ones are
            passivated (kept encoded, restored on their next command).
        schema_dir: the Avro schema directory (the checkout's by default).
        log_level: the root log level.
        security: Kafka security settings for every client.
        tracing: OpenTelemetry export of the turns' spans (environment only:
            :data:`~turnstream.tracing.TRACING_ENV`); off without an endpoint.
    """

    bootstrap: str
    group_id: str = "turnstream-loop-actor"
    topic_prefix: str = ""
    topic_suffix: str = ""
    model: str = "demo"
    model_base_url: str | None = None
    model_api_key: Secret | None = None
    chunk_delay: float = 0.0
    tools: str = "demo"
    system_prompt: str = ""
    agents: tuple[str, ...] = ()
    provider_keys: Mapping[str, Secret] = field(default_factory=dict)
    txn_prefix: str = "turnstream"
    session_timeout_ms: int = 8_000
    heartbeat_interval_ms: int = 1_000
    rebalance_timeout_ms: int = 10_000
    drain_timeout: float = 30.0
    instance_id: str = "auto"
    leave_on_stop: bool = False
    request_timeout: float = 15.0
    commit_deadline: float = 30.0
    gc_threshold: int = DEFAULT_GC_THRESHOLD
    max_resident_loops: int = 10_000
    schema_dir: Path | None = None
    log_level: str = "INFO"
    security: KafkaSecurity = field(default_factory=KafkaSecurity)
    tracing: TracingSettings = field(default_factory=TracingSettings)

    def __post_init__(self) -> None:
        if not self.group_id.strip():
            raise ConfigError("group_id", "must not be blank")
        if self.tools not in TOOL_SETS:
            raise ConfigError("tools", f"expected one of {', '.join(TOOL_SETS)}")
        for path in self.agents:
            module, sep, attribute = path.partition(":")
            if not (module.strip() and sep and attribute.strip()):
                raise ConfigError(
                    "agent", f"{path!r}: expected package.module:attribute"
                )
        self._check_membership()
        for name in (
            "chunk_delay",
            "request_timeout",
            "commit_deadline",
            "drain_timeout",
        ):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ConfigError(name, "must be a finite number >= 0")
        if self.request_timeout <= 0 or self.commit_deadline <= 0:
            raise ConfigError("timeouts", "must be positive")
        if not 0 <= self.gc_threshold <= _MAX_GC_THRESHOLD:
            raise ConfigError(
                "gc_threshold",
                f"must be 0 (CPython's default) to {_MAX_GC_THRESHOLD:,}",
            )

    def _check_membership(self) -> None:
        """The consumer group's timings, the instance id and the resident set."""
        if self.session_timeout_ms < _MIN_SESSION_TIMEOUT_MS:
            raise ConfigError(
                "session_timeout_ms",
                f"must be at least {_MIN_SESSION_TIMEOUT_MS} (the broker's minimum)",
            )
        if not 0 < self.heartbeat_interval_ms * 3 <= self.session_timeout_ms:
            raise ConfigError(
                "heartbeat_interval_ms",
                "must be positive and at most a third of session_timeout_ms",
            )
        for name, least in (("rebalance_timeout_ms", 1000), ("max_resident_loops", 1)):
            if getattr(self, name) < least:
                raise ConfigError(name, f"must be at least {least}")
        if not self.instance_id.strip():
            raise ConfigError("instance_id", "must not be blank (auto, none or an id)")


def _setting(
    name: str, flags: Mapping[str, str | None], env: Mapping[str, str]
) -> str | None:
    # The flag wins over the variable; blank counts as unset.
    flag = flags.get(name)
    value = flag if flag is not None else env.get(ENV[name])
    return value.strip() if value is not None and value.strip() else None


def _secret(name: str, env: Mapping[str, str]) -> Secret | None:
    value = env.get(SECRET_ENV[name], "")
    return Secret(value) if value else None


def parse_security(
    flags: Mapping[str, str | None], env: Mapping[str, str]
) -> KafkaSecurity:
    """Kafka security settings: each from its flag, else its variable.

    Args:
        flags: flag values by setting name (``security_protocol``,
            ``sasl_mechanism``, ``sasl_username``, ``ssl_cafile``, ``ssl_certfile``,
            ``ssl_keyfile``); a missing or ``None`` entry means not given.
        env: the environment (``TURNSTREAM_KAFKA_*``; the SASL and TLS key
            passwords are read from here only).

    Raises:
        ConfigError: an unknown protocol or mechanism, or an incomplete or
            inconsistent combination (the message names the setting, never a
            secret's value).
    """

    def get(name: str) -> str | None:
        return _setting(name, flags, env)

    def path(name: str) -> Path | None:
        raw = get(name)
        return Path(raw) if raw else None

    protocol = get("security_protocol")
    mechanism = get("sasl_mechanism")
    try:
        protocol_value = (
            SecurityProtocol(protocol.upper())
            if protocol
            else SecurityProtocol.PLAINTEXT
        )
        mechanism_value = SaslMechanism(mechanism.upper()) if mechanism else None
    except ValueError as exc:
        raise ConfigError("security", f"unknown protocol or mechanism: {exc}") from None
    return KafkaSecurity(
        protocol=protocol_value,
        sasl_mechanism=mechanism_value,
        sasl_username=get("sasl_username"),
        sasl_password=_secret("sasl_password", env),
        ssl_cafile=path("ssl_cafile"),
        ssl_certfile=path("ssl_certfile"),
        ssl_keyfile=path("ssl_keyfile"),
        ssl_key_password=_secret("ssl_key_password", env),
    )


def parse_settings(
    env: Mapping[str, str],
    flags: Mapping[str, str | None] | None = None,
    *,
    security: KafkaSecurity | None = None,
) -> ActorSettings:
    """Read the settings: ``flags`` (by setting name) over the environment.

    The ``turnstream actor run`` command is the one place that takes flags; it
    hands their values here by setting name, so flags and environment are
    validated together, once. ``security`` is the Kafka security the command
    already resolved from its flags and the environment together; without it,
    it is read from ``flags`` and ``env`` here.

    Raises:
        ConfigError: an invalid or inconsistent setting (the message names it;
            never a secret's value).
    """
    args: dict[str, str | None] = dict(flags or {})

    def get(name: str) -> str | None:
        return _setting(name, args, env)

    def number(name: str, kind: type[int] | type[float]) -> dict[str, int | float]:
        raw = get(name)
        if raw is None:
            return {}
        try:
            return {name: kind(raw)}
        except ValueError:
            raise ConfigError(name, f"{raw!r} is not a number") from None

    def path(name: str) -> Path | None:
        raw = get(name)
        return Path(raw) if raw else None

    if security is None:
        security = parse_security(args, env)
    kwargs: dict[str, Any] = {
        name: value
        for name in (
            "group_id",
            "topic_prefix",
            "topic_suffix",
            "model",
            "model_base_url",
            "tools",
            "system_prompt",
            "txn_prefix",
            "log_level",
            "instance_id",
        )
        if (value := get(name)) is not None
    }
    leave = get("leave_on_stop")
    if leave is not None:
        if leave.lower() not in _BOOLEANS:
            raise ConfigError("leave_on_stop", f"{leave!r} is not true or false")
        kwargs["leave_on_stop"] = _BOOLEANS[leave.lower()]
    kwargs.update(number("chunk_delay", float))
    kwargs.update(number("session_timeout_ms", int))
    kwargs.update(number("heartbeat_interval_ms", int))
    kwargs.update(number("rebalance_timeout_ms", int))
    kwargs.update(number("drain_timeout", float))
    kwargs.update(number("request_timeout", float))
    kwargs.update(number("commit_deadline", float))
    kwargs.update(number("gc_threshold", int))
    kwargs.update(number("max_resident_loops", int))
    agents = get("agents")
    if agents:
        kwargs["agents"] = tuple(a.strip() for a in agents.split(",") if a.strip())
    keys = {
        provider: Secret(value.strip())
        for provider, variable in PROVIDER_KEY_ENV.items()
        if (value := env.get(variable, "")).strip()
    }
    return ActorSettings(
        bootstrap=resolve_bootstrap(args.get("bootstrap"), env),
        model_api_key=_secret("model_api_key", env),
        provider_keys=keys,
        schema_dir=path("schema_dir"),
        security=security,
        tracing=TracingSettings.from_env(env),
        **kwargs,
    )
