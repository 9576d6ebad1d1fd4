"""Process-level helpers for the development broker: spawn, probe, signal, reap.

Owns everything that touches pids and sockets directly: finding ``java``, checking
that a port is free, starting a JVM detached from the caller's session, telling a live
broker from a stale pid file, and stopping it with SIGTERM then SIGKILL.

Must not import aiokafka or any other third-party package.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import signal
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from turnstream.devbroker.errors import BrokerStopError, JavaNotFoundError

__all__ = [
    "ephemeral_port_range",
    "exit_status",
    "find_java",
    "find_processes",
    "holding_lock",
    "kill_now",
    "pid_alive",
    "port_is_free",
    "process_cmdline",
    "read_pid",
    "spawn_detached",
    "tail_file",
    "terminate",
]

_POLL_S = 0.1


@contextlib.contextmanager
def holding_lock(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_path`` (made with its folder if missing).

    Serialises the CLI's start and stop calls on one broker or cluster across processes.
    """
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def find_java(env: Mapping[str, str]) -> str:
    """Return the ``java`` executable: ``$JAVA_HOME/bin/java``, else the one on PATH.

    Raises:
        JavaNotFoundError: neither exists.
    """
    java_home = env.get("JAVA_HOME", "").strip()
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java", path=env.get("PATH"))
    if found is None:
        raise JavaNotFoundError
    return found


def ephemeral_port_range(
    path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range"),
) -> tuple[int, int] | None:
    """The kernel's ephemeral port range (Linux); ``None`` where it is unknown."""
    try:
        low, high = (int(part) for part in path.read_text().split())
    except (OSError, ValueError):
        return None
    return low, high


def port_is_free(host: str, port: int) -> bool:
    """Whether nothing listens on ``host:port`` (so a server could bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Kafka binds with SO_REUSEADDR too, so sockets in TIME_WAIT do not count.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise
    return True


def read_pid(path: Path) -> int | None:
    """Read a pid file; ``None`` if it is missing or does not hold a number."""
    try:
        text = path.read_text(encoding="ascii").strip()
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def _reap(pid: int) -> int | None:
    """Collect ``pid`` if it is an exited child of this process; return its status."""
    try:
        reaped, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    if reaped == 0:
        return None
    return os.waitstatus_to_exitcode(status)


_exit_codes: dict[int, int] = {}


def exit_status(pid: int) -> int | None:
    """The exit code of a child reaped by ``pid_alive``, if this process spawned it."""
    return _exit_codes.get(pid)


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` names a running (not zombie) process.

    Exited children of this process are reaped on the way, so their exit code can be
    read back with ``exit_status``.
    """
    code = _reap(pid)
    if code is not None:
        _exit_codes[pid] = code
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError):
        # The state letter follows the parenthesised command name.
        state = stat.read_text(encoding="ascii", errors="replace").rpartition(")")[2]
        return state.split()[0] not in {"Z", "X"}
    return True


def process_cmdline(pid: int) -> str | None:
    """The command line of ``pid`` with arguments joined by spaces, if readable."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.replace(b"\0", b" ").decode("utf-8", errors="replace").strip()


def spawn_detached(argv: Sequence[str], *, output: Path, env: Mapping[str, str]) -> int:
    """Start ``argv`` in its own session with stdout and stderr appended to ``output``.

    The child survives the caller (a new session means no SIGINT from the caller's
    terminal) and no ``Popen`` object is left behind to warn when collected.

    Returns:
        The child's pid.
    """
    output.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    file_actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, str(output), flags, 0o644),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    return os.posix_spawn(
        argv[0], list(argv), dict(env), file_actions=file_actions, setsid=True
    )


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(_POLL_S)
    return not pid_alive(pid)


def terminate(pid: int, timeout: float) -> bool:
    """Stop ``pid``: SIGTERM, wait up to ``timeout`` seconds, then SIGKILL.

    Returns:
        ``True`` if SIGTERM was enough, ``False`` if SIGKILL was needed.

    Raises:
        BrokerStopError: the process survived SIGKILL too.
    """
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if _wait_gone(pid, timeout):
        return True
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if _wait_gone(pid, 10.0):
        return False
    raise BrokerStopError(pid)


def kill_now(pid: int, timeout: float = 10.0) -> None:
    """SIGKILL ``pid`` and wait until it is gone (what ``kill -9`` does).

    Raises:
        BrokerStopError: the process survived SIGKILL.
    """
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if not _wait_gone(pid, timeout):
        raise BrokerStopError(pid)


def tail_file(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a text file, or ``""`` if it cannot be read."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.rstrip().splitlines()[-lines:])


def find_processes(marker: str) -> list[int]:
    """Pids of live processes whose command line contains ``marker`` (Linux only).

    Finds a broker whose pid file was lost, so ``down`` never leaves one behind.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    pids: list[int] = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        cmdline = process_cmdline(pid)
        if cmdline and marker in cmdline and pid != os.getpid() and pid_alive(pid):
            pids.append(pid)
    return sorted(pids)
