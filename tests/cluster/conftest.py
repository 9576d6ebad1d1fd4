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


def _asked_for(config: pytest.Config, here: Path) -> bool:
    """Whether this run names the lane: ``-m`` mentions it or a path is in it."""
    if "cluster" in (config.getoption("markexpr", "") or ""):
        return True
    for arg in config.args:
        path = Path(arg.split("::", 1)[0]).resolve()
        if path.is_relative_to(here):
            return True
    return False


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Mark every test of this folder ``cluster`` (and ``slow``).

    They run only when asked for (``make test-cluster``, ``pytest -m cluster`` or
    ``pytest tests/cluster``), so ``make test`` does not start a second cluster's
    worth of JVMs or run the lane twice in CI.
    """
    here = Path(__file__).parent.resolve()
    mine = [i for i in items if Path(str(i.fspath)).resolve().is_relative_to(here)]
    for item in mine:
        item.add_marker(pytest.mark.cluster)
        item.add_marker(pytest.mark.slow)
    if mine and not _asked_for(config, here):
        config.hook.pytest_deselected(items=mine)
        keep = set(map(id, mine))
        items[:] = [i for i in items if id(i) not in keep]


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
