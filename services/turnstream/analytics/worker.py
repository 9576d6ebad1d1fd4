"""Running the analytics worker until told to stop.

Owns :func:`run`, the worker's whole start-up (the caller's Kafka checks, the
signal handlers, the worker until SIGINT or SIGTERM), and :func:`serve`: build
the faust :class:`~turnstream.analytics.app.AnalyticsApp` from validated
settings, log where it reads and publishes, and run it until ``stop`` is set.
The ``turnstream analytics run`` command (the one entry point; ``python -m
turnstream.analytics`` is its alias) parses the settings and calls :func:`run`.
Pulls in faust; must not import :mod:`turnstream.runtime` or
:mod:`turnstream.kafka`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from turnstream.analytics.app import AnalyticsApp
from turnstream.analytics.settings import AnalyticsSettings
from turnstream.observability.signals import stop_on_signals

__all__ = ["run", "serve"]

logger = logging.getLogger("turnstream.analytics")


async def serve(settings: AnalyticsSettings, stop: asyncio.Event) -> None:
    """Run the analytics worker until ``stop`` is set, then stop it in order."""
    app = AnalyticsApp(settings)
    logger.info(
        "analytics %s: %s -> %s, web %s, codec %s",
        settings.app_id,
        settings.events_topic,
        settings.analytics_topic,
        f"http://{settings.web_host}:{settings.web_port}/turnstream/stats/"
        if settings.web_enabled
        else "off",
        app.wire.path,
    )
    await app.run(stop)


async def run(
    settings: AnalyticsSettings, *, preflight: Callable[[], Awaitable[None]]
) -> None:
    """Start the worker and run it until SIGINT or SIGTERM stop it in order.

    Args:
        settings: the parsed settings.
        preflight: the caller's checks that Kafka answers, accepts the login
            and grants what the worker needs (this package never imports
            :mod:`turnstream.kafka`); run before faust starts.
    """
    await preflight()
    stop = asyncio.Event()
    with stop_on_signals(stop.set):
        await serve(settings, stop)
