"""A private broker for tests that stop or break it.

:func:`own_broker` (a fixture: import it into the test module) runs
``turnstream.devbroker`` on free ports with its own data directory, so stopping
it never disturbs the shared broker the other tests use. ``kafka_bootstrap``
only gates the lane (a test needing Kafka never silently skips in CI).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cluster import free_port_range
from tests.support.kafka_harness import PROJECT_DIR

from turnstream.devbroker import BrokerSettings, DevBroker
from turnstream.kafka import broker_answers

__all__ = ["free_port", "own_broker"]


def free_port() -> int:
    """A TCP port nothing listens on right now, below the ephemeral range.

    A broker port inside the kernel's ephemeral range can be taken by a
    client's own outgoing connection while the broker is down (the broker
    manager refuses such ports).
    """
    return free_port_range(1)


@pytest.fixture
def own_broker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[DevBroker]:
    """A private broker on free ports, purged afterwards."""
    env = {
        "TURNSTREAM_BROKER_PORT": str(free_port()),
        "TURNSTREAM_CONTROLLER_PORT": str(free_port()),
    }
    settings = BrokerSettings.for_project(
        PROJECT_DIR, env, state_dir=tmp_path / "kafka"
    )
    broker = DevBroker(settings, probe=broker_answers, env=os.environ)
    broker.up()
    try:
        yield broker
    finally:
        broker.down(purge=True)
