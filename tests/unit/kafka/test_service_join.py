"""The commands consumer's start is retried while the broker is unreachable."""

from __future__ import annotations

import asyncio
import logging

import pytest
from tests.support.eventually import assert_eventually

from turnstream.kafka.actor.service import LoopActorService, ServiceSettings
from turnstream.kafka.clients import KafkaClients
from turnstream.kafka.connection import KafkaConnection
from turnstream.runtime.config import LoopConfig
from turnstream.runtime.session import LoopSetup
from turnstream.testing import ScriptedModel
from turnstream.wire import default_codec


def _setup(_loop_id: object, _agent: str = "") -> LoopSetup:
    return LoopSetup(config=LoopConfig(model="m"), model=ScriptedModel([]))


async def test_join_retries_an_unreachable_broker_until_stopped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A consumer that cannot start (nothing listens) is retried, never fatal.

    This is the path a member takes when its group join hangs during an
    outage and the consumer is restarted.
    """
    clients = KafkaClients(
        connection=KafkaConnection(
            bootstrap="127.0.0.1:1", request_timeout=1.0, connect_timeout=1.0
        )
    )
    service = LoopActorService(
        clients=clients,
        settings=ServiceSettings(retry_backoff_max=0.5),
        codec=default_codec(),
        setup_for=_setup,
    )
    caplog.set_level(logging.WARNING, logger="turnstream.kafka.actor.service")
    join = asyncio.create_task(service._join())

    def retrying() -> None:
        assert not join.done(), join.exception()
        assert "commands consumer cannot start yet; retrying" in caplog.messages

    await assert_eventually(retrying, timeout=20)
    service.request_shutdown()
    async with asyncio.timeout(20):
        assert await join is False
