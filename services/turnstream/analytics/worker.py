"""Running the analytics worker until told to stop.

Owns :func:`serve`: build the faust :class:`~turnstream.analytics.app.
AnalyticsApp` from validated settings, log where it reads and publishes, and
run it until ``stop`` is set. The ``turnstream analytics run`` command (the one
entry point; ``python -m turnstream.analytics`` is its alias) reads the
settings and installs the signal handlers that set ``stop``. Pulls in faust;
must not import :mod:`turnstream.runtime` or :mod:`turnstream.kafka`.
"""

from __future__ import annotations

import asyncio
import logging

from turnstream.analytics.app import AnalyticsApp
from turnstream.analytics.settings import AnalyticsSettings

__all__ = ["serve"]

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
