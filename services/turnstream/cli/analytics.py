"""``turnstream analytics run``: the analytics worker over the turn journal.

Owns the ``analytics`` command group: flags over the environment (see
:mod:`turnstream.analytics.settings` for the variables) into
:class:`~turnstream.analytics.settings.AnalyticsSettings`, validated once, then
:func:`turnstream.analytics.run_app` until SIGINT or SIGTERM (it installs its own
handlers in ``turnstream.analytics.__main__``). faust is an optional extra: it
is imported only when the worker starts, and its absence is a one-line error.
Must not import aiokafka or faust.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from turnstream.analytics.settings import AnalyticsSettings
from turnstream.cli.failures import exit_on_errors, fail
from turnstream.cli.kafka_options import BootstrapOption
from turnstream.cli.options import LogFormatOption, LogLevelOption
from turnstream.cli.settings import ExitCode, parse_log_format, parse_log_level
from turnstream.kafka.connection import resolve_bootstrap
from turnstream.observability import configure_logging

__all__ = ["app"]

app = typer.Typer(
    help="Run the analytics worker (faust) that folds the journal into stats.",
    no_args_is_help=True,
)


@app.command()
def run(
    *,
    bootstrap: BootstrapOption = None,
    app_id: Annotated[
        str | None,
        typer.Option(
            "--app-id",
            help="faust app id and consumer group (env TURNSTREAM_ANALYTICS_APP_ID).",
            show_default=False,
        ),
    ] = None,
    window_seconds: Annotated[
        float | None,
        typer.Option(
            "--window-seconds",
            min=0.001,
            help="Tumbling window size (env TURNSTREAM_ANALYTICS_WINDOW_SECONDS).",
            show_default=False,
        ),
    ] = None,
    publish_seconds: Annotated[
        float | None,
        typer.Option(
            "--publish-seconds",
            min=0.001,
            help="Seconds between snapshots "
            "(env TURNSTREAM_ANALYTICS_PUBLISH_SECONDS).",
            show_default=False,
        ),
    ] = None,
    web_port: Annotated[
        int | None,
        typer.Option(
            "--web-port",
            min=1,
            max=65535,
            help="Port of the JSON views (env TURNSTREAM_ANALYTICS_WEB_PORT).",
            show_default=False,
        ),
    ] = None,
    no_web: Annotated[
        bool, typer.Option("--no-web", help="Do not serve the JSON views.")
    ] = False,
    log_format: LogFormatOption = "json",
    log_level: LogLevelOption = "INFO",
) -> None:
    """Fold the turn journal into per-loop and windowed stats until Ctrl-C.

    Needs the analytics extra (pip install -e '.[analytics]'). Exit codes: 0
    clean stop, 1 failure, 2 bad settings or the extra missing.
    """
    with exit_on_errors():
        fmt = parse_log_format(log_format)
        level = parse_log_level(log_level)
        settings = AnalyticsSettings.from_env(os.environ).with_overrides(
            bootstrap=resolve_bootstrap(bootstrap, os.environ),
            app_id=app_id,
            window_size_ms=None
            if window_seconds is None
            else round(window_seconds * 1000),
            publish_interval_s=publish_seconds,
            web_port=web_port,
            web_enabled=False if no_web else None,
        )
        try:
            # faust is an optional extra: import it only when the worker starts.
            from turnstream.analytics import run_app  # noqa: PLC0415
        except ImportError:
            raise fail(
                "the analytics worker needs faust: pip install -e '.[analytics]'",
                ExitCode.USAGE,
            ) from None
    configure_logging(fmt, level=level)
    with exit_on_errors(settings.bootstrap):
        run_app(settings)
    raise typer.Exit(int(ExitCode.OK))
