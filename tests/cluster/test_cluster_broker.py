"""The local cluster's life cycle: up on distinct ports, 3 brokers, kill -9, down.

Starts a private 3-node cluster (temp state dir, free ports) so it never disturbs
the checkout's cluster or the single-node session broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cluster import private_cluster

from turnstream.devbroker import BrokerState, DevCluster, process
from turnstream.kafka.admin.probe import check_broker
from turnstream.kafka.connection import KafkaConnection


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    with private_cluster(tmp_path / "cluster") as started:
        yield started


def test_cluster_up_shows_three_brokers_and_down_stops_all(
    cluster: DevCluster,
) -> None:
    """up starts 3 JVMs on distinct ports; metadata lists 3 brokers; down stops all."""
    assert cluster.status().state is BrokerState.STOPPED
    first = cluster.up()
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

    again = cluster.up()  # idempotent: reused, same JVMs
    assert not again.started
    assert [n.pid for n in again.nodes] == pids

    # kill -9 one node: the cluster is degraded; restarting it rejoins all three.
    killed = cluster.kill_node(2)
    assert killed == pids[1]
    assert not process.pid_alive(killed)
    assert cluster.status().state is BrokerState.DEGRADED
    back = cluster.start_node(2)
    assert back.started
    assert cluster.status().state is BrokerState.RUNNING

    assert cluster.down()
    for node in cluster.brokers:
        assert node.running_pid() is None
        assert not node.settings.pid_path.exists()
    assert cluster.status().state is BrokerState.STOPPED
    assert not cluster.down()
