"""Shared fixtures: the session's Kafka broker and per-test Kafka names.

``kafka_bootstrap`` (session-scoped, requested only by tests marked ``kafka``) finds a
broker in this order:

1. ``KAFKA_BOOTSTRAP_SERVERS`` if set;
2. the local JVM broker (``turnstream.devbroker``) when Java is present: reused if
   already running, else started, and stopped at session end only if started here;
3. testcontainers' ``KafkaContainer`` when a Docker engine answers.

With none of them the test fails under ``CI=true`` and skips with the reason elsewhere.
Under ``CI=true`` a skipped ``kafka`` test is also turned into a failure: the Kafka lane
never silently skips in CI.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.kafka import KafkaNames, delete_topics, list_topics

from turnstream.devbroker import BrokerError, BrokerSettings, DevBroker
from turnstream.kafka import broker_answers

PROJECT_DIR = Path(__file__).resolve().parents[1]
BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses the broker ``kafka``, so ``-m "not kafka"`` works."""
    for item in items:
        if "kafka_bootstrap" in getattr(item, "fixturenames", ()) and not any(
            item.iter_markers("kafka")
        ):
            item.add_marker(pytest.mark.kafka)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Iterator[None]:
    """Under CI=true, a skipped ``kafka`` test is a failure."""
    report: Any = yield
    xfailed = hasattr(report, "wasxfail")  # an expected failure is not a skip
    if _in_ci() and report.skipped and not xfailed and any(item.iter_markers("kafka")):
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
        report.longrepr = f"kafka test skipped under CI=true (not allowed): {reason}"
    return report  # type: ignore[no-any-return]


def _say(config: pytest.Config) -> Callable[[str], None]:
    reporter = config.pluginmanager.get_plugin("terminalreporter")

    def say(line: str) -> None:
        if reporter is not None:
            reporter.write_line(f"[kafka] {line}")

    return say


def _docker_engine_answers() -> bool:
    """Whether a Docker engine answers a ping.

    The unix socket is probed with a plain socket first: docker-py leaves an
    unclosed socket behind when no engine listens, and warnings are errors here.
    """
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if host.startswith("unix://"):
        with socket.socket(socket.AF_UNIX) as probe:
            probe.settimeout(2)
            try:
                probe.connect(host.removeprefix("unix://"))
            except OSError:
                return False
    try:
        import docker  # type: ignore[import-untyped]

        client = docker.from_env(timeout=5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


@pytest.fixture(scope="session")
def kafka_bootstrap(request: pytest.FixtureRequest) -> Iterator[str]:
    """Bootstrap servers of a real Kafka broker for this test session."""
    say = _say(request.config)
    external = os.environ.get(BOOTSTRAP_ENV, "").strip()
    if external:
        say(f"using {BOOTSTRAP_ENV}={external}")
        yield external
        return

    if os.environ.get("JAVA_HOME") or shutil.which("java"):
        settings = BrokerSettings.for_project(PROJECT_DIR, os.environ)
        broker = DevBroker(settings, probe=broker_answers, env=os.environ, progress=say)
        try:
            status = broker.up()
        except BrokerError as exc:
            pytest.fail(f"the local Kafka broker did not start: {exc}", pytrace=False)
        verb = "started" if status.started else "reusing"
        say(f"{verb} local broker at {status.bootstrap} (pid {status.pid})")
        try:
            yield status.bootstrap
        finally:
            if status.started:
                broker.down()
        return

    if _docker_engine_answers():
        with warnings.catch_warnings():
            # testcontainers.kafka warns that it moved to testcontainers.community.
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                from testcontainers.community.kafka import KafkaContainer
            except ImportError:
                from testcontainers.kafka import KafkaContainer
        say("starting a KafkaContainer (testcontainers)")
        with KafkaContainer().with_kraft() as container:
            yield str(container.get_bootstrap_server())
        return

    reason = (
        f"no Kafka broker: {BOOTSTRAP_ENV} is unset, no java for the local broker "
        "(apt-get install openjdk-17-jre-headless maven), and no Docker engine"
    )
    if _in_ci():
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture
async def kafka_names(
    request: pytest.FixtureRequest, kafka_bootstrap: str
) -> AsyncIterator[KafkaNames]:
    """Unique topic names, group ids and transactional ids for one test.

    Topics named through it (directly or by prefix) are deleted when the test ends.
    """
    stem = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name.removeprefix("test_"))
    names = KafkaNames(test=stem[:60].strip("-") or "t")
    yield names
    existing = await list_topics(kafka_bootstrap)
    await delete_topics(kafka_bootstrap, [t for t in existing if names.owns(t)])
