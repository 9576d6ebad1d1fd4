"""Fixtures of the secured lane: a SASL_SSL + SCRAM + ACL broker of its own.

``secure_kafka`` (session-scoped) makes a certificate with keytool, starts a
secured development broker (:mod:`turnstream.devbroker.secure`) on
127.0.0.1:19492 (``TURNSTREAM_SECURE_BROKER_PORT`` moves it; the controller
takes the next port) in a temporary directory, applies the topic set and the
ACLs ``turnstream acls --apply`` prints, as the super user ``admin``, and stops
the broker at the end. Every test here is marked ``secure``; ``make test``
leaves them out and ``make test-secure`` runs them.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from tests.support.secure import PROJECT_DIR, SecureKafka, invoke

from turnstream.devbroker import BrokerError, BrokerSettings, DevBroker
from turnstream.devbroker.process import find_java
from turnstream.devbroker.secure import (
    ADMIN_USER,
    make_certificate,
    secure_broker_settings,
)
from turnstream.kafka import broker_answers

PORT_ENV = "TURNSTREAM_SECURE_BROKER_PORT"
DEFAULT_PORT = 19492
PARTITIONS = 2
_TLS_CLOSE_RACE = (
    r"ignore:Exception ignored in.*(socket\.socket|_SelectorTransport)"
    ":pytest.PytestUnraisableExceptionWarning"
)
USERS = (
    "admin",
    "actor",
    "client",
    "analytics",
    "actor-noloops",
    "actor-notxn",
    "actor-noreadloops",
    "actor-revoked",
    "reader",
    "sweep-actor",
    "sweep-client",
    "sweep-analytics",
)


def _asked_for(config: pytest.Config, here: Path) -> bool:
    """Whether this run names the lane: ``-m`` mentions it or a path is in it."""
    if "secure" in (config.getoption("markexpr", "") or ""):
        return True
    for arg in config.args:
        path = Path(arg.split("::", 1)[0]).resolve()
        if path.is_relative_to(here):
            return True
    return False


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Mark every test of this folder ``secure``; run them only when asked for."""
    here = Path(__file__).parent.resolve()
    mine = [i for i in items if Path(str(i.fspath)).resolve().is_relative_to(here)]
    for item in mine:
        item.add_marker(pytest.mark.secure)
        item.add_marker(pytest.mark.slow)
        # aiokafka closes a TLS connection by starting the TLS shutdown; a
        # command whose asyncio.run() ends right after it leaves the socket to
        # the garbage collector. Only that report is tolerated here.
        item.add_marker(pytest.mark.filterwarnings(_TLS_CLOSE_RACE))
    if mine and not _asked_for(config, here):
        config.hook.pytest_deselected(items=mine)
        keep = set(map(id, mine))
        items[:] = [i for i in items if id(i) not in keep]


@pytest.fixture(scope="session")
def secure_kafka(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[SecureKafka]:
    """A started secured broker with the topic set and the roles' ACLs applied."""
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        pytest.fail("the secured lane needs java (and keytool)", pytrace=False)
    port = int(os.environ.get(PORT_ENV, "") or DEFAULT_PORT)
    state = tmp_path_factory.mktemp("secure-broker")
    java = find_java(os.environ)
    files = make_certificate(java, state / "tls", host="127.0.0.1", env=os.environ)
    passwords = {user: secrets.token_hex(12) for user in USERS}
    base = BrokerSettings.for_project(
        PROJECT_DIR,
        {
            "TURNSTREAM_BROKER_PORT": str(port),
            "TURNSTREAM_CONTROLLER_PORT": str(port + 1),
        },
        state_dir=state / "broker",
    )
    settings = secure_broker_settings(
        BrokerSettings(
            project_dir=base.project_dir,
            libs_dir=base.libs_dir,
            state_dir=base.state_dir,
            client_port=base.client_port,
            controller_port=base.controller_port,
            heap_max="512m",
        ),
        files,
        users=passwords,
    )
    kafka = SecureKafka(
        bootstrap=settings.bootstrap, ca_file=files.ca_file, passwords=passwords
    )
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")

    def say(line: str) -> None:
        if reporter is not None:
            reporter.write_line(f"[secure-kafka] {line}")

    broker = DevBroker(
        settings,
        probe=partial(broker_answers, security=kafka.security(ADMIN_USER)),
        env=os.environ,
        progress=say,
    )
    try:
        broker.up()
    except BrokerError as exc:
        pytest.fail(f"the secured broker did not start: {exc}", pytrace=False)
    try:
        admin = kafka.password_env(ADMIN_USER)
        code, output = invoke(
            [
                "topics",
                "apply",
                *kafka.flags(ADMIN_USER),
                "--partitions",
                str(PARTITIONS),
                "--replication-factor",
                "1",
            ],
            admin,
        )
        assert code == 0, output
        code, output = invoke(["acls", "--apply", *kafka.flags(ADMIN_USER)], admin)
        assert code == 0, output
        yield kafka
    finally:
        broker.down()
