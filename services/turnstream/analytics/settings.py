"""Settings of the analytics worker, read once at start-up from flags and env.

Owns :class:`AnalyticsSettings`, :class:`Guarantee` and their parsing from an
environment mapping (:meth:`AnalyticsSettings.from_env`). Environment
variables are read only from the mapping passed in. Pure: stdlib,
:mod:`turnstream.errors`, :mod:`turnstream.config` and the pure aggregation
config; must not import faust, aiokafka, :mod:`turnstream.kafka` or
:mod:`turnstream.runtime`.

Environment variables (flags of ``python -m turnstream.analytics`` override them):

* ``KAFKA_BOOTSTRAP_SERVERS`` -- brokers; else ``127.0.0.1:$TURNSTREAM_BROKER_PORT``
  (port 19092).
* ``TURNSTREAM_SCHEMA_DIR`` -- schema directory (default: the checkout's).
* ``TURNSTREAM_TOPIC_PARTITIONS`` -- partitions of the events topic (3).
* ``TURNSTREAM_TOPIC_REPLICATION_FACTOR`` -- for the topics the app creates (1).
* ``TURNSTREAM_ANALYTICS_APP_ID`` -- faust app id = consumer group
  (``turnstream-analytics``).
* ``TURNSTREAM_ANALYTICS_EVENTS_TOPIC`` -- journal topic (``turnstream.events.v1``).
* ``TURNSTREAM_ANALYTICS_TOPIC`` -- output topic (``turnstream.analytics.v1``).
* ``TURNSTREAM_ANALYTICS_WINDOW_SECONDS`` -- tumbling window size (60).
* ``TURNSTREAM_ANALYTICS_WINDOW_RETENTION`` -- windows kept and reported (60).
* ``TURNSTREAM_ANALYTICS_DEDUPE_WINDOW`` -- event ids remembered per loop (256).
* ``TURNSTREAM_ANALYTICS_CLOSED_TURNS`` -- ended turn ids remembered per loop (64).
* ``TURNSTREAM_ANALYTICS_PUBLISH_SECONDS`` -- snapshot publish interval (5).
* ``TURNSTREAM_ANALYTICS_WEB_HOST`` / ``..._WEB_PORT`` -- web server (127.0.0.1:6066).
* ``TURNSTREAM_ANALYTICS_DATA_DIR`` -- faust data directory (``var/analytics``).
* ``TURNSTREAM_ANALYTICS_GUARANTEE`` -- ``exactly_once`` (default) or
  ``at_least_once``.
* ``TURNSTREAM_ANALYTICS_SESSION_TIMEOUT_SECONDS`` -- consumer group session
  timeout (60): how long partitions of a worker that died stay unowned.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Final, TypeVar

from turnstream.analytics.aggregate import FoldConfig
from turnstream.config import DEFAULT_BOOTSTRAP, bootstrap_source
from turnstream.errors import ConfigError

__all__ = [
    "DEFAULT_BOOTSTRAP",
    "DEFAULT_WEB_PORT",
    "ENV_PREFIX",
    "AnalyticsSettings",
    "Guarantee",
    "KafkaAuth",
]

DEFAULT_WEB_PORT: Final = 6066
ENV_PREFIX: Final = "TURNSTREAM_ANALYTICS_"

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

        p = ENV_PREFIX
        schema_dir = get("TURNSTREAM_SCHEMA_DIR", Path, None)
        return cls(
            bootstrap=",".join(s.strip() for s in bootstrap.split(",") if s.strip()),
            app_id=get(f"{p}APP_ID", str, base.app_id),
            events_topic=get(f"{p}EVENTS_TOPIC", str, base.events_topic),
            analytics_topic=get(f"{p}TOPIC", str, base.analytics_topic),
            partitions=get("TURNSTREAM_TOPIC_PARTITIONS", int, base.partitions),
            replication_factor=get(
                "TURNSTREAM_TOPIC_REPLICATION_FACTOR", int, base.replication_factor
            ),
            window_size_ms=get(
                f"{p}WINDOW_SECONDS", _seconds_to_ms, base.window_size_ms
            ),
            window_retention=get(f"{p}WINDOW_RETENTION", int, base.window_retention),
            dedupe_window=get(f"{p}DEDUPE_WINDOW", int, base.dedupe_window),
            closed_turns=get(f"{p}CLOSED_TURNS", int, base.closed_turns),
            publish_interval_s=get(
                f"{p}PUBLISH_SECONDS", float, base.publish_interval_s
            ),
            web_host=get(f"{p}WEB_HOST", str, base.web_host),
            web_port=get(f"{p}WEB_PORT", int, base.web_port),
            data_dir=get(f"{p}DATA_DIR", Path, base.data_dir),
            schema_dir=schema_dir,
            guarantee=get(f"{p}GUARANTEE", Guarantee, base.guarantee),
            session_timeout_s=get(
                f"{p}SESSION_TIMEOUT_SECONDS", float, base.session_timeout_s
            ),
        )


def _seconds_to_ms(raw: str) -> int:
    millis = round(float(raw) * 1000)
    if millis < 1:
        raise ValueError("must be at least 0.001 s")
    return millis
