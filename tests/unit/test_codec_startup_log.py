"""The deployables' start-up lines name the codec path they run.

Without a broker: the actor's service and the analytics app are real, only
their ``run`` (the part that talks to Kafka) is replaced by one that returns at
once, after the start-up line.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from turnstream.analytics.app import AnalyticsApp
from turnstream.analytics.settings import AnalyticsSettings
from turnstream.analytics.worker import serve
from turnstream.kafka.actor.service import LoopActorService
from turnstream.loop_actor import ActorSettings
from turnstream.loop_actor.app import run_service
from turnstream.wire import CODEC_ENV, set_default_codec


@pytest.fixture
def generic(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``TURNSTREAM_CODEC=generic``; the process default codec is reset after."""
    monkeypatch.setenv(CODEC_ENV, "generic")
    thresholds = gc.get_threshold()
    yield
    set_default_codec(None)
    gc.set_threshold(*thresholds)


def _lines(caplog: pytest.LogCaptureFixture, start: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(start)]


@pytest.mark.usefixtures("generic")
async def test_the_actor_start_up_line_names_the_codec_path(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def served() -> None:
        return None

    def on_start(service: LoopActorService) -> None:
        service.run = served  # type: ignore[method-assign]

    settings = ActorSettings(bootstrap="127.0.0.1:1", instance_id="none")
    with caplog.at_level(logging.INFO, logger="turnstream.loop_actor"):
        await run_service(settings, on_start=on_start)
    (line,) = _lines(caplog, "loop actor starting:")
    assert line.endswith(", instance dynamic, codec generic")


@pytest.mark.usefixtures("generic")
async def test_the_analytics_start_up_line_names_the_codec_path(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ran: list[asyncio.Event] = []

    async def run(self: AnalyticsApp, stop: asyncio.Event) -> None:
        ran.append(stop)

    monkeypatch.setattr(AnalyticsApp, "run", run)
    settings = AnalyticsSettings(
        app_id=f"unit-{uuid.uuid4().hex[:8]}", data_dir=tmp_path, web_enabled=False
    )
    with caplog.at_level(logging.INFO, logger="turnstream.analytics"):
        await serve(settings, asyncio.Event())
    (line,) = _lines(caplog, f"analytics {settings.app_id}:")
    assert line.endswith(", web off, codec generic")
    assert len(ran) == 1
