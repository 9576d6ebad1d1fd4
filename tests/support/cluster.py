"""A private local cluster for tests: temp state dir, free ports, stopped after."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from turnstream.devbroker import ClusterSettings, DevCluster, process
from turnstream.kafka import broker_answers

PROJECT_DIR = Path(__file__).resolve().parents[2]


def free_port_range(count: int) -> int:
    """The first of ``count`` consecutive free loopback ports (not ephemeral)."""
    for _ in range(200):
        # Below the ephemeral range (32768+), so no client socket takes one meanwhile.
        first = random.randrange(20000, 32000)
        if all(
            process.port_is_free("127.0.0.1", p) for p in range(first, first + count)
        ):
            return first
    raise AssertionError("no free port range")


@contextmanager
def private_cluster(
    state_dir: Path,
    *,
    nodes: int = 3,
    extra_properties: Mapping[str, str] | None = None,
) -> Iterator[DevCluster]:
    """A ``nodes``-node cluster of its own (not started); all nodes stopped after."""
    first = free_port_range(2 * nodes)
    settings = ClusterSettings.for_project(
        PROJECT_DIR,
        {},
        nodes=nodes,
        state_dir=state_dir,
        client_port=first,
        controller_port=first + nodes,
        extra_properties=extra_properties,
    )
    cluster = DevCluster(
        settings, probe=partial(broker_answers, brokers=nodes), env=os.environ
    )
    try:
        yield cluster
    finally:
        cluster.down()
