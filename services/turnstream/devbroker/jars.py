"""Fetches the Apache Kafka broker jars from Maven Central into a local cache.

Owns the jar cache (``infra/kafka/.cache/libs``): it is filled by
``mvn dependency:copy-dependencies`` into a temporary sibling folder and renamed into
place, then a marker file records the hash of the ``pom.xml`` it came from. A cache
whose marker matches the current pom is complete and is reused without running Maven.

Must not import aiokafka or any other third-party package.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from turnstream.devbroker.errors import JarFetchError, MavenNotFoundError
from turnstream.devbroker.settings import BrokerSettings

__all__ = ["MARKER_NAME", "JarCache", "ensure_jars", "jars_are_complete"]

MARKER_NAME = ".complete"
# A cold fetch takes ~25 s here; ten minutes means Maven is stuck, not slow.
_MAVEN_TIMEOUT_S = 600.0
_TAIL_LINES = 25


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


def ensure_jars(
    settings: BrokerSettings, progress: Callable[[str], None] = lambda _: None
) -> JarCache:
    """Make sure the broker jars are cached, fetching them with Maven if needed.

    Args:
        settings: where the pom and the cache live.
        progress: receives one line per step worth telling a person about.

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
    command = [
        mvn,
        "-q",
        "-B",
        "-f",
        str(settings.pom),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={staging}",
    ]
    try:
        result = subprocess.run(  # noqa: S603 - fixed argv, no shell
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=_MAVEN_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        shutil.rmtree(staging, ignore_errors=True)
        output = exc.output if isinstance(exc.output, str) else ""
        raise JarFetchError(
            -1, _tail(output + f"\n(timed out after {_MAVEN_TIMEOUT_S:.0f} s)")
        ) from None
    count = sum(1 for _ in staging.glob("*.jar"))
    if result.returncode != 0 or count == 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise JarFetchError(result.returncode, _tail(result.stdout or "no output"))

    (staging / MARKER_NAME).write_text(_pom_digest(settings.pom) + "\n", "utf-8")
    shutil.rmtree(libs_dir, ignore_errors=True)
    staging.rename(libs_dir)
    seconds = time.monotonic() - started
    progress(f"fetched {count} jars in {seconds:.1f} s")
    return JarCache(libs_dir, True, seconds, count)
