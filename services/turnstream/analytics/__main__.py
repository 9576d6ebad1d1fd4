"""Composition root of the analytics worker: ``python -m turnstream.analytics``.

Owns the command line (flags override the environment, see
:mod:`turnstream.analytics.settings`), logging set-up, the signal handlers and
:func:`run_app`, which the ``turnstream analytics run`` CLI command also calls.
The only place in :mod:`turnstream.analytics` that reads ``os.environ`` or
installs signal handlers; must not import :mod:`turnstream.runtime` or
:mod:`turnstream.kafka`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from turnstream.analytics.app import AnalyticsApp
from turnstream.analytics.settings import AnalyticsSettings, Guarantee
from turnstream.errors import ConfigError

__all__ = ["build_parser", "main", "run_app", "settings_from_args"]

logger = logging.getLogger("turnstream.analytics")


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser (every flag defaults to the environment's value)."""
    parser = argparse.ArgumentParser(
        prog="python -m turnstream.analytics",
        description="Run the turnstream analytics worker over the turn journal.",
    )
    add = parser.add_argument
    add("--bootstrap", help="host:port[,host:port] (env KAFKA_BOOTSTRAP_SERVERS)")
    add("--app-id", help="faust app id and consumer group")
    add("--events-topic", help="journal topic to read")
    add("--analytics-topic", help="topic snapshots are published to")
    add("--partitions", type=int, help="partition count of the events topic")
    add("--replication-factor", type=int, help="for the topics the app creates")
    add("--window-seconds", type=float, help="tumbling window size")
    add("--window-retention", type=int, help="windows kept and reported")
    add("--publish-seconds", type=float, help="snapshot publish interval")
    add("--web-host", help="web server bind address")
    add("--web-port", type=int, help="web server port")
    add("--no-web", action="store_true", help="do not serve the JSON views")
    add("--data-dir", type=Path, help="faust data directory")
    add("--schema-dir", type=Path, help="schema directory")
    add(
        "--guarantee", choices=[g.value for g in Guarantee], help="processing guarantee"
    )
    add(
        "--session-timeout",
        type=float,
        help="consumer group session timeout, seconds (default 60)",
    )
    add("--log-level", default="INFO", help="logging level (default INFO)")
    return parser


def settings_from_args(
    args: argparse.Namespace, env: dict[str, str] | os._Environ[str]
) -> AnalyticsSettings:
    """Environment settings with the given flags applied.

    Raises:
        ConfigError: a flag or variable is invalid.
    """
    base = AnalyticsSettings.from_env(env)
    window_ms = (
        None if args.window_seconds is None else round(args.window_seconds * 1000)
    )
    return base.with_overrides(
        bootstrap=args.bootstrap,
        app_id=args.app_id,
        events_topic=args.events_topic,
        analytics_topic=args.analytics_topic,
        partitions=args.partitions,
        replication_factor=args.replication_factor,
        window_size_ms=window_ms,
        window_retention=args.window_retention,
        publish_interval_s=args.publish_seconds,
        web_host=args.web_host,
        web_port=args.web_port,
        web_enabled=False if args.no_web else None,
        data_dir=args.data_dir,
        schema_dir=args.schema_dir,
        guarantee=None if args.guarantee is None else Guarantee(args.guarantee),
        session_timeout_s=args.session_timeout,
    )


async def _serve(settings: AnalyticsSettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        app = AnalyticsApp(settings)
        logger.info(
            "analytics %s: %s -> %s, web %s",
            settings.app_id,
            settings.events_topic,
            settings.analytics_topic,
            f"http://{settings.web_host}:{settings.web_port}/turnstream/stats/"
            if settings.web_enabled
            else "off",
        )
        await app.run(stop)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def run_app(settings: AnalyticsSettings) -> None:
    """Run the analytics worker until SIGINT or SIGTERM (blocks).

    Installs its own signal handlers; call it from a composition root only.
    """
    asyncio.run(_serve(settings))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for a configuration error)."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        run_app(settings_from_args(args, os.environ))
    except ConfigError as exc:
        print(f"turnstream.analytics: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
