"""Fetches the Apache Kafka broker jars from Maven Central into a local cache.

Owns the jar cache (``infra/kafka/.cache/libs``): it is filled by
``mvn dependency:copy-dependencies`` into a temporary sibling folder and renamed into
place, then a marker file records the hash of the ``pom.xml`` it came from. A cache
whose marker matches the current pom is complete and is reused without running Maven.
While Maven runs, its ``Downloaded from …`` and ``Copying …`` lines are counted and
reported as progress (files, megabytes, jars): the first at once, then at most one
line every ``progress_interval`` seconds, so a cold fetch is never a silent wait.

Must not import aiokafka or any other third-party package.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from turnstream.devbroker.errors import JarFetchError, MavenNotFoundError
from turnstream.devbroker.settings import BrokerSettings

__all__ = [
    "MARKER_NAME",
    "PROGRESS_INTERVAL_S",
    "JarCache",
    "ensure_jars",
    "jars_are_complete",
]

MARKER_NAME = ".complete"
# A cold fetch takes ~25 s here; ten minutes means Maven is stuck, not slow.
_MAVEN_TIMEOUT_S = 600.0
_TAIL_LINES = 25
# How often a running fetch reports its progress.
PROGRESS_INTERVAL_S = 2.0
_DOWNLOADED = re.compile(
    r"Downloaded from [^:]+: \S+ \((?P<size>[\d.]+) (?P<unit>B|kB|KB|MB|GB)\b"
)
_COPYING = re.compile(r"\] Copying \S+\.jar to ")
_UNITS = {"B": 1, "kB": 1_000, "KB": 1_000, "MB": 1_000_000, "GB": 1_000_000_000}


@dataclass(frozen=True, slots=True)
class JarCache:
    """The outcome of ``ensure_jars``.

    Attributes:
        libs_dir: the folder holding the jars (``java -cp '<libs_dir>/*'``).
        fetched: whether Maven ran (``False`` when the cache was reused).
        seconds: time spent, Maven included.
        jar_count: number of jars in the cache.
    """

    libs_dir: Path
    fetched: bool
    seconds: float
    jar_count: int


def _pom_digest(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()


def jars_are_complete(libs_dir: Path, pom: Path) -> bool:
    """Whether ``libs_dir`` holds a complete fetch made from this exact ``pom``.

    Args:
        libs_dir: the jar cache folder.
        pom: the Maven project the cache must come from.
    """
    marker = libs_dir / MARKER_NAME
    if not marker.is_file():
        return False
    return marker.read_text(encoding="utf-8").strip() == _pom_digest(pom)


def _tail(text: str, lines: int = _TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


class _FetchMeter:
    """Counts Maven's downloads and copies and reports them now and then."""

    def __init__(
        self,
        progress: Callable[[str], None],
        interval: float,
        clock: Callable[[], float],
    ) -> None:
        self._progress = progress
        self._interval = interval
        self._clock = clock
        self._last = float("-inf")  # the first download is reported at once
        self.files = 0
        self.bytes = 0
        self.jars = 0

    def feed(self, line: str) -> None:
        downloaded = _DOWNLOADED.search(line)
        if downloaded is not None:
            self.files += 1
            unit = _UNITS[downloaded.group("unit")]
            self.bytes += int(float(downloaded.group("size")) * unit)
        elif _COPYING.search(line):
            self.jars += 1
        else:
            return
        now = self._clock()
        if now - self._last >= self._interval:
            self._report(now)

    def _report(self, now: float) -> None:
        self._last = now
        self._progress(
            f"… {_count(self.files, 'file')} downloaded "
            f"({self.bytes / 1_000_000:.1f} MB), {_count(self.jars, 'jar')} copied"
        )


def _run_maven(
    command: list[str],
    progress: Callable[[str], None],
    interval: float,
) -> tuple[int, str]:
    """Run Maven, feeding its output to the meter; (exit code, output tail)."""
    tail: deque[str] = deque(maxlen=_TAIL_LINES)
    meter = _FetchMeter(progress, interval, time.monotonic)
    timed_out = threading.Event()
    with subprocess.Popen(  # noqa: S603 - fixed argv, no shell
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    ) as proc:

        def kill() -> None:
            timed_out.set()
            proc.kill()

        watchdog = threading.Timer(_MAVEN_TIMEOUT_S, kill)
        watchdog.daemon = True
        watchdog.start()
        try:
            stdout = proc.stdout
            for line in stdout if stdout is not None else ():
                tail.append(line.rstrip("\n"))
                meter.feed(line)
        finally:
            watchdog.cancel()
        code = proc.wait()
    output = "\n".join(tail)
    if timed_out.is_set():
        raise JarFetchError(
            -1, _tail(output + f"\n(timed out after {_MAVEN_TIMEOUT_S:.0f} s)")
        )
    return code, output


def ensure_jars(
    settings: BrokerSettings,
    progress: Callable[[str], None] = lambda _: None,
    *,
    progress_interval: float = PROGRESS_INTERVAL_S,
) -> JarCache:
    """Make sure the broker jars are cached, fetching them with Maven if needed.

    Args:
        settings: where the pom and the cache live.
        progress: receives one line per step worth telling a person about, and
            a line with the files downloaded and jars copied so far while Maven
            runs.
        progress_interval: the least time between two of those lines.

    Raises:
        MavenNotFoundError: the cache is incomplete and ``mvn`` is not installed.
        JarFetchError: Maven failed or timed out; carries its output tail.
    """
    started = time.monotonic()
    libs_dir = settings.libs_dir
    if jars_are_complete(libs_dir, settings.pom):
        count = sum(1 for _ in libs_dir.glob("*.jar"))
        return JarCache(libs_dir, False, time.monotonic() - started, count)

    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenNotFoundError
    progress(f"fetching Kafka jars with Maven into {libs_dir} …")
    staging = libs_dir.with_name(f"{libs_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    # Not ``-q``: the download and copy lines are the progress we report.
    command = [
        mvn,
        "-B",
        "-f",
        str(settings.pom),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={staging}",
    ]
    try:
        code, output = _run_maven(command, progress, progress_interval)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    count = sum(1 for _ in staging.glob("*.jar"))
    if code != 0 or count == 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise JarFetchError(code, _tail(output or "no output"))

    (staging / MARKER_NAME).write_text(_pom_digest(settings.pom) + "\n", "utf-8")
    shutil.rmtree(libs_dir, ignore_errors=True)
    staging.rename(libs_dir)
    seconds = time.monotonic() - started
    progress(f"fetched {count} jars in {seconds:.1f} s")
    return JarCache(libs_dir, True, seconds, count)
