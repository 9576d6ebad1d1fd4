"""The local cluster's life cycle: up on distinct ports, 3 brokers, kill -9, down.

Starts a private 3-node cluster (temp state dir, free ports) so it never disturbs
the checkout's cluster or the single-node session broker.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from turnstream.devbroker import BrokerState, ClusterSettings, DevCluster, process
from turnstream.kafka import broker_answers
from turnstream.kafka.admin import check_broker
from turnstream.kafka.config import KafkaConnection

PROJECT_DIR = Path(__file__).resolve().parents[2]


def _free_range(count: int) -> int:
    """The first of ``count`` consecutive free loopback ports (not ephemeral)."""
    for _ in range(200):
        # Below the ephemeral range (32768+), so no client socket takes one meanwhile.
        first = random.randrange(20000, 32000)
        if all(
            process.port_is_free("127.0.0.1", p) for p in range(first, first + count)
        ):
            return first
    raise AssertionError("no free port range")


@pytest.fixture
def private_cluster(tmp_path: Path) -> Iterator[DevCluster]:
    first = _free_range(6)
    settings = ClusterSettings.for_project(
        PROJECT_DIR,
        {},
        nodes=3,
        state_dir=tmp_path / "cluster",
        client_port=first,
        controller_port=first + 3,
    )
    cluster = DevCluster(
        settings, probe=partial(broker_answers, brokers=3), env=os.environ
    )
    try:
        yield cluster
    finally:
        cluster.down()


def test_cluster_up_shows_three_brokers_and_down_stops_all(
    private_cluster: DevCluster,
) -> None:
    """up starts 3 JVMs on distinct ports; metadata lists 3 brokers; down stops all."""
    assert private_cluster.status().state is BrokerState.STOPPED
    first = private_cluster.up()
    assert first.started
    pids = [n.pid for n in first.nodes]
    assert None not in pids
    assert len(set(pids)) == 3
    assert len({n.bootstrap for n in first.nodes}) == 3

    info = asyncio.run(
        check_broker(KafkaConnection(bootstrap=first.bootstrap, request_timeout=10))
    )
    assert sorted(info.broker_ids) == [1, 2, 3]
    assert info.controller_id in {1, 2, 3}

    again = private_cluster.up()  # idempotent: reused, same JVMs
    assert not again.started
    assert [n.pid for n in again.nodes] == pids

    # kill -9 one node: the cluster is degraded; restarting it rejoins all three.
    killed = private_cluster.kill_node(2)
    assert killed == pids[1]
    assert not process.pid_alive(killed)
    assert private_cluster.status().state is BrokerState.DEGRADED
    back = private_cluster.start_node(2)
    assert back.started
    assert private_cluster.status().state is BrokerState.RUNNING

    assert private_cluster.down()
    for node in private_cluster.brokers:
        assert node.running_pid() is None
        assert not node.settings.pid_path.exists()
    assert private_cluster.status().state is BrokerState.STOPPED
    assert not private_cluster.down()
