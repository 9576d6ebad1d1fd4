"""The loop-actor deployable's settings: declared once, read once.

Owns :data:`SETTINGS`, the declaration of every setting of ``turnstream actor
run`` (name, flags, environment variable, default, help: the command's options
and the settings reference ``docs/settings.md`` are generated from it),
:class:`ActorSettings`, :func:`parse_settings` and :func:`parse_security` (the
Kafka security part; the ``turnstream`` CLI commands that talk to Kafka use it
too, so every process reads TLS and SASL settings the same way). Every setting
has a flag and an environment variable (the flag wins); secrets (the model API
keys, the SASL password, the TLS key password) are read from the environment
only, so they never show in a process listing, and they are held as
:class:`~turnstream.config.Secret` (masked in every ``repr``).

The only module of the deployable that reads the environment, and only from
the mapping passed in. Part of the composition root.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from turnstream.config import (
    BOOTSTRAP,
    LOG_FORMAT,
    LOG_LEVEL,
    PARTITIONS,
    REPLICATION_FACTOR,
    SCHEMA_DIR,
    SECURITY,
    TIMEOUT,
    TOPIC_PREFIX,
    TOPIC_SUFFIX,
    Secret,
    Setting,
    SettingsReader,
    resolve_bootstrap,
)
from turnstream.errors import ConfigError
from turnstream.kafka.security import KafkaSecurity, parse_security
from turnstream.loop_actor.gc_policy import DEFAULT_GC_THRESHOLD
from turnstream.loop_actor.metrics_http import DEFAULT_METRICS_PORT, MetricsEndpoint
from turnstream.loop_actor.model_choice import (
    MODEL_API_KEY_ENV,
    PROVIDER_KEY_ENV,
    ModelChoice,
)
from turnstream.loop_actor.tools import TOOL_SETS
from turnstream.observability.logs import LogFormat, parse_log_format, parse_log_level
from turnstream.tracing import TracingSettings
from turnstream.tracing.settings import TRACING_SETTINGS

__all__ = [
    "GROUP",
    "MODEL",
    "MODEL_SETTINGS",
    "SETTINGS",
    "ActorSettings",
    "parse_security",
    "parse_settings",
]

_TUNING: Final = "Service tuning"

GROUP = Setting(
    name="group_id",
    env="TURNSTREAM_GROUP_ID",
    flags=("--group", "-g", "--group-id"),
    default="turnstream-loop-actor",
    help="Consumer group; actors in one group share the commands partitions.",
)
MODEL = Setting(
    name="model",
    env="TURNSTREAM_MODEL",
    flags=("--model", "-m"),
    default="demo",
    help="demo | openai:NAME | anthropic:NAME. The API key is read from "
    "OPENAI_API_KEY / ANTHROPIC_API_KEY (never a flag).",
)
MODEL_SETTINGS: Final = (
    MODEL,
    Setting(
        name="model_base_url",
        env="TURNSTREAM_MODEL_BASE_URL",
        flags=("--base-url", "--model-base-url"),
        help="Model API root, e.g. http://127.0.0.1:11434/v1 for a local "
        "OpenAI-compatible server (default: the provider's).",
    ),
    Setting(
        name="chunk_delay",
        env="TURNSTREAM_DEMO_CHUNK_DELAY",
        flags=("--chunk-delay",),
        default=0.0,
        help="Seconds between the demo model's streamed chunks.",
        kind=float,
        minimum=0.0,
    ),
)
"""The model settings ``demo`` and ``chat`` share with the actor."""

_SECRETS: Final = (
    Setting(
        name="openai_api_key",
        env=PROVIDER_KEY_ENV["openai"],
        help="OpenAI's API key, for the openai:NAME models (environment only).",
        secret=True,
    ),
    Setting(
        name="anthropic_api_key",
        env=PROVIDER_KEY_ENV["anthropic"],
        help="Anthropic's API key, for the anthropic:NAME models (environment only).",
        secret=True,
    ),
    Setting(
        name="model_api_key",
        env=MODEL_API_KEY_ENV,
        help="The model API key when the provider's own variable is unset "
        "(environment only).",
        secret=True,
    ),
)


def _tuning(name: str, flag: str, text: str, default: object = None) -> Setting:
    # Checked by parse_settings (one message naming the setting), not by click.
    return Setting(
        name=name,
        env=f"TURNSTREAM_{name.upper()}",
        flags=(flag,),
        default=default,  # type: ignore[arg-type]
        help=text,
        panel=_TUNING,
    )


SETTINGS: Final[tuple[Setting, ...]] = (
    GROUP,
    *MODEL_SETTINGS,
    Setting(
        name="tools",
        env="TURNSTREAM_TOOLS",
        flags=("--tools",),
        default="demo",
        help="Tool set offered to the model: demo (add, word_count) or none.",
    ),
    Setting(
        name="system_prompt",
        env="TURNSTREAM_SYSTEM_PROMPT",
        flags=("--system-prompt",),
        help="System prompt sent with every model request.",
    ),
    Setting(
        name="agents",
        env="TURNSTREAM_AGENTS",
        flags=("--agent",),
        help="An agent to host, as package.module:attribute (an Agent, or a "
        "function returning one), importable from the current directory; "
        "repeat it to host several (or set TURNSTREAM_AGENTS, comma-separated). "
        "Without it the service hosts the built-in agent 'turnstream' made of "
        "the model, tools and system prompt settings.",
        kind=list,
        flag_reads_env=False,  # a comma-separated list, split by the parser
    ),
    Setting(
        name="metrics_port",
        env="TURNSTREAM_METRICS_PORT",
        flags=("--metrics-port",),
        default=DEFAULT_METRICS_PORT,
        help="Port of /metrics (Prometheus) and /ready; 0 turns them off. Give "
        "each actor on one host its own port.",
        kind=int,
        minimum=0,
        maximum=65535,
    ),
    Setting(
        name="metrics_host",
        env="TURNSTREAM_METRICS_HOST",
        flags=("--metrics-host",),
        default="127.0.0.1",
        help="Address /metrics and /ready bind to (0.0.0.0 to expose them).",
    ),
    Setting(
        name="ensure_topics",
        env=None,
        flags=("--ensure-topics",),
        help="Apply this topic set (e.g. infra/topics.yaml) before starting; "
        "exits 1 if an existing topic differs from it.",
    ),
    PARTITIONS,
    REPLICATION_FACTOR,
    LOG_FORMAT,
    LOG_LEVEL,
    _tuning("txn_prefix", "--txn-prefix", "Transactional-id prefix.", "turnstream"),
    _tuning(
        "session_timeout_ms",
        "--session-timeout-ms",
        "Consumer-group session timeout in ms (>= 6000): how long a crashed "
        "actor's partitions wait before another actor takes them, unless its "
        "replacement (same instance id) comes first.",
        8000,
    ),
    _tuning(
        "heartbeat_interval_ms",
        "--heartbeat-interval-ms",
        "Consumer heartbeat in ms (at most a third of the session timeout).",
        1000,
    ),
    _tuning(
        "rebalance_timeout_ms",
        "--rebalance-timeout-ms",
        "How long a rebalance waits for members to rejoin, in ms.",
        10000,
    ),
    _tuning(
        "drain_timeout",
        "--drain-timeout",
        "Seconds running turns may take to finish on SIGTERM before they are "
        "interrupted and the partitions handed over.",
        30.0,
    ),
    _tuning(
        "instance_id",
        "--instance-id",
        "Static group membership: auto (<host>-<slot>, the lowest free local "
        "slot, so a restarted actor takes its partitions back without a "
        "rebalance), none (dynamic), or an explicit unique id.",
        "auto",
    ),
    Setting(
        name="leave_on_stop",
        env="TURNSTREAM_LEAVE_ON_STOP",
        flags=("--leave-on-stop",),
        default=False,
        help="This instance is going away for good (a scale-in, not a restart "
        "in place): on SIGTERM it leaves the group once its partitions are "
        "handed over, so the other actors take them at once instead of after "
        "the session timeout.",
        kind=bool,
        panel=_TUNING,
    ),
    _tuning(
        "commit_deadline",
        "--commit-deadline",
        "Seconds one commit may retry before it fails.",
        30.0,
    ),
    _tuning(
        "gc_threshold",
        "--gc-threshold",
        "The garbage collector's first-generation threshold for this process "
        "(0 keeps CPython's 700).",
        DEFAULT_GC_THRESHOLD,
    ),
    _tuning(
        "max_resident_loops",
        "--max-resident-loops",
        "Loops kept live in memory; beyond it the least recently used idle "
        "ones are passivated and restored on their next command.",
        10000,
    ),
    dataclasses.replace(SCHEMA_DIR, panel=_TUNING),
    BOOTSTRAP,
    dataclasses.replace(TIMEOUT, name="request_timeout", default=15.0),
    TOPIC_PREFIX,
    TOPIC_SUFFIX,
    *SECURITY,
    *_SECRETS,
    *TRACING_SETTINGS,
)
"""Every setting of ``turnstream actor run``, in ``--help`` order."""

_BY_NAME: Final = {s.name: s for s in SETTINGS}

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
        log_format: ``json`` (one object per line) or ``text``.
        metrics_host: the address ``/metrics`` and ``/ready`` bind to.
        metrics_port: their port; 0 turns them off.
        ensure_topics: a topic set to apply before starting (``None``: only
            verify the declared one).
        partitions: partitions of every topic the actor creates or checks
            (``None``: the topic set's).
        replication_factor: their replication factor (``None``: the cluster's).
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
    log_format: LogFormat = LogFormat.JSON
    metrics_host: str = "127.0.0.1"
    metrics_port: int = DEFAULT_METRICS_PORT
    ensure_topics: Path | None = None
    partitions: int | None = None
    replication_factor: int | None = None
    security: KafkaSecurity = field(default_factory=KafkaSecurity)
    tracing: TracingSettings = field(default_factory=TracingSettings)

    def __post_init__(self) -> None:
        MetricsEndpoint(host=self.metrics_host, port=self.metrics_port)
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

    @property
    def metrics(self) -> MetricsEndpoint:
        """Where ``/metrics`` and ``/ready`` listen."""
        return MetricsEndpoint(host=self.metrics_host, port=self.metrics_port)

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


def parse_settings(
    env: Mapping[str, str],
    flags: Mapping[str, object] | None = None,
    *,
    security: KafkaSecurity | None = None,
) -> ActorSettings:
    """Read the settings: ``flags`` (by setting name) over the environment.

    The ``turnstream actor run`` command hands every flag here by setting
    name, so flags and environment are validated together, once (see
    :func:`turnstream.config.lookup` for which of the two is read).
    ``security`` is Kafka security a caller already resolved; without it, it
    is read from ``flags`` and ``env`` here.

    Raises:
        ConfigError: an invalid or inconsistent setting (the message names it;
            never a secret's value).
    """
    read = SettingsReader(_BY_NAME, flags or {}, env)
    if security is None:
        security = parse_security(flags or {}, env)
    bootstrap = resolve_bootstrap(read.text("bootstrap"), env)
    kwargs: dict[str, Any] = {}
    log_format = read.text("log_format")
    if log_format is not None:
        kwargs["log_format"] = parse_log_format(log_format)
    log_level = read.text("log_level")
    if log_level is not None:
        parse_log_level(log_level)
    numbers: dict[str, type[int] | type[float]] = {
        "chunk_delay": float,
        "session_timeout_ms": int,
        "heartbeat_interval_ms": int,
        "rebalance_timeout_ms": int,
        "drain_timeout": float,
        "request_timeout": float,
        "commit_deadline": float,
        "gc_threshold": int,
        "max_resident_loops": int,
        "metrics_port": int,
        "partitions": int,
        "replication_factor": int,
    }
    for name, kind in numbers.items():
        if (number := read.number(name, kind)) is not None:
            kwargs[name] = number
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
        "metrics_host",
    ):
        if (value := read.text(name)) is not None:
            kwargs[name] = value
    for name in ("schema_dir", "ensure_topics"):
        if (value := read.text(name)) is not None:
            kwargs[name] = Path(value)
    if (leave := read.switch("leave_on_stop")) is not None:
        kwargs["leave_on_stop"] = leave
    if (agents := read.names("agents")) is not None:
        kwargs["agents"] = agents
    # The spec, base URL and key checked together, as a model client would;
    # the chosen model's key (its provider's, else the generic one) is the key.
    choice = ModelChoice.parse(
        str(kwargs.get("model", MODEL.default)),
        base_url=kwargs.get("model_base_url"),
        env=env,
        chunk_delay=kwargs.get("chunk_delay", 0.0),
    )
    keys = {
        provider: secret
        for provider in PROVIDER_KEY_ENV
        if (secret := read.secret(f"{provider}_api_key")) is not None
    }
    return ActorSettings(
        bootstrap=bootstrap,
        model_api_key=Secret(choice.api_key)
        if choice.api_key
        else read.secret("model_api_key"),
        provider_keys=keys,
        security=security,
        tracing=TracingSettings.from_env(env),
        **kwargs,
    )
