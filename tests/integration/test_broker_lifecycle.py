"""The development broker's life cycle: up, reuse, status, clear errors, down.

These tests start a second, private broker JVM (own temp state dir and free ports),
so they never disturb the session broker other tests use.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from tests.support.cluster import free_port_range

from turnstream.devbroker import (
    BrokerConfigChangedError,
    BrokerExitedError,
    BrokerSettings,
    BrokerState,
    DevBroker,
    PortInUseError,
    ensure_jars,
    process,
)
from turnstream.kafka import broker_answers

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PROJECT_DIR = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    # Below the ephemeral range: the broker manager refuses ports inside it.
    return free_port_range(1)


@pytest.fixture
def private_settings(tmp_path: Path) -> BrokerSettings:
    """Settings for a throw-away broker sharing the checkout's jar cache."""
    base = BrokerSettings.for_project(PROJECT_DIR, {}, state_dir=tmp_path / "kafka")
    settings = replace(
        base,
        client_port=_free_port(),
        controller_port=_free_port(),
        heap_min="128m",
        heap_max="512m",
        start_timeout=60.0,
    )
    ensure_jars(settings)
    return settings


@pytest.fixture
def private_broker(private_settings: BrokerSettings) -> Iterator[DevBroker]:
    broker = DevBroker(private_settings, probe=broker_answers, env=os.environ)
    try:
        yield broker
    finally:
        broker.down()


def test_up_is_idempotent_and_down_leaves_nothing(
    private_broker: DevBroker, tmp_path: Path
) -> None:
    """up starts once and reuses after; taken ports are refused; down stops the JVM."""
    assert private_broker.status().state is BrokerState.STOPPED

    first = private_broker.up()
    assert first.started
    assert first.state is BrokerState.RUNNING
    assert first.pid is not None
    assert broker_answers(first.bootstrap)

    second = private_broker.up()
    assert not second.started
    assert second.pid == first.pid

    status = private_broker.status()
    assert (status.state, status.pid) == (BrokerState.RUNNING, first.pid)

    # Another checkout on the same ports gets PortInUseError, not a crashed JVM.
    other = DevBroker(
        replace(private_broker.settings, state_dir=tmp_path / "other"),
        probe=broker_answers,
        env=os.environ,
    )
    with pytest.raises(PortInUseError) as info:
        other.up()
    assert info.value.port == private_broker.settings.client_port
    assert info.value.role == "client"

    # The same checkout asked for other ports is refused, not silently reused.
    moved = DevBroker(
        replace(private_broker.settings, client_port=_free_port()),
        probe=broker_answers,
        env=os.environ,
    )
    with pytest.raises(BrokerConfigChangedError):
        moved.up()

    assert private_broker.down()
    assert not process.pid_alive(first.pid)
    assert not private_broker.settings.pid_path.exists()
    assert private_broker.status().state is BrokerState.STOPPED
    assert not private_broker.down()  # stopping twice is fine


def test_broker_that_dies_at_start_reports_its_log(
    private_settings: BrokerSettings,
) -> None:
    """A JVM that exits during start-up is a BrokerExitedError with the log tail."""
    broken = DevBroker(
        replace(private_settings, heap_min="1m", heap_max="not-a-size"),
        probe=broker_answers,
        env=os.environ,
    )
    with pytest.raises(BrokerExitedError) as info:
        broken.up()
    assert info.value.exit_code not in (None, 0)
    assert "heap" in info.value.log_tail.lower()
    assert broken.running_pid() is None
    assert not broken.settings.pid_path.exists()


def test_first_up_reports_the_fetch_and_times_only_the_broker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first `up` shows the jar download as it goes, and "ready in" leaves it out.

    The fake ``mvn`` prints Maven's download and copy lines and copies the real
    jars. The clock jumps 1,000 s when the fetch starts (a long download), so a
    "ready in" that counted the fetch would show it.
    """
    cache = PROJECT_DIR / "infra" / "kafka" / ".cache" / "libs"
    shared = BrokerSettings.for_project(PROJECT_DIR, {})
    ensure_jars(shared)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mvn = bin_dir / "mvn"
    mvn.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case "$a" in -DoutputDirectory=*) '
        'out="${a#-DoutputDirectory=}";; esac; done\n'
        'echo "[INFO] Downloaded from central: https://repo/kafka_2.13-4.1.1.jar'
        ' (6.5 MB at 3.2 MB/s)"\n'
        f'for jar in "{cache}"/*.jar; do\n'
        '  echo "[INFO] Copying $(basename "$jar") to $out/$(basename "$jar")"\n'
        '  cp "$jar" "$out/"\n'
        "done\n"
    )
    mvn.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    settings = replace(
        shared,
        libs_dir=tmp_path / "libs",
        state_dir=tmp_path / "kafka",
        client_port=_free_port(),
        controller_port=_free_port(),
        heap_min="128m",
        heap_max="512m",
        start_timeout=60.0,
    )
    jump = [0.0]

    def progress(line: str) -> None:
        lines.append(line)
        if line.startswith("fetching Kafka jars"):
            jump[0] += 1000.0

    lines: list[str] = []
    broker = DevBroker(
        settings,
        probe=broker_answers,
        env=os.environ,
        progress=progress,
        clock=lambda: time.monotonic() + jump[0],
    )
    try:
        status = broker.up()
    finally:
        broker.down()

    jars = sum(1 for _ in cache.glob("*.jar"))
    assert status.started
    assert status.seconds < 1000.0
    assert "… 1 file downloaded (6.5 MB), 0 jars copied" in lines
    assert any(line.startswith(f"fetched {jars} jars in ") for line in lines)
    ready = [line for line in lines if line.startswith("broker ready at ")]
    assert len(ready) == 1, lines
    assert float(ready[0].rsplit(" in ", 1)[1].removesuffix(" s")) < 1000.0
