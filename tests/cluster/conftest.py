"""Fixtures of the cluster lane: a local 3-node KRaft cluster (``DevCluster``).

``kafka_cluster`` (session-scoped) starts the checkout's cluster on
127.0.0.1:29192-29194 (``TURNSTREAM_CLUSTER_PORT`` moves it), or reuses it if it
already runs, and stops it at the end if it started it. Every test here is marked
``cluster``; ``make test`` leaves them out and ``make test-cluster`` runs them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from turnstream.devbroker import BrokerError, ClusterSettings, DevCluster
from turnstream.kafka import broker_answers

PROJECT_DIR = Path(__file__).resolve().parents[2]
NODES = 3


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test of this folder ``cluster`` (and ``slow``)."""
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.cluster)
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def kafka_cluster(request: pytest.FixtureRequest) -> Iterator[DevCluster]:
    """The checkout's 3-node cluster, running and with every broker registered."""
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        pytest.fail("the cluster lane needs java (Kafka runs from jars)", pytrace=False)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")

    def say(line: str) -> None:
        if reporter is not None:
            reporter.write_line(f"[cluster] {line}")

    settings = ClusterSettings.for_project(PROJECT_DIR, os.environ, nodes=NODES)
    cluster = DevCluster(
        settings,
        probe=partial(broker_answers, brokers=NODES),
        env=os.environ,
        progress=say,
    )
    try:
        status = cluster.up()
    except BrokerError as exc:
        pytest.fail(f"the local cluster did not start: {exc}", pytrace=False)
    verb = "started" if status.started else "reusing"
    say(f"{verb} {NODES}-node cluster at {status.bootstrap} in {status.seconds:.1f} s")
    try:
        yield cluster
    finally:
        if status.started:
            cluster.down()
