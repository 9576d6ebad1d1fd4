"""A local multi-node KRaft cluster made of development broker nodes.

Owns ``ClusterSettings`` (the nodes' ports and state dirs) and ``DevCluster``: ``up``
prepares every node (properties, storage formatted with ONE cluster id), spawns them
together (no node answers before a quorum runs), and waits until every broker is
registered; ``status`` and ``down`` cover all nodes; ``kill_node``/``start_node``
``kill -9`` and restart one node, for failover tests. Each node is a
:class:`~turnstream.devbroker.manager.DevBroker` with its own pid file, data dir and
log dir, so nothing here knows more than which nodes exist.

The cluster lives beside the single-node broker (its own ports, ``var/kafka-cluster``)
so both can run at once. Must not import aiokafka or any other third-party package;
readiness is the caller's probe, as for the single node.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from turnstream.devbroker import process
from turnstream.devbroker.errors import BrokerExitedError, BrokerNotReadyError
from turnstream.devbroker.jars import ensure_jars
from turnstream.devbroker.manager import (
    BrokerState,
    BrokerStatus,
    DevBroker,
    Progress,
    ReadinessProbe,
    new_cluster_id,
    quiet,
)
from turnstream.devbroker.settings import BrokerSettings, _port
from turnstream.errors import ConfigError

__all__ = [
    "CLUSTER_CONTROLLER_PORT_ENV",
    "CLUSTER_PORT_ENV",
    "DEFAULT_CLUSTER_PORT",
    "ClusterSettings",
    "ClusterStatus",
    "DevCluster",
]

CLUSTER_PORT_ENV = "TURNSTREAM_CLUSTER_PORT"
CLUSTER_CONTROLLER_PORT_ENV = "TURNSTREAM_CLUSTER_CONTROLLER_PORT"
DEFAULT_CLUSTER_PORT = 29192
_POLL_S = 0.25
# How long a restart waits for a killed node's ports to be free again.
_RELEASE_S = 15.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSettings:
    """Layout of a local cluster: one ``BrokerSettings`` per node, node 1 first.

    Attributes:
        state_dir: the cluster's directory (lock file; one ``node-<id>`` per node).
        nodes: the nodes' settings (node ids 1..N, a shared static quorum).
    """

    state_dir: Path
    nodes: tuple[BrokerSettings, ...]

    @classmethod
    def for_project(
        cls,
        project_dir: Path,
        env: Mapping[str, str],
        *,
        nodes: int = 3,
        state_dir: Path | None = None,
        client_port: int | None = None,
        controller_port: int | None = None,
        heap_max: str = "512m",
        extra_properties: Mapping[str, str] | None = None,
    ) -> ClusterSettings:
        """The settings of an ``nodes``-node cluster for a checkout.

        Node ``i`` (1-based) listens for clients on ``client_port + i - 1`` and for
        the controller on ``controller_port + i - 1``: 29192-29194 and 29195-29197
        by default, moved with ``TURNSTREAM_CLUSTER_PORT`` and
        ``TURNSTREAM_CLUSTER_CONTROLLER_PORT``.

        Args:
            project_dir: the checkout root (the jars and log4j config live there).
            env: where the port variables are read.
            nodes: how many nodes (at least 2).
            state_dir: overrides ``<project>/var/kafka-cluster``.
            client_port: overrides the first client port (and the variable).
            controller_port: overrides the first controller port.
            heap_max: each JVM's ``-Xmx``.
            extra_properties: set on every node, overriding the rendered values.

        Raises:
            ConfigError: fewer than 2 nodes, or ports that are invalid or overlap.
        """
        if nodes < 2:
            raise ConfigError(
                "--nodes", f"a cluster needs at least 2 nodes, not {nodes}"
            )
        base = BrokerSettings.for_project(project_dir, {})
        first = client_port or _port(env, CLUSTER_PORT_ENV, DEFAULT_CLUSTER_PORT)
        ctrl = controller_port or _port(env, CLUSTER_CONTROLLER_PORT_ENV, first + nodes)
        clients = range(first, first + nodes)
        controllers = range(ctrl, ctrl + nodes)
        if max(clients[-1], controllers[-1]) > 65535:
            raise ConfigError(CLUSTER_PORT_ENV, "the cluster's ports exceed 65535")
        if set(clients) & set(controllers):
            raise ConfigError(
                CLUSTER_CONTROLLER_PORT_ENV,
                f"controller ports {ctrl}..{controllers[-1]} overlap the client "
                f"ports {first}..{clients[-1]}",
            )
        root = (state_dir or base.project_dir / "var" / "kafka-cluster").resolve()
        quorum = tuple(controllers)
        return cls(
            state_dir=root,
            nodes=tuple(
                replace(
                    base,
                    state_dir=root / f"node-{i}",
                    client_port=clients[i - 1],
                    controller_port=controllers[i - 1],
                    node_id=i,
                    quorum_ports=quorum,
                    heap_min="128m",
                    heap_max=heap_max,
                    extra_properties=tuple((extra_properties or {}).items()),
                    start_timeout=180.0,
                    stop_timeout=20.0,
                )
                for i in range(1, nodes + 1)
            ),
        )

    @property
    def bootstrap(self) -> str:
        """Every node's client address, comma-separated."""
        return ",".join(node.bootstrap for node in self.nodes)

    @property
    def lock_path(self) -> Path:
        """The lock that serialises ``up``, ``down`` and node restarts."""
        return self.state_dir / ".lock"


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    """The cluster as one call found or left it.

    Attributes:
        state: running (every node up and every broker registered), stopped (no
            node runs), degraded (some nodes run) or unresponsive.
        bootstrap: every node's client address.
        nodes: one status per node, node 1 first (``state`` from its process and
            port; ``started`` if this call started it).
        seconds: how long the call took.
    """

    state: BrokerState
    bootstrap: str
    nodes: tuple[BrokerStatus, ...]
    seconds: float = 0.0

    @property
    def started(self) -> bool:
        """Whether this call started any node."""
        return any(node.started for node in self.nodes)


class DevCluster:
    """A local KRaft cluster of combined broker+controller nodes.

    Args:
        settings: the nodes' layout.
        probe: given a bootstrap address, whether EVERY node's broker is registered
            and admin calls succeed (e.g. ``broker_answers(b, brokers=3)``).
        env: the environment for finding ``java`` and for the JVMs.
        progress: receives progress lines; silent by default.
    """

    def __init__(
        self,
        settings: ClusterSettings,
        *,
        probe: ReadinessProbe,
        env: Mapping[str, str],
        progress: Progress = quiet,
    ) -> None:
        self.settings = settings
        self._probe = probe
        self._env = dict(env)
        self._progress = progress
        self.brokers = tuple(
            DevBroker(node, probe=probe, env=env, progress=progress)
            for node in settings.nodes
        )

    def node(self, node_id: int) -> DevBroker:
        """The node with KRaft ``node.id`` ``node_id`` (1-based).

        Raises:
            ConfigError: no such node.
        """
        if not 1 <= node_id <= len(self.brokers):
            raise ConfigError(
                "node", f"no node {node_id} in a {len(self.brokers)}-node cluster"
            )
        return self.brokers[node_id - 1]

    # ------------------------------------------------------------------ queries

    def status(self) -> ClusterStatus:
        """Report every node (process and port) and whether the cluster answers."""
        started = time.monotonic()
        nodes = tuple(self._node_status(b) for b in self.brokers)
        running = sum(n.state is BrokerState.RUNNING for n in nodes)
        if running == 0:
            state = BrokerState.STOPPED
        elif running < len(nodes):
            state = BrokerState.DEGRADED
        elif self._probe(self.settings.bootstrap):
            state = BrokerState.RUNNING
        else:
            state = BrokerState.UNRESPONSIVE
        return ClusterStatus(
            state, self.settings.bootstrap, nodes, time.monotonic() - started
        )

    @staticmethod
    def _node_status(broker: DevBroker, *, started: bool = False) -> BrokerStatus:
        pid = broker.running_pid()
        if pid is None:
            state = BrokerState.STOPPED
        elif broker.port_open():
            state = BrokerState.RUNNING
        else:
            state = BrokerState.UNRESPONSIVE
        return BrokerStatus(state, broker.settings.bootstrap, pid, started=started)

    # ------------------------------------------------------------------ commands

    def up(self) -> ClusterStatus:
        """Start every node that is not running, then wait until all answer.

        Idempotent: a running cluster is reused; a node that died is restarted with
        its data (formatted once, with the cluster's id).

        Raises:
            JavaNotFoundError, MavenNotFoundError, JarFetchError, PortInUseError,
            StorageFormatError: as for a single node.
            BrokerExitedError: a node's JVM died during start-up.
            BrokerNotReadyError: the nodes run but not every broker registered.
        """
        started = time.monotonic()
        with process.holding_lock(self.settings.lock_path):
            missing = [b for b in self.brokers if b.running_pid() is None]
            spawned: dict[int, int] = {}
            if missing:
                java = process.find_java(self._env)
                ensure_jars(self.settings.nodes[0], self._progress)
                # The jar fetch reports its own time; "ready in" is the JVMs'.
                started = time.monotonic()
                cluster_id = self._cluster_id()
                for broker in missing:
                    broker.prepare(java, cluster_id)
                try:
                    for broker in missing:
                        spawned[broker.settings.node_id] = broker.spawn(java)
                    self._wait_ready(spawned, self.settings.bootstrap)
                except BaseException:
                    for pid in spawned.values():
                        if process.pid_alive(pid):
                            process.kill_now(pid)
                    for broker in missing:
                        broker.settings.pid_path.unlink(missing_ok=True)
                    raise
            else:
                self._progress("cluster already running, checking it …")
                self._wait_ready({}, self.settings.bootstrap)
            nodes = tuple(
                self._node_status(b, started=b.settings.node_id in spawned)
                for b in self.brokers
            )
            seconds = time.monotonic() - started
            if spawned:
                self._progress(
                    f"{len(self.brokers)}-node cluster ready at "
                    f"{self.settings.bootstrap} in {seconds:.1f} s"
                )
            return ClusterStatus(
                BrokerState.RUNNING, self.settings.bootstrap, nodes, seconds
            )

    def down(self, *, purge: bool = False) -> bool:
        """Stop every node: SIGTERM to all at once, SIGKILL after ``stop_timeout``.

        All at once, because a node's controlled shutdown needs a controller quorum,
        which stopping them one by one takes away from the last ones.

        Args:
            purge: also delete every node's data directory.

        Returns:
            Whether any node was running.
        """
        with process.holding_lock(self.settings.lock_path):
            pids = [(b, b.running_pid()) for b in self.brokers]
            live = [(b, pid) for b, pid in pids if pid is not None]
            for _, pid in live:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            for broker, pid in live:
                graceful = process.terminate(pid, broker.settings.stop_timeout)
                how = "" if graceful else " (needed SIGKILL)"
                self._progress(f"node {broker.settings.node_id} stopped{how}")
            for broker in self.brokers:
                broker.settings.pid_path.unlink(missing_ok=True)
                if purge:
                    shutil.rmtree(broker.settings.data_dir, ignore_errors=True)
            return bool(live)

    def kill_node(self, node_id: int) -> int | None:
        """``kill -9`` one node's JVM; return the pid it had (``None``: not running).

        Raises:
            ConfigError: no such node.
            BrokerStopError: it survived SIGKILL.
        """
        broker = self.node(node_id)
        with process.holding_lock(self.settings.lock_path):
            pid = broker.kill()
        self._progress(f"node {node_id} killed (pid {pid})")
        return pid

    def start_node(self, node_id: int) -> BrokerStatus:
        """Start one node again (with its data) and wait until it has rejoined.

        Rejoined means its own listener answers and the cluster lists every broker
        again.

        Raises:
            ConfigError: no such node.
            BrokerExitedError: the JVM died during start-up.
            BrokerNotReadyError: it did not rejoin in time.
        """
        broker = self.node(node_id)
        started = time.monotonic()
        with process.holding_lock(self.settings.lock_path):
            pid = broker.running_pid()
            spawned = pid is None
            if pid is None:
                java = process.find_java(self._env)
                self._wait_ports_released(broker)
                broker.prepare(java, self._cluster_id())
                pid = broker.spawn(java)
            self._wait_ready({node_id: pid}, broker.settings.bootstrap)
        return BrokerStatus(
            BrokerState.RUNNING,
            broker.settings.bootstrap,
            pid,
            started=spawned,
            seconds=time.monotonic() - started,
        )

    # ------------------------------------------------------------------ steps

    @staticmethod
    def _wait_ports_released(broker: DevBroker) -> None:
        """Give the kernel a moment to release a just-killed node's sockets."""
        s = broker.settings
        deadline = time.monotonic() + _RELEASE_S
        while time.monotonic() < deadline and not all(
            process.port_is_free(s.host, port)
            for port in (s.client_port, s.controller_port)
        ):
            time.sleep(_POLL_S)

    def _cluster_id(self) -> str:
        """The id every node is formatted with: an existing node's, else a new one."""
        for broker in self.brokers:
            found = broker.formatted_cluster_id()
            if found:
                return found
        return new_cluster_id()

    def _wait_ready(self, spawned: Mapping[int, int], bootstrap: str) -> None:
        timeout = max(b.settings.start_timeout for b in self.brokers)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for node_id, pid in spawned.items():
                if not process.pid_alive(pid):
                    broker = self.node(node_id)
                    raise BrokerExitedError(process.exit_status(pid), broker.log_tail())
            waiting = [self.node(n) for n in spawned] or list(self.brokers)
            if all(b.port_open() for b in waiting) and self._probe(bootstrap):
                return
            time.sleep(_POLL_S)
        pid = next(iter(spawned.values()), -1)
        tails = "\n".join(b.log_tail(10) for b in self.brokers)
        raise BrokerNotReadyError(pid, timeout, tails)
