"""``turnstream analytics run``: the faust analytics worker, from flags and environment.

Owns the ``analytics`` command group and :func:`analytics_settings`, which
resolves every worker setting once -- each flag over its ``TURNSTREAM_ANALYTICS_*``
variable, validated together by
:class:`~turnstream.analytics.settings.AnalyticsSettings` -- and the command,
which installs the signal handlers (SIGINT/SIGTERM stop it in order) and runs
:func:`turnstream.analytics.serve`. This is the worker's one entry point;
``python -m turnstream.analytics`` is its alias. faust is an optional extra: it is
imported only when the worker starts. Must not import aiokafka.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import typer

from turnstream.analytics.settings import (
    SETTINGS,
    AnalyticsSettings,
    Guarantee,
    KafkaAuth,
)
from turnstream.cli.failures import exit_on_errors, explain, fail
from turnstream.cli.kafka_options import TopicAffixes, kafka_options
from turnstream.cli.setting_options import environment_epilog, setting_options
from turnstream.cli.settings import (
    ExitCode,
    KafkaTarget,
    parse_log_format,
    parse_log_level,
)
from turnstream.config import LOG_FORMAT, LOG_LEVEL, SECURITY
from turnstream.errors import ConfigError
from turnstream.kafka.admin.probe import check_broker, check_worker_grants
from turnstream.kafka.connection import resolve_bootstrap
from turnstream.kafka.diagnose import principal
from turnstream.kafka.errors import KafkaAuthorizationError
from turnstream.kafka.security import KafkaSecurity
from turnstream.observability import configure_logging

__all__ = ["analytics_auth", "analytics_settings", "app"]

app = typer.Typer(
    # Plain click help: it wraps long option and variable names instead of
    # cutting them at 80 columns, as rich panels do.
    rich_markup_mode=None,
    help="Run the analytics worker (faust) that folds the journal into stats.",
    no_args_is_help=True,
)


# Seconds the process may take to end after the worker stopped by itself.
_TEARDOWN_S = 2.0


def _exit_if_stuck(code: ExitCode, *, seconds: float) -> None:
    """End the process with ``code`` if it is still alive ``seconds`` from now.

    Why the worker stopped was already reported; what is left is faust's
    teardown, which must not keep a failed worker running (a daemon timer: a
    process that ends in time never sees it fire).
    """

    def end() -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(code))

    timer = threading.Timer(seconds, end)
    timer.daemon = True
    timer.start()


def analytics_auth(security: KafkaSecurity) -> KafkaAuth:
    """The worker's view of the resolved security settings (TLS context built here).

    Raises:
        ConfigError: a TLS file cannot be loaded.
    """
    password = security.sasl_password
    return KafkaAuth(
        protocol=security.protocol.value,
        sasl_mechanism=security.sasl_mechanism.value
        if security.sasl_mechanism
        else None,
        sasl_username=security.sasl_username,
        sasl_password=password.reveal() if password else None,
        ssl_context=security.ssl_context(),
    )


def affixed_names(
    env: Mapping[str, str], *, prefix: str, suffix: str, events: str
) -> dict[str, str]:
    """The worker's names for an isolated topic set (empty without affixes).

    The journal is the set's events topic; the analytics topic and the app id
    (its consumer group and changelog) get the same prefix and suffix, so two
    topic sets never share a group. A name set in the environment is kept.
    """
    if not prefix and not suffix:
        return {}
    defaults = AnalyticsSettings()
    names = {
        "events_topic": events,
        "analytics_topic": f"{prefix}{defaults.analytics_topic}{suffix}",
        "app_id": f"{prefix}{defaults.app_id}{suffix}",
    }
    variables = {s.name: s.env or "" for s in SETTINGS}
    return {k: v for k, v in names.items() if not env.get(variables[k], "").strip()}


def analytics_settings(
    env: Mapping[str, str],
    *,
    bootstrap: str | None = None,
    auth: KafkaAuth | None = None,
    app_id: str | None = None,
    events_topic: str | None = None,
    analytics_topic: str | None = None,
    partitions: int | None = None,
    replication_factor: int | None = None,
    window_seconds: float | None = None,
    window_retention: int | None = None,
    publish_seconds: float | None = None,
    web_host: str | None = None,
    web_port: int | None = None,
    no_web: bool = False,
    data_dir: Path | None = None,
    schema_dir: Path | None = None,
    guarantee: str | None = None,
    session_timeout: float | None = None,
) -> AnalyticsSettings:
    """The worker's settings: the environment's, with the given flags applied.

    Raises:
        ConfigError: a flag or variable is invalid (named in the message).
    """
    if guarantee is not None and guarantee not in {g.value for g in Guarantee}:
        choices = ", ".join(g.value for g in Guarantee)
        raise ConfigError("--guarantee", f"{guarantee!r}: expected one of {choices}")
    base = AnalyticsSettings.from_env(env)
    return base.with_overrides(
        bootstrap=None if bootstrap is None else resolve_bootstrap(bootstrap, env),
        app_id=app_id,
        events_topic=events_topic,
        analytics_topic=analytics_topic,
        partitions=partitions,
        replication_factor=replication_factor,
        window_size_ms=None if window_seconds is None else round(window_seconds * 1000),
        window_retention=window_retention,
        publish_interval_s=publish_seconds,
        web_host=web_host,
        web_port=web_port,
        web_enabled=False if no_web else None,
        data_dir=data_dir,
        schema_dir=schema_dir,
        guarantee=None if guarantee is None else Guarantee(guarantee),
        session_timeout_s=session_timeout,
        auth=auth,
    )


_FLAGGED: Final = (*SETTINGS, LOG_FORMAT, LOG_LEVEL)


def _path(value: object) -> Path | None:
    return Path(str(value)) if value else None


@app.command(epilog=environment_epilog((*SETTINGS, *SECURITY)))
@kafka_options(topics=TopicAffixes.FLAGS)
@setting_options(_FLAGGED)
def run(*, target: KafkaTarget, flags: dict[str, object]) -> None:
    """Fold the turn journal into per-loop and windowed stats until Ctrl-C.

    Per loop and per tumbling window (and in all-time totals): turns started,
    done, failed (by failure kind) and interrupted; turn latency percentiles
    (p50/p90/p99, from TurnStarted to the terminal); steps and tool calls per
    turn; token usage by model and by loop. Published as Avro snapshots to the
    analytics topic and served as JSON (GET /turnstream/stats/ and
    /turnstream/stats/windows/). --topic-prefix/--topic-suffix read an
    isolated topic set's journal; they also name the analytics topic and the
    app id (the consumer group), unless those are given.

    Needs the analytics extra (pip install -e '.[analytics]'). The Kafka security
    flags and TURNSTREAM_KAFKA_* variables are the other commands'. Exit codes: 0
    clean stop, 1 failure, 2 bad settings or the extra missing, 3 Kafka
    unreachable, 4 login refused, 5 TLS failed, 6 ACL denied.
    """
    with exit_on_errors():
        fmt = parse_log_format(str(flags["log_format"] or LOG_FORMAT.default))
        level = parse_log_level(str(flags["log_level"] or LOG_LEVEL.default))
        affixed = affixed_names(
            os.environ,
            prefix=target.prefix,
            suffix=target.suffix,
            events=target.topics.events,
        )
        own: dict[str, Any] = {s.name: flags[s.name] for s in SETTINGS if s.flags}
        for name in ("app_id", "events_topic", "analytics_topic"):
            own[name] = own[name] or affixed.get(name)
        own["data_dir"] = _path(own["data_dir"])
        own["schema_dir"] = _path(own["schema_dir"])
        settings = analytics_settings(
            os.environ,
            bootstrap=target.bootstrap,
            auth=analytics_auth(target.security),
            **own,
        )
        try:
            # faust is an optional extra: import it only when the worker starts.
            from turnstream.analytics import run as run_worker  # noqa: PLC0415
            from turnstream.analytics.errors import (  # noqa: PLC0415
                WorkerDeniedError,
                WorkerStoppedError,
            )
        except ImportError:
            raise fail(
                "the analytics worker needs faust: pip install -e '.[analytics]'",
                ExitCode.USAGE,
            ) from None
    configure_logging(fmt, level=level)

    async def preflight() -> None:
        # Reach, authenticate and authorise first, so a misconfiguration is the
        # one classified line every command prints, not a faust traceback.
        await check_broker(target.connection, security=target.security)
        await check_worker_grants(
            target.connection,
            security=target.security,
            group_id=settings.app_id,
            topic=settings.events_topic,
            transactional_id=(
                f"{settings.app_id}-grant-check"
                if settings.guarantee is Guarantee.EXACTLY_ONCE
                else None
            ),
        )

    async def worker() -> None:
        try:
            await run_worker(settings, preflight=preflight)
        except WorkerStoppedError as exc:
            # Only a stop of the running worker: faust may leave tasks behind.
            # Errors before it started (the preflight's) end the command as
            # any command's do, without the timer (which would end whatever
            # process runs the command, a test's included).
            stopped: Exception = exc
            if isinstance(exc, WorkerDeniedError):
                stopped = KafkaAuthorizationError(
                    principal=principal(target.security),
                    permission=exc.permission,
                    resource_type=exc.resource_type,
                    resource=exc.resource,
                    operation="run the analytics worker",
                )
            # Said now, once: faust may leave tasks that ignore their
            # cancellation, and asyncio.run's teardown then never returns.
            message, code = explain(stopped, settings.bootstrap)
            _exit_if_stuck(code, seconds=_TEARDOWN_S)
            raise fail(message, code) from None

    with exit_on_errors(settings.bootstrap):
        asyncio.run(worker())
    raise typer.Exit(int(ExitCode.OK))
