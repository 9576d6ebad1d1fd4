"""Errors raised while fetching, starting or stopping the local development broker.

Owns the ``BrokerError`` branch of the turnstream error tree::

    TurnstreamError
    └── BrokerError                 the local JVM broker could not be managed
        ├── JavaNotFoundError       no ``java`` executable
        ├── MavenNotFoundError      no ``mvn`` executable and no cached jars
        ├── JarFetchError           Maven ran but failed (keeps its output tail)
        ├── PortInUseError          a port the broker needs is taken by another process
        ├── EphemeralPortError      a broker port lies in the kernel's ephemeral range
        ├── StorageFormatError      ``kafka.tools.StorageTool format`` failed
        ├── BrokerExitedError       the JVM died during start-up (keeps the log tail)
        ├── BrokerNotReadyError     the JVM runs but no admin call succeeded in time
        ├── BrokerConfigChangedError  the running broker listens on other ports
        └── BrokerStopError         the process survived SIGTERM and SIGKILL

Must not import aiokafka or any other third-party package: stdlib and
``turnstream.errors`` only.
"""

from __future__ import annotations

from typing import ClassVar

from turnstream.errors import TurnstreamError

__all__ = [
    "BrokerConfigChangedError",
    "BrokerError",
    "BrokerExitedError",
    "BrokerNotReadyError",
    "BrokerStopError",
    "EphemeralPortError",
    "JarFetchError",
    "JavaNotFoundError",
    "MavenNotFoundError",
    "PortInUseError",
    "StorageFormatError",
]


def _indent(tail: str) -> str:
    if not tail.strip():
        return ""
    return "\n" + "\n".join(f"    {line}" for line in tail.rstrip().splitlines())


class BrokerError(TurnstreamError):
    """The local development broker could not be managed."""

    kind = "broker"


class JavaNotFoundError(BrokerError):
    """No Java runtime was found (Kafka 4.x brokers need Java 17 or newer)."""

    kind = "java_missing"

    def __init__(self) -> None:
        super().__init__(
            "java not found: install a Java 17+ runtime "
            "(e.g. `apt-get install openjdk-17-jre-headless`) or set JAVA_HOME"
        )


class MavenNotFoundError(BrokerError):
    """The broker jars are not cached and ``mvn`` is not installed to fetch them."""

    kind = "mvn_missing"

    def __init__(self) -> None:
        super().__init__(
            "mvn not found and the Kafka jars are not cached: install Maven "
            "(e.g. `apt-get install maven`)"
        )


class _ToolFailedError(BrokerError):
    """A tool the broker needs ran and failed; keeps its exit status and output tail.

    A subclass names the step in ``failed`` (the message's opening words).

    Attributes:
        exit_code: the tool's exit status.
        output_tail: the last lines it printed.
    """

    failed: ClassVar[str]

    def __init__(self, exit_code: int, output_tail: str) -> None:
        self.exit_code = exit_code
        self.output_tail = output_tail
        super().__init__(f"{self.failed} (exit {exit_code}){_indent(output_tail)}")


class JarFetchError(_ToolFailedError):
    """Maven failed to fetch the broker jars.

    Attributes:
        exit_code: Maven's exit status.
        output_tail: the last lines Maven printed.
    """

    kind = "jar_fetch_failed"
    failed = "fetching the Kafka jars with Maven failed"


class PortInUseError(BrokerError):
    """A port the broker must listen on is held by another process.

    Attributes:
        host: the address the broker binds.
        port: the taken port.
        role: ``"client"`` or ``"controller"``.
        env_var: the variable that moves this port elsewhere.
    """

    kind = "port_in_use"

    def __init__(self, host: str, port: int, role: str, env_var: str) -> None:
        self.host = host
        self.port = port
        self.role = role
        self.env_var = env_var
        super().__init__(
            f"{role} port {host}:{port} is in use by another process; stop it, "
            f"pick another port with {env_var}=<port>, or point "
            f"KAFKA_BOOTSTRAP_SERVERS at a broker that already runs there"
        )


class EphemeralPortError(BrokerError):
    """A broker port lies inside the kernel's ephemeral (client) port range.

    The kernel hands such ports to outgoing connections. While the broker is
    down, a client reconnecting to it can be given the very port as its own
    source port and connect to itself, holding the port so the broker cannot
    bind it again.

    Attributes:
        port: the port asked for.
        role: ``"client"`` or ``"controller"``.
        env_var: the variable that moves this port elsewhere.
        low: the range's first port.
        high: the range's last port.
    """

    kind = "ephemeral_port"

    def __init__(self, port: int, role: str, env_var: str, low: int, high: int) -> None:
        self.port = port
        self.role = role
        self.env_var = env_var
        self.low = low
        self.high = high
        super().__init__(
            f"{role} port {port} is in the ephemeral port range {low}-{high} "
            f"(/proc/sys/net/ipv4/ip_local_port_range): a reconnecting client "
            f"can take it while the broker is down; pick a port below {low} "
            f"with {env_var}=<port>"
        )


class StorageFormatError(_ToolFailedError):
    """``kafka.tools.StorageTool format`` failed.

    Attributes:
        exit_code: the tool's exit status.
        output_tail: the last lines it printed.
    """

    kind = "storage_format_failed"
    failed = "formatting the broker storage failed"


class BrokerExitedError(BrokerError):
    """The broker JVM exited while it was starting.

    Attributes:
        exit_code: the JVM's exit status, or ``None`` if it could not be read.
        log_tail: the last lines of the broker's logs.
    """

    kind = "broker_exited"

    def __init__(self, exit_code: int | None, log_tail: str) -> None:
        self.exit_code = exit_code
        self.log_tail = log_tail
        status = "unknown status" if exit_code is None else f"exit {exit_code}"
        super().__init__(
            f"the broker exited during start-up ({status}); log tail:"
            f"{_indent(log_tail)}"
        )


class BrokerNotReadyError(BrokerError):
    """The broker process runs but did not answer an admin call in time.

    Attributes:
        pid: the broker process id.
        timeout: seconds waited.
        log_tail: the last lines of the broker's logs.
    """

    kind = "broker_not_ready"

    def __init__(self, pid: int, timeout: float, log_tail: str) -> None:
        self.pid = pid
        self.timeout = timeout
        self.log_tail = log_tail
        super().__init__(
            f"broker pid {pid} did not answer an admin call within {timeout:.0f} s; "
            f"log tail:{_indent(log_tail)}"
        )


class BrokerConfigChangedError(BrokerError):
    """The running broker was started with other listeners than now requested.

    Attributes:
        running: the ``listeners`` value the running broker uses.
        wanted: the ``listeners`` value the current settings ask for.
    """

    kind = "broker_config_changed"

    def __init__(self, running: str, wanted: str) -> None:
        self.running = running
        self.wanted = wanted
        super().__init__(
            f"the broker already runs with listeners {running}, not {wanted}; "
            "run `turnstream broker down` first (or unset the port variables)"
        )


class BrokerStopError(BrokerError):
    """The broker process could not be stopped.

    Attributes:
        pid: the process id that survived.
    """

    kind = "broker_stop_failed"

    def __init__(self, pid: int) -> None:
        self.pid = pid
        super().__init__(f"broker pid {pid} survived SIGTERM and SIGKILL")
