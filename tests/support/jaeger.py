"""A real OTLP receiver for the tracing tests: Jaeger (v2) all-in-one, on free ports.

:func:`jaeger` (a session fixture: import it into the test module) builds the
binary once from the Go module proxy (``infra/jaeger/build.sh``, cached under
``~/.cache/turnstream``), starts it with in-memory storage, an OTLP/HTTP
receiver and the query API on free loopback ports, and stops it after the
session. :class:`Jaeger` reads traces back through the query HTTP API
(``/api/traces/{id}``), as the UI does. Without Go and without a cached
binary the fixture fails under ``CI=true`` and skips elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.support.cluster import free_port_range
from tests.support.kafka_harness import PROJECT_DIR

__all__ = ["Jaeger", "TraceView", "jaeger", "jaeger_binary", "running_jaeger"]

BUILD = PROJECT_DIR / "infra" / "jaeger" / "build.sh"

_CONFIG = """\
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp}
processors:
  batch:
    timeout: 200ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"""


@dataclass(frozen=True)
class TraceView:
    """One trace as Jaeger returns it: spans by name, parents by span id."""

    spans: list[dict[str, Any]]

    def named(self, name: str) -> list[dict[str, Any]]:
        """The spans called ``name``."""
        return [s for s in self.spans if s["operationName"] == name]

    def starting(self, prefix: str) -> list[dict[str, Any]]:
        """The spans whose name starts with ``prefix``."""
        return [s for s in self.spans if s["operationName"].startswith(prefix)]

    @staticmethod
    def parent(span: dict[str, Any]) -> str | None:
        """The span id of ``span``'s parent (``CHILD_OF`` reference), if any."""
        for ref in span.get("references", ()):
            if ref["refType"] == "CHILD_OF":
                return str(ref["spanID"])
        return None

    @staticmethod
    def tag(span: dict[str, Any], key: str) -> Any:
        """The value of tag ``key`` (``None`` if absent)."""
        for tag in span.get("tags", ()):
            if tag["key"] == key:
                return tag["value"]
        return None


@dataclass(frozen=True)
class Jaeger:
    """A running Jaeger: where to send spans and where to read them."""

    otlp_endpoint: str
    query_url: str

    def trace(self, trace_id: int) -> TraceView | None:
        """The trace ``trace_id`` (``None`` until Jaeger has it)."""
        url = f"{self.query_url}/api/traces/{trace_id:032x}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise
        data = body.get("data") or []
        return TraceView(data[0]["spans"]) if data else None

    def answers(self) -> bool:
        """Whether the query API is up."""
        try:
            with urllib.request.urlopen(  # noqa: S310 - loopback
                f"{self.query_url}/api/services", timeout=2
            ) as response:
                return bool(response.status == 200)
        except OSError:
            return False


def jaeger_binary() -> Path | None:
    """The cached binary, built first if missing (``None``: cannot be built here)."""
    if shutil.which("go") is None:
        cache = Path(
            os.environ.get("TURNSTREAM_CACHE", Path.home() / ".cache" / "turnstream")
        )
        found = sorted(cache.glob("jaeger-v*[0-9]"))
        return found[-1] if found else None
    out = subprocess.run(  # noqa: S603 - our own build script
        ["bash", str(BUILD)],  # noqa: S607 - bash from PATH, as make runs it
        check=True,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    return Path(out.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def running_jaeger(binary: Path, workdir: Path) -> Iterator[Jaeger]:
    """Jaeger on free loopback ports until the block ends.

    Raises:
        RuntimeError: it did not start (its log's tail is in the message).
    """
    first = free_port_range(3)
    config = workdir / "jaeger.yaml"
    config.write_text(_CONFIG.format(otlp=first, query=first + 1, query_grpc=first + 2))
    log_path = workdir / "jaeger.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(  # noqa: S603 - the binary we built
            [str(binary), "--config", f"file:{config}"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        receiver = Jaeger(f"http://127.0.0.1:{first}", f"http://127.0.0.1:{first + 1}")
        try:
            deadline = time.monotonic() + 60
            while not receiver.answers():
                if process.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    raise RuntimeError(
                        f"Jaeger did not start: {log_path.read_text()[-2000:]}"
                    )
                time.sleep(0.2)  # start-up poll of a child process, not a test wait
            yield receiver
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture(scope="session")
def jaeger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jaeger]:
    """A Jaeger all-in-one of this test session, on free ports."""
    binary = jaeger_binary()
    if binary is None:
        reason = "no Jaeger binary and no Go to build it (infra/jaeger/build.sh)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    with running_jaeger(binary, tmp_path_factory.mktemp("jaeger")) as receiver:
        yield receiver
