"""Starts, reuses, reports and stops the local single-node KRaft broker.

Owns the broker's life cycle: ``up`` (fetch jars, render properties, format storage
once, spawn ``kafka.Kafka`` detached, wait until an admin call succeeds), ``status``
and ``down`` (SIGTERM, then SIGKILL). A file lock serialises concurrent callers, and a
pid file plus the process's command line tell our broker from anything else.

Readiness is judged by a caller-supplied probe (an admin call made with a Kafka
client), so this module must not import aiokafka or any other third-party package.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from turnstream.devbroker import process
from turnstream.devbroker.errors import (
    BrokerConfigChangedError,
    BrokerExitedError,
    BrokerNotReadyError,
    EphemeralPortError,
    PortInUseError,
    StorageFormatError,
)
from turnstream.devbroker.jars import ensure_jars
from turnstream.devbroker.properties import render_server_properties, server_properties
from turnstream.devbroker.settings import CONTROLLER_PORT_ENV, PORT_ENV, BrokerSettings

__all__ = [
    "BrokerState",
    "BrokerStatus",
    "DevBroker",
    "Progress",
    "ReadinessProbe",
    "jvm_command",
    "new_cluster_id",
    "quiet",
]

Progress = Callable[[str], None]
"""Receives one human-readable line per step of long work."""


def quiet(_: str) -> None:
    """The default :data:`Progress`: reports nothing."""


ReadinessProbe = Callable[[str], bool]
"""Given a bootstrap address, returns whether an admin call succeeded (bounded time)."""

_POLL_S = 0.25
_FORMAT_TIMEOUT_S = 120.0

# The JVM flags kafka-run-class.sh / kafka-server-start.sh use for a broker.
_G1_FLAGS = (
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
    "-Djava.awt.headless=true",
)


class BrokerState(StrEnum):
    """What ``status`` found."""

    RUNNING = "running"
    STOPPED = "stopped"
    UNRESPONSIVE = "unresponsive"
    DEGRADED = "degraded"
    """Some nodes of a cluster run, others do not."""


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    """The broker as one call found or left it.

    Attributes:
        state: running, stopped, or running without answering admin calls.
        bootstrap: the client address.
        pid: the JVM's pid, if one runs.
        started: whether this call started the JVM (``False`` when reused).
        seconds: how long the call took.
    """

    state: BrokerState
    bootstrap: str
    pid: int | None
    started: bool = False
    seconds: float = 0.0


def new_cluster_id() -> str:
    """A random KRaft cluster id in Kafka's ``Uuid`` form (22 url-safe base64 chars).

    Never one starting with ``-``: the storage tool's argument parser would read it
    as an option (Kafka's own ``Uuid.randomUuid`` skips those for the same reason).
    """
    while True:
        raw = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not raw.startswith("-"):
            return raw


def jvm_command(java: str, settings: BrokerSettings, main: str) -> list[str]:
    """The ``java`` argv that runs ``main`` with the broker's classpath and logging.

    Args:
        java: the java executable.
        settings: the broker's layout and heap sizes.
        main: the main class, e.g. ``kafka.Kafka``.
    """
    return [
        java,
        f"-Xms{settings.heap_min}",
        f"-Xmx{settings.heap_max}",
        *_G1_FLAGS,
        f"-XX:ErrorFile={settings.log_dir / 'hs_err_pid%p.log'}",
        f"-Dkafka.logs.dir={settings.log_dir}",
        f"-Dlog4j2.configurationFile={settings.log4j_config}",
        "-cp",
        f"{settings.libs_dir}/*",
        main,
    ]


class DevBroker:
    """The local development broker of one checkout (or one temp state dir).

    Args:
        settings: layout, ports and JVM sizing.
        probe: the readiness check; an admin call against the bootstrap address.
        env: the environment for finding ``java`` and for the JVM itself.
        progress: receives progress lines; silent by default.
        clock: measures how long ``up`` took (tests pass a controllable one).
    """

    def __init__(
        self,
        settings: BrokerSettings,
        *,
        probe: ReadinessProbe,
        env: Mapping[str, str],
        progress: Progress = quiet,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._probe = probe
        self._env = dict(env)
        self._progress = progress
        self._clock = clock

    # ------------------------------------------------------------------ queries

    def running_pid(self) -> int | None:
        """The pid of this checkout's broker JVM if one is alive, else ``None``.

        The pid file is trusted only if its process runs ``kafka.Kafka`` with our
        properties file; otherwise the process table is searched for one.
        """
        marker = str(self.settings.properties_path)
        pid = process.read_pid(self.settings.pid_path)
        if pid is not None and process.pid_alive(pid):
            cmdline = process.process_cmdline(pid)
            if cmdline is None or ("kafka.Kafka" in cmdline and marker in cmdline):
                return pid
        candidates = [
            found
            for found in process.find_processes(marker)
            if "kafka.Kafka" in (process.process_cmdline(found) or "")
        ]
        return candidates[0] if candidates else None

    def status(self) -> BrokerStatus:
        """Report whether the broker runs and answers an admin call."""
        started = time.monotonic()
        pid = self.running_pid()
        if pid is None:
            state = BrokerState.STOPPED
        elif self._probe(self.settings.bootstrap):
            state = BrokerState.RUNNING
        else:
            state = BrokerState.UNRESPONSIVE
        return BrokerStatus(
            state, self.settings.bootstrap, pid, seconds=time.monotonic() - started
        )

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the JVM console output and of ``server.log``."""
        parts = []
        for path in (self.settings.console_log, self.settings.log_dir / "server.log"):
            tail = process.tail_file(path, lines)
            if tail:
                parts.append(f"==> {path} <==\n{tail}")
        return "\n".join(parts) or "(no broker log written)"

    # ------------------------------------------------------------------ commands

    def up(self) -> BrokerStatus:
        """Start the broker, or reuse it if it already runs and answers.

        Raises:
            JavaNotFoundError: no Java runtime.
            MavenNotFoundError: jars not cached and no ``mvn``.
            JarFetchError: Maven failed.
            PortInUseError: another process holds the client or controller port.
            EphemeralPortError: a port lies in the kernel's ephemeral range.
            StorageFormatError: formatting the data directory failed.
            BrokerExitedError: the JVM died during start-up.
            BrokerNotReadyError: the JVM runs but never answered an admin call.
        """
        started = self._clock()
        with process.holding_lock(self.settings.lock_path):
            pid = self.running_pid()
            if pid is not None:
                self._progress(f"broker already running (pid {pid}), checking it …")
                self._check_same_listeners()
                self._wait_ready(pid, spawned=False)
                return BrokerStatus(
                    BrokerState.RUNNING,
                    self.settings.bootstrap,
                    pid,
                    started=False,
                    seconds=self._clock() - started,
                )
            self.settings.pid_path.unlink(missing_ok=True)
            java = process.find_java(self._env)
            self._check_ports()
            ensure_jars(self.settings, self._progress)
            # A first run's jar fetch reports its own time; "ready in" is the JVM's.
            started = self._clock()
            self._write_config()
            self._format(java)
            pid = self._spawn(java)
            try:
                self._wait_ready(pid, spawned=True)
            except BaseException:
                # Never leave a half-started JVM behind.
                if process.pid_alive(pid):
                    process.terminate(pid, self.settings.stop_timeout)
                self.settings.pid_path.unlink(missing_ok=True)
                raise
            seconds = self._clock() - started
            self._progress(
                f"broker ready at {self.settings.bootstrap} in {seconds:.1f} s"
            )
            return BrokerStatus(
                BrokerState.RUNNING,
                self.settings.bootstrap,
                pid,
                started=True,
                seconds=seconds,
            )

    def down(self, *, purge: bool = False) -> bool:
        """Stop the broker (SIGTERM, then SIGKILL after ``stop_timeout``).

        Args:
            purge: also delete the data directory (topics, offsets, cluster id).

        Returns:
            Whether a running broker was stopped.

        Raises:
            BrokerStopError: the JVM survived SIGKILL.
        """
        with process.holding_lock(self.settings.lock_path):
            pid = self.running_pid()
            stopped = False
            if pid is not None:
                self._progress(f"stopping broker pid {pid} …")
                started = time.monotonic()
                graceful = process.terminate(pid, self.settings.stop_timeout)
                how = "" if graceful else " (needed SIGKILL)"
                seconds = time.monotonic() - started
                self._progress(f"broker stopped in {seconds:.1f} s{how}")
                stopped = True
            self.settings.pid_path.unlink(missing_ok=True)
            if purge:
                self._progress(f"deleting {self.settings.data_dir} …")
                shutil.rmtree(self.settings.data_dir, ignore_errors=True)
            return stopped

    # ------------------------------------------------------------------ steps

    def _check_same_listeners(self) -> None:
        """Refuse to 'reuse' a broker that listens elsewhere than requested."""
        wanted = server_properties(self.settings)["listeners"]
        try:
            text = self.settings.properties_path.read_text(encoding="utf-8")
        except OSError:
            return
        for line in text.splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "listeners" and value.strip() != wanted:
                raise BrokerConfigChangedError(value.strip(), wanted)

    def _check_ports(self) -> None:
        s = self.settings
        for port, role, env_var in (
            (s.client_port, "client", PORT_ENV),
            (s.controller_port, "controller", CONTROLLER_PORT_ENV),
        ):
            if not process.port_is_free(s.host, port):
                raise PortInUseError(s.host, port, role, env_var)
            ephemeral = process.ephemeral_port_range()
            if ephemeral is not None and ephemeral[0] <= port <= ephemeral[1]:
                raise EphemeralPortError(port, role, env_var, *ephemeral)

    def _write_config(self) -> None:
        s = self.settings
        for folder in (s.state_dir, s.data_dir, s.log_dir):
            folder.mkdir(parents=True, exist_ok=True)
        # Owner-only: a secured broker's properties hold its passwords.
        fd = os.open(s.properties_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(render_server_properties(s))

    def formatted_cluster_id(self) -> str | None:
        """The ``cluster.id`` this node's storage was formatted with, if any."""
        meta = self.settings.data_dir / "meta.properties"
        try:
            text = meta.read_text(encoding="utf-8")
        except OSError:
            return None
        for line in text.splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "cluster.id":
                return value.strip()
        return None

    def prepare(self, java: str, cluster_id: str) -> None:
        """Check the ports, write the properties and format storage (once).

        A cluster's nodes are prepared one by one and then spawned together: no node
        answers before a quorum of them runs.

        Raises:
            PortInUseError: another process holds the client or controller port.
            StorageFormatError: formatting failed.
        """
        self._check_ports()
        self._write_config()
        self._format(java, cluster_id)

    def spawn(self, java: str) -> int:
        """Start this node's JVM detached (properties already written); its pid."""
        return self._spawn(java)

    def port_open(self) -> bool:
        """Whether something accepts connections on the client port."""
        return self._port_open()

    def kill(self) -> int | None:
        """SIGKILL the running JVM (no shutdown, nothing flushed); its former pid.

        Raises:
            BrokerStopError: the process survived SIGKILL.
        """
        pid = self.running_pid()
        if pid is not None:
            process.kill_now(pid)
        self.settings.pid_path.unlink(missing_ok=True)
        return pid

    def _format(self, java: str, cluster_id: str | None = None) -> None:
        s = self.settings
        if (s.data_dir / "meta.properties").is_file():
            return
        self._progress(f"formatting broker storage in {s.data_dir} …")
        command = [
            *jvm_command(java, s, "kafka.tools.StorageTool"),
            "format",
            "--cluster-id",
            cluster_id or new_cluster_id(),
            "--config",
            str(s.properties_path),
            "--ignore-formatted",
        ]
        # The tool needs far less heap than the broker.
        command[1:3] = ["-Xms64m", "-Xmx256m"]
        with self._scram_argfile() as argfile:
            if argfile is not None:
                command.append(f"@{argfile}")
            try:
                result = subprocess.run(  # noqa: S603 - fixed argv, no shell
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    timeout=_FORMAT_TIMEOUT_S,
                    check=False,
                    env=self._env,
                )
            except subprocess.TimeoutExpired:
                raise StorageFormatError(-1, "timed out") from None
        if result.returncode != 0:
            tail = "\n".join(result.stdout.rstrip().splitlines()[-25:])
            raise StorageFormatError(result.returncode, tail)

    @contextlib.contextmanager
    def _scram_argfile(self) -> Iterator[Path | None]:
        """The SCRAM users as a java ``@argfile`` (owner-only, deleted after).

        The java launcher expands it, so no password shows in a process listing.
        """
        users = self.settings.scram_users
        if not users:
            yield None
            return
        path = self.settings.state_dir / "format-scram.args"
        lines = "".join(
            f"--add-scram\n{mechanism}=[name={name},password={password}]\n"
            for mechanism, name, password in users
        )
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(lines)
        try:
            yield path
        finally:
            path.unlink(missing_ok=True)

    def _spawn(self, java: str) -> int:
        s = self.settings
        self._progress(f"starting broker on {s.bootstrap} (heap {s.heap_max}) …")
        with s.console_log.open("a", encoding="utf-8") as log:
            log.write(f"--- broker start {time.strftime('%Y-%m-%dT%H:%M:%S')} ---\n")
        pid = process.spawn_detached(
            [*jvm_command(java, s, "kafka.Kafka"), str(s.properties_path)],
            output=s.console_log,
            env=self._env,
        )
        s.pid_path.write_text(f"{pid}\n", encoding="ascii")
        return pid

    def _port_open(self) -> bool:
        s = self.settings
        try:
            with socket.create_connection((s.host, s.client_port), timeout=1.0):
                return True
        except OSError:
            return False

    def _wait_ready(self, pid: int, *, spawned: bool) -> None:
        timeout = self.settings.start_timeout
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not process.pid_alive(pid):
                code = process.exit_status(pid) if spawned else None
                raise BrokerExitedError(code, self.log_tail())
            if self._port_open() and self._probe(self.settings.bootstrap):
                return
            time.sleep(_POLL_S)
        raise BrokerNotReadyError(pid, timeout, self.log_tail())
