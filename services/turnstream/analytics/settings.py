"""Settings of the analytics worker, read once at start-up from flags and env.

Owns :data:`SETTINGS`, :class:`AnalyticsSettings`, :class:`Guarantee` and their
parsing from an environment mapping (:meth:`AnalyticsSettings.from_env`). Environment
variables are read only from the mapping passed in. Pure: stdlib,
:mod:`turnstream.errors`, :mod:`turnstream.config` and the pure aggregation
config; must not import faust, aiokafka, :mod:`turnstream.kafka` or
:mod:`turnstream.runtime`.

Every setting is declared once in :data:`SETTINGS` (flag, variable, default,
help): ``turnstream analytics run`` generates its options from it and
``docs/settings.md`` lists it. Flags override the variables.
"""

from __future__ import annotations

import dataclasses
import re
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Final, TypeVar

from turnstream.analytics.aggregate import FoldConfig
from turnstream.config import (
    DEFAULT_BOOTSTRAP,
    PARTITIONS,
    REPLICATION_FACTOR,
    SCHEMA_DIR,
    Setting,
    bootstrap_source,
)
from turnstream.errors import ConfigError

__all__ = [
    "DEFAULT_BOOTSTRAP",
    "DEFAULT_WEB_PORT",
    "ENV_PREFIX",
    "SETTINGS",
    "AnalyticsSettings",
    "Guarantee",
    "KafkaAuth",
]

DEFAULT_WEB_PORT: Final = 6066
ENV_PREFIX: Final = "TURNSTREAM_ANALYTICS_"


def _own(
    name: str, flag: str | None, variable: str | None, text: str, **more: object
) -> Setting:
    # Read by from_env (a flag given overrides it), so click leaves it alone.
    return Setting(
        name=name,
        env=variable,
        flags=(flag,) if flag else (),
        help=text,
        flag_reads_env=False,
        **more,  # type: ignore[arg-type]
    )


SETTINGS: Final[tuple[Setting, ...]] = (
    _own(
        "app_id",
        "--app-id",
        f"{ENV_PREFIX}APP_ID",
        "faust app id and consumer group.",
        default="turnstream-analytics",
    ),
    _own(
        "events_topic",
        "--events-topic",
        f"{ENV_PREFIX}EVENTS_TOPIC",
        "Journal topic to read.",
        default="turnstream.events.v1",
    ),
    _own(
        "analytics_topic",
        "--analytics-topic",
        f"{ENV_PREFIX}TOPIC",
        "Topic snapshots are published to.",
        default="turnstream.analytics.v1",
    ),
    # The variables every command reads; the worker checks the values itself.
    dataclasses.replace(
        PARTITIONS,
        default=3,
        help="Partition count of the events topic.",
        minimum=None,
        flag_reads_env=False,
    ),
    dataclasses.replace(
        REPLICATION_FACTOR,
        default=1,
        help="For the topics the worker creates.",
        minimum=None,
        flag_reads_env=False,
    ),
    _own(
        "window_seconds",
        "--window-seconds",
        f"{ENV_PREFIX}WINDOW_SECONDS",
        "Tumbling window size.",
        default=60,
        kind=float,
    ),
    _own(
        "window_retention",
        "--window-retention",
        f"{ENV_PREFIX}WINDOW_RETENTION",
        "Windows kept and reported.",
        default=60,
        kind=int,
    ),
    _own(
        "publish_seconds",
        "--publish-seconds",
        f"{ENV_PREFIX}PUBLISH_SECONDS",
        "Seconds between snapshots.",
        default=5.0,
        kind=float,
    ),
    _own(
        "web_host",
        "--web-host",
        f"{ENV_PREFIX}WEB_HOST",
        "Bind address of the JSON views.",
        default="127.0.0.1",
    ),
    _own(
        "web_port",
        "--web-port",
        f"{ENV_PREFIX}WEB_PORT",
        "Port of the JSON views.",
        default=DEFAULT_WEB_PORT,
        kind=int,
    ),
    _own("no_web", "--no-web", None, "Do not serve the JSON views.", kind=bool),
    _own(
        "data_dir",
        "--data-dir",
        f"{ENV_PREFIX}DATA_DIR",
        "faust data directory.",
        default="var/analytics",
    ),
    dataclasses.replace(SCHEMA_DIR, flag_reads_env=False),
    _own(
        "guarantee",
        "--guarantee",
        f"{ENV_PREFIX}GUARANTEE",
        "Processing guarantee: exactly_once or at_least_once.",
        default="exactly_once",
    ),
    _own(
        "session_timeout",
        "--session-timeout",
        f"{ENV_PREFIX}SESSION_TIMEOUT_SECONDS",
        "Consumer-group session timeout, seconds: how long the partitions of "
        "a worker that died stay unowned.",
        default=60.0,
        kind=float,
    ),
    _own(
        "dedupe_window",
        None,
        f"{ENV_PREFIX}DEDUPE_WINDOW",
        "Event ids remembered per loop.",
        default=256,
    ),
    _own(
        "closed_turns",
        None,
        f"{ENV_PREFIX}CLOSED_TURNS",
        "Ended turn ids remembered per loop.",
        default=64,
    ),
)
"""The analytics worker's own settings (the Kafka ones are every command's)."""
_ENV: Final = {s.name: s.env for s in SETTINGS if s.env}


_SERVER = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")

_T = TypeVar("_T")


class Guarantee(StrEnum):
    """The faust processing guarantee (both read the journal ``read_committed``).

    ``exactly_once`` is the default: faust writes the table changelog and
    commits the input offsets in one transaction per partition; a restart
    waits about 10 s for faust's aborted-transaction detection.
    ``at_least_once`` commits offsets after the changelog is flushed and
    restarts faster; what it processes again after a crash is skipped by the
    aggregation's own offset mark. Both keep the counts exact across restarts
    and ``kill -9`` (tests/integration/test_analytics_crash.py).
    """

    AT_LEAST_ONCE = "at_least_once"
    EXACTLY_ONCE = "exactly_once"


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaAuth:
    """How the worker's Kafka clients authenticate, already validated.

    The ``turnstream analytics run`` command builds it from the same security
    flags and ``TURNSTREAM_KAFKA_*`` variables every command reads
    (:mod:`turnstream.cli.kafka_options`); this package only hands it to faust.

    Attributes:
        protocol: ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``.
        sasl_mechanism: ``PLAIN``, ``SCRAM-SHA-256`` or ``SCRAM-SHA-512``.
        sasl_username: the SASL user.
        sasl_password: the SASL password (never shown by ``repr``).
        ssl_context: the TLS context (CA, client certificate) for TLS protocols.
    """

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)

    @property
    def uses_sasl(self) -> bool:
        """Whether the protocol authenticates with SASL."""
        return self.protocol.startswith("SASL_")


@dataclass(frozen=True, slots=True)
class AnalyticsSettings:
    """Everything the analytics worker needs, validated.

    Attributes:
        bootstrap: comma-separated ``host:port`` list.
        app_id: faust app id; also the consumer group and the prefix of the
            changelog topic (``<app_id>-loops-changelog``).
        events_topic: the journal topic.
        analytics_topic: where snapshots are published (created if missing).
        partitions: partition count of the events topic; the table uses the same.
        replication_factor: for the topics the app creates.
        window_size_ms: tumbling window length.
        window_retention: windows kept per loop and reported.
        dedupe_window: event ids remembered per loop.
        closed_turns: ended turn ids remembered per loop.
        publish_interval_s: how often a changed snapshot is published.
        web_host: address the web server binds.
        web_port: port of the web server.
        web_enabled: whether to serve the JSON views.
        data_dir: faust's data directory.
        schema_dir: the schema directory; ``None`` means the checkout's.
        guarantee: the processing guarantee.
        session_timeout_s: consumer group session timeout; the partitions of a
            worker that died are reassigned after it (the broker bounds it,
            6 s to 30 min by default).
        auth: TLS and SASL settings of every client (plaintext by default).
    """

    bootstrap: str = DEFAULT_BOOTSTRAP
    app_id: str = "turnstream-analytics"
    events_topic: str = "turnstream.events.v1"
    analytics_topic: str = "turnstream.analytics.v1"
    partitions: int = 3
    replication_factor: int = 1
    window_size_ms: int = 60_000
    window_retention: int = 60
    dedupe_window: int = 256
    closed_turns: int = 64
    publish_interval_s: float = 5.0
    web_host: str = "127.0.0.1"
    web_port: int = DEFAULT_WEB_PORT
    web_enabled: bool = True
    data_dir: Path = field(default_factory=lambda: Path("var/analytics"))
    schema_dir: Path | None = None
    guarantee: Guarantee = Guarantee.EXACTLY_ONCE
    session_timeout_s: float = 60.0
    auth: KafkaAuth = field(default_factory=KafkaAuth)

    def __post_init__(self) -> None:
        for server in self.bootstrap.split(","):
            match = _SERVER.match(server.strip())
            if match is None or not 1 <= int(match.group(1)) <= 65535:
                raise ConfigError("bootstrap", f"{server.strip()!r} is not host:port")
        for name in ("events_topic", "analytics_topic"):
            if not _TOPIC.match(getattr(self, name)):
                raise ConfigError(name, "is not a valid topic name")
        if self.events_topic == self.analytics_topic:
            raise ConfigError("analytics_topic", "must differ from events_topic")
        if not re.match(r"^[A-Za-z0-9._-]{1,200}$", self.app_id):
            raise ConfigError("app_id", "use letters, digits, '.', '_' and '-'")
        for name in (
            "partitions",
            "replication_factor",
            "window_size_ms",
            "window_retention",
            "dedupe_window",
            "closed_turns",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(name, "must be at least 1")
        if self.publish_interval_s <= 0:
            raise ConfigError("publish_interval_s", "must be positive")
        if self.session_timeout_s <= 0:
            raise ConfigError("session_timeout_s", "must be positive")
        if not 0 <= self.web_port <= 65535:
            raise ConfigError("web_port", "must be a port number")

    def fold_config(self) -> FoldConfig:
        """The pure aggregation's configuration."""
        return FoldConfig(
            window_size_ms=self.window_size_ms,
            window_retention=self.window_retention,
            dedupe_window=self.dedupe_window,
            closed_turns=self.closed_turns,
        )

    def with_overrides(self, **changes: object) -> AnalyticsSettings:
        """A copy with ``changes`` applied and validated (``None`` values ignored)."""
        kept = {k: v for k, v in changes.items() if v is not None}
        return replace(self, **kept)  # type: ignore[arg-type]

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AnalyticsSettings:
        """Settings from an environment mapping; unset variables keep the defaults.

        Raises:
            ConfigError: a variable is present but invalid.
        """
        base = cls()
        bootstrap, _ = bootstrap_source(None, env)

        def get(name: str, parse: Callable[[str], _T], default: _T) -> _T:
            raw = env.get(name, "").strip()
            if not raw:
                return default
            try:
                return parse(raw)
            except ValueError as exc:
                raise ConfigError(name, f"{raw!r} is invalid: {exc}") from None

        e = _ENV
        return cls(
            bootstrap=",".join(s.strip() for s in bootstrap.split(",") if s.strip()),
            app_id=get(e["app_id"], str, base.app_id),
            events_topic=get(e["events_topic"], str, base.events_topic),
            analytics_topic=get(e["analytics_topic"], str, base.analytics_topic),
            partitions=get(e["partitions"], int, base.partitions),
            replication_factor=get(
                e["replication_factor"], int, base.replication_factor
            ),
            window_size_ms=get(
                e["window_seconds"], _seconds_to_ms, base.window_size_ms
            ),
            window_retention=get(e["window_retention"], int, base.window_retention),
            dedupe_window=get(e["dedupe_window"], int, base.dedupe_window),
            closed_turns=get(e["closed_turns"], int, base.closed_turns),
            publish_interval_s=get(
                e["publish_seconds"], float, base.publish_interval_s
            ),
            web_host=get(e["web_host"], str, base.web_host),
            web_port=get(e["web_port"], int, base.web_port),
            data_dir=get(e["data_dir"], Path, base.data_dir),
            schema_dir=get(e["schema_dir"], Path, None),
            guarantee=get(e["guarantee"], Guarantee, base.guarantee),
            session_timeout_s=get(e["session_timeout"], float, base.session_timeout_s),
        )


def _seconds_to_ms(raw: str) -> int:
    millis = round(float(raw) * 1000)
    if millis < 1:
        raise ValueError("must be at least 0.001 s")
    return millis
