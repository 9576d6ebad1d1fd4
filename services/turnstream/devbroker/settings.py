"""Where the local development broker keeps its files, and which ports it uses.

Owns ``BrokerSettings`` (a narrow, typed view of the broker's layout and ports) and
the lookup of the project directory. Environment variables are read only from the
mapping the caller passes in, never from ``os.environ`` directly.

Must not import aiokafka or any other third-party package.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from turnstream.errors import ConfigError

__all__ = [
    "CONTROLLER_PORT_ENV",
    "DEFAULT_CLIENT_PORT",
    "DEFAULT_CONTROLLER_PORT",
    "PORT_ENV",
    "BrokerSettings",
    "find_project_dir",
]

PORT_ENV = "TURNSTREAM_BROKER_PORT"
CONTROLLER_PORT_ENV = "TURNSTREAM_CONTROLLER_PORT"
DEFAULT_CLIENT_PORT = 19092
DEFAULT_CONTROLLER_PORT = 19093

# The file that marks a turnstream checkout; the broker's pom lives there.
_POM = Path("infra/kafka/pom.xml")


def find_project_dir(start: Path) -> Path:
    """Return the nearest directory at or above ``start`` holding ``infra/kafka``.

    Raises:
        ConfigError: ``start`` is not inside a turnstream checkout.
    """
    start = start.resolve()
    for candidate in (start, *start.parents):
        if (candidate / _POM).is_file():
            return candidate
    raise ConfigError(
        "project directory",
        f"no {_POM} at or above {start}; run from inside a turnstream checkout",
    )


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(name, f"{raw!r} is not a port number") from None
    if not 1 <= value <= 65535:
        raise ConfigError(name, f"{value} is outside 1..65535")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerSettings:
    """Layout, ports and JVM sizing of one local KRaft broker (broker + controller).

    Attributes:
        project_dir: the checkout root (holds ``infra/kafka/pom.xml``).
        libs_dir: where the broker jars are cached.
        state_dir: the broker's private directory: properties, data, logs, pid.
        host: the loopback address every listener binds.
        client_port: the PLAINTEXT listener clients bootstrap from.
        controller_port: the KRaft controller listener.
        heap_min: JVM ``-Xms``.
        heap_max: JVM ``-Xmx``.
        start_timeout: seconds to wait for an admin call to succeed after start.
        stop_timeout: seconds to wait after SIGTERM before SIGKILL.
        node_id: this node's KRaft ``node.id`` (1..N).
        quorum_ports: the controller ports of every node of a cluster, node 1 first
            (the static ``controller.quorum.voters``); empty for a single node.
        extra_properties: ``(key, value)`` pairs set last in ``server.properties``,
            overriding the rendered ones (tests use it to imitate other brokers).
        scram_users: ``(mechanism, name, password)`` SCRAM credentials written
            into the metadata when the storage is formatted (a secured broker's
            users exist before it first starts); hidden from ``repr``.
    """

    project_dir: Path
    libs_dir: Path
    state_dir: Path
    host: str = "127.0.0.1"
    client_port: int = DEFAULT_CLIENT_PORT
    controller_port: int = DEFAULT_CONTROLLER_PORT
    heap_min: str = "256m"
    heap_max: str = "1g"
    start_timeout: float = 90.0
    stop_timeout: float = 30.0
    node_id: int = 1
    quorum_ports: tuple[int, ...] = ()
    # Hidden from repr: a secured broker's properties hold its passwords.
    extra_properties: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    scram_users: tuple[tuple[str, str, str], ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        if self.client_port == self.controller_port:
            raise ConfigError(
                CONTROLLER_PORT_ENV,
                f"controller port {self.controller_port} equals the client port",
            )

    @property
    def nodes(self) -> int:
        """How many nodes the quorum (and the cluster) has."""
        return len(self.quorum_ports) or 1

    @property
    def voters(self) -> str:
        """The static ``controller.quorum.voters`` value (``id@host:port,…``)."""
        ports = self.quorum_ports or (self.controller_port,)
        return ",".join(f"{i}@{self.host}:{p}" for i, p in enumerate(ports, 1))

    @classmethod
    def for_project(
        cls,
        project_dir: Path,
        env: Mapping[str, str],
        *,
        state_dir: Path | None = None,
    ) -> BrokerSettings:
        """Build the settings for a checkout, reading port overrides from ``env``.

        Args:
            project_dir: the checkout root.
            env: the environment to read ``TURNSTREAM_BROKER_PORT`` and
                ``TURNSTREAM_CONTROLLER_PORT`` from.
            state_dir: overrides ``<project>/var/kafka`` (tests use a temp dir).

        Raises:
            ConfigError: a port override is not a valid port, or both are equal.
        """
        project_dir = project_dir.resolve()
        return cls(
            project_dir=project_dir,
            libs_dir=project_dir / "infra" / "kafka" / ".cache" / "libs",
            state_dir=state_dir or project_dir / "var" / "kafka",
            client_port=_port(env, PORT_ENV, DEFAULT_CLIENT_PORT),
            controller_port=_port(env, CONTROLLER_PORT_ENV, DEFAULT_CONTROLLER_PORT),
        )

    @property
    def bootstrap(self) -> str:
        """The ``host:port`` clients bootstrap from."""
        return f"{self.host}:{self.client_port}"

    @property
    def pom(self) -> Path:
        """The Maven project that lists the broker jars."""
        return self.project_dir / _POM

    @property
    def log4j_config(self) -> Path:
        """The broker's log4j2 configuration."""
        return self.project_dir / "infra" / "kafka" / "log4j2.yaml"

    @property
    def data_dir(self) -> Path:
        """The broker's ``log.dirs`` (topic partitions and KRaft metadata)."""
        return self.state_dir / "data"

    @property
    def log_dir(self) -> Path:
        """Where log4j writes ``server.log`` and the JVM's console output goes."""
        return self.state_dir / "logs"

    @property
    def properties_path(self) -> Path:
        """The rendered ``server.properties``."""
        return self.state_dir / "server.properties"

    @property
    def pid_path(self) -> Path:
        """The pid file of the running broker."""
        return self.state_dir / "broker.pid"

    @property
    def lock_path(self) -> Path:
        """The lock that serialises ``up`` and ``down`` across processes."""
        return self.state_dir / ".lock"

    @property
    def console_log(self) -> Path:
        """The JVM's stdout and stderr."""
        return self.log_dir / "console.log"
