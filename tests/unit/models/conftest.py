"""Fixtures for the model-client tests: a scripted local HTTP server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from tests.support.http_stream_server import HttpStreamServer


@pytest.fixture
async def server() -> AsyncIterator[HttpStreamServer]:
    async with HttpStreamServer() as scripted:
        yield scripted
