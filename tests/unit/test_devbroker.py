"""Unit tests of turnstream.devbroker: no broker, no JVM, no Maven."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from turnstream.devbroker import (
    BrokerSettings,
    BrokerState,
    ClusterSettings,
    DevBroker,
    DevCluster,
    EphemeralPortError,
    JarFetchError,
    JavaNotFoundError,
    MavenNotFoundError,
    PortInUseError,
    ensure_jars,
    jars_are_complete,
    process,
    render_server_properties,
    server_properties,
)
from turnstream.devbroker.jars import MARKER_NAME
from turnstream.devbroker.manager import jvm_command, new_cluster_id
from turnstream.devbroker.settings import find_project_dir
from turnstream.errors import ConfigError

POM = "<project><!-- test pom --></project>\n"


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A minimal fake checkout: just infra/kafka/pom.xml."""
    (tmp_path / "infra" / "kafka").mkdir(parents=True)
    (tmp_path / "infra" / "kafka" / "pom.xml").write_text(POM)
    return tmp_path


@pytest.fixture
def listening_port() -> Iterator[int]:
    """A loopback port something listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _parse(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line)
    return {k: v for k, v in pairs if not k.startswith("#")}


def test_settings_default_ports_and_layout(checkout: Path) -> None:
    """Defaults are 19092/19093, data under var/kafka, jars under infra/kafka/.cache."""
    settings = BrokerSettings.for_project(checkout, {})
    assert (settings.client_port, settings.controller_port) == (19092, 19093)
    assert settings.bootstrap == "127.0.0.1:19092"
    assert settings.state_dir == checkout.resolve() / "var" / "kafka"
    assert settings.libs_dir == checkout.resolve() / "infra/kafka/.cache/libs"
    assert settings.data_dir.is_relative_to(settings.state_dir)


def test_settings_ports_come_from_env(checkout: Path) -> None:
    """TURNSTREAM_BROKER_PORT / TURNSTREAM_CONTROLLER_PORT move the listeners."""
    env = {"TURNSTREAM_BROKER_PORT": "29092", "TURNSTREAM_CONTROLLER_PORT": "29093"}
    settings = BrokerSettings.for_project(checkout, env)
    assert settings.bootstrap == "127.0.0.1:29092"
    assert settings.controller_port == 29093


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        pytest.param(
            {"TURNSTREAM_BROKER_PORT": "abc"}, "TURNSTREAM_BROKER_PORT", id="nan"
        ),
        pytest.param(
            {"TURNSTREAM_BROKER_PORT": "70000"}, "TURNSTREAM_BROKER_PORT", id="range"
        ),
        pytest.param(
            {"TURNSTREAM_BROKER_PORT": "19093"},
            "TURNSTREAM_CONTROLLER_PORT",
            id="clash",
        ),
    ],
)
def test_settings_reject_bad_ports(
    checkout: Path, env: dict[str, str], setting: str
) -> None:
    """A bad port override is a ConfigError naming the variable."""
    with pytest.raises(ConfigError) as info:
        BrokerSettings.for_project(checkout, env)
    assert info.value.setting == setting
    assert info.value.kind == "config"


def test_find_project_dir_walks_up(checkout: Path) -> None:
    """The checkout is found from any folder below it."""
    deep = checkout / "a" / "b"
    deep.mkdir(parents=True)
    assert find_project_dir(deep) == checkout.resolve()


def test_find_project_dir_outside_a_checkout(tmp_path: Path) -> None:
    """Outside a checkout the error says what is missing."""
    with pytest.raises(ConfigError, match=r"infra/kafka/pom\.xml"):
        find_project_dir(tmp_path)


def test_server_properties_single_node_kraft(checkout: Path) -> None:
    """Combined roles, a static quorum of one, loopback listeners, RF 1 everywhere."""
    env = {"TURNSTREAM_BROKER_PORT": "29092", "TURNSTREAM_CONTROLLER_PORT": "29093"}
    settings = BrokerSettings.for_project(checkout, env)
    props = _parse(render_server_properties(settings))
    assert props == server_properties(settings)
    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "1"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:29093"
    assert "controller.quorum.bootstrap.servers" not in props  # static quorum only
    assert props["listeners"] == (
        "PLAINTEXT://127.0.0.1:29092,CONTROLLER://127.0.0.1:29093"
    )
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:29092"
    assert props["log.dirs"] == str(settings.data_dir)
    for key in (
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "share.coordinator.state.topic.replication.factor",
        "share.coordinator.state.topic.min.isr",
        "min.insync.replicas",
        "default.replication.factor",
    ):
        assert props[key] == "1", key
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["auto.create.topics.enable"] == "false"
    assert int(props["log.cleaner.backoff.ms"]) <= 1000
    assert int(props["log.cleaner.dedupe.buffer.size"]) < 128 * 1024 * 1024


def test_render_escapes_backslashes(tmp_path: Path) -> None:
    """java.util.Properties reads a backslash as an escape, so paths are escaped."""
    settings = BrokerSettings(
        project_dir=tmp_path, libs_dir=tmp_path, state_dir=tmp_path / "a\\b"
    )
    assert "a\\\\b" in render_server_properties(settings)


def test_jvm_command_uses_classpath_heap_and_g1(checkout: Path) -> None:
    """The broker JVM gets the cached jars, the heap bounds and the G1 flags."""
    settings = BrokerSettings.for_project(checkout, {})
    argv = jvm_command("/usr/bin/java", settings, "kafka.Kafka")
    assert argv[0] == "/usr/bin/java"
    assert argv[-1] == "kafka.Kafka"
    assert argv[argv.index("-cp") + 1] == f"{settings.libs_dir}/*"
    assert {"-Xms256m", "-Xmx1g", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"} <= set(
        argv
    )
    assert f"-Dlog4j2.configurationFile={settings.log4j_config}" in argv


def test_cluster_id_has_kafka_uuid_shape() -> None:
    """22 url-safe base64 characters, like Kafka's Uuid.toString(), never a leading
    '-' (kafka-storage would parse ``--cluster-id -abc`` as a missing value)."""
    ids = {new_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(len(i) == 22 and "=" not in i for i in ids)
    assert not [i for i in ids if i.startswith("-")]


def test_jars_complete_only_with_matching_marker(checkout: Path) -> None:
    """The cache counts only if its marker holds the current pom's hash."""
    settings = BrokerSettings.for_project(checkout, {})
    libs = settings.libs_dir
    assert not jars_are_complete(libs, settings.pom)
    libs.mkdir(parents=True)
    (libs / "kafka.jar").write_bytes(b"jar")
    (libs / MARKER_NAME).write_text("not-the-hash\n")
    assert not jars_are_complete(libs, settings.pom)


def _fake_mvn(folder: Path, script: str) -> None:
    mvn = folder / "mvn"
    mvn.write_text(f"#!/bin/sh\n{script}\n")
    mvn.chmod(mvn.stat().st_mode | stat.S_IEXEC)


def test_ensure_jars_fetches_once_then_reuses(
    checkout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A successful fetch writes the marker; the next call does not run Maven."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    counter = tmp_path / "runs"
    # The fake copies one jar into -DoutputDirectory=<dir> and counts its runs.
    _fake_mvn(
        bin_dir,
        f'echo run >> "{counter}"\n'
        'for a in "$@"; do case "$a" in -DoutputDirectory=*) '
        'out="${a#-DoutputDirectory=}";; esac; done\n'
        'touch "$out/kafka_2.13-4.1.1.jar"',
    )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    settings = BrokerSettings.for_project(checkout, {})
    lines: list[str] = []
    first = ensure_jars(settings, lines.append)
    second = ensure_jars(settings, lines.append)
    assert (first.fetched, second.fetched) == (True, False)
    assert first.jar_count == second.jar_count == 1
    assert jars_are_complete(settings.libs_dir, settings.pom)
    assert counter.read_text().count("run") == 1
    assert any("fetching" in line for line in lines)


_MAVEN_LIKE = (
    'echo "[INFO] Scanning for projects..."\n'
    'echo "[INFO] Downloading from central: https://repo/k/kafka_2.13-4.1.1.jar"\n'
    'echo "[INFO] Downloaded from central: https://repo/k/kafka_2.13-4.1.1.jar'
    ' (6.5 MB at 3.2 MB/s)"\n'
    'echo "[INFO] Downloaded from central: https://repo/s/slf4j-api-1.7.36.jar'
    ' (500 kB at 1.1 MB/s)"\n'
    'for a in "$@"; do case "$a" in -DoutputDirectory=*) '
    'out="${a#-DoutputDirectory=}";; esac; done\n'
    'echo "[INFO] Copying kafka_2.13-4.1.1.jar to $out/kafka_2.13-4.1.1.jar"\n'
    'touch "$out/kafka_2.13-4.1.1.jar"\n'
    'echo "[INFO] Copying slf4j-api-1.7.36.jar to $out/slf4j-api-1.7.36.jar"\n'
    'touch "$out/slf4j-api-1.7.36.jar"\n'
    'echo "[INFO] BUILD SUCCESS"'
)


@pytest.mark.parametrize(
    ("interval", "expected"),
    [
        pytest.param(
            0.0,
            [
                "… 1 file downloaded (6.5 MB), 0 jars copied",
                "… 2 files downloaded (7.0 MB), 0 jars copied",
                "… 2 files downloaded (7.0 MB), 1 jar copied",
                "… 2 files downloaded (7.0 MB), 2 jars copied",
            ],
            id="every-step",
        ),
        pytest.param(
            3600.0, ["… 1 file downloaded (6.5 MB), 0 jars copied"], id="throttled"
        ),
    ],
)
def test_ensure_jars_reports_download_progress(
    checkout: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    interval: float,
    expected: list[str],
) -> None:
    """While Maven runs, its downloads and copies become progress lines (the
    first at once, then one per interval) between 'fetching' and 'fetched'."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_mvn(bin_dir, _MAVEN_LIKE)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    settings = BrokerSettings.for_project(checkout, {})
    lines: list[str] = []

    cache = ensure_jars(settings, lines.append, progress_interval=interval)

    assert cache.jar_count == 2
    assert lines[0] == f"fetching Kafka jars with Maven into {settings.libs_dir} …"
    assert lines[1:-1] == expected
    assert lines[-1].startswith("fetched 2 jars in ")


def test_ensure_jars_reports_maven_failure_tail(
    checkout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failing Maven run is a JarFetchError carrying the end of its output."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_mvn(bin_dir, 'echo "[ERROR] Could not resolve dependencies"; exit 3')
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    settings = BrokerSettings.for_project(checkout, {})
    with pytest.raises(JarFetchError) as info:
        ensure_jars(settings)
    assert info.value.exit_code == 3
    assert "Could not resolve dependencies" in info.value.output_tail
    assert info.value.kind == "jar_fetch_failed"
    assert not settings.libs_dir.exists()


def test_ensure_jars_without_maven(
    checkout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No cache and no mvn is a MavenNotFoundError, not a crash."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(MavenNotFoundError):
        ensure_jars(BrokerSettings.for_project(checkout, {}))


def test_port_is_free_detects_a_listener(listening_port: int) -> None:
    """A port with a listener is not free; the same socket closed is free again."""
    assert not process.port_is_free("127.0.0.1", listening_port)


def test_pid_alive_and_reaping() -> None:
    """Our own pid is alive; an exited child is reaped and reported dead."""
    assert process.pid_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "raise SystemExit(7)"])
    child.wait(timeout=30)
    assert not process.pid_alive(child.pid)


def test_read_pid_tolerates_garbage(tmp_path: Path) -> None:
    """Missing or malformed pid files read as None."""
    assert process.read_pid(tmp_path / "missing.pid") is None
    (tmp_path / "bad.pid").write_text("not a pid\n")
    assert process.read_pid(tmp_path / "bad.pid") is None
    (tmp_path / "ok.pid").write_text("123\n")
    assert process.read_pid(tmp_path / "ok.pid") == 123


def test_tail_file_returns_last_lines(tmp_path: Path) -> None:
    """Only the last lines come back; a missing file gives an empty string."""
    log = tmp_path / "server.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert process.tail_file(log, 3).splitlines() == ["line 97", "line 98", "line 99"]
    assert process.tail_file(tmp_path / "nope.log") == ""


def _never_called(_: str) -> bool:
    raise AssertionError("the probe must not run")


def test_status_without_a_broker_is_stopped(checkout: Path) -> None:
    """No pid file and no process: stopped, and the probe is never called."""
    settings = BrokerSettings.for_project(checkout, {})
    broker = DevBroker(settings, probe=_never_called, env=os.environ)
    found = broker.status()
    assert found.state is BrokerState.STOPPED
    assert found.pid is None


def test_up_without_java_is_a_clear_error(checkout: Path, tmp_path: Path) -> None:
    """No java on PATH and no JAVA_HOME: JavaNotFoundError before anything starts."""
    settings = BrokerSettings.for_project(checkout, {})
    broker = DevBroker(
        settings, probe=_never_called, env={"PATH": str(tmp_path / "empty")}
    )
    with pytest.raises(JavaNotFoundError) as info:
        broker.up()
    assert info.value.kind == "java_missing"
    assert not settings.pid_path.exists()


def test_up_with_port_taken_is_a_clear_error(
    checkout: Path, tmp_path: Path, listening_port: int
) -> None:
    """A foreign listener on the client port: PortInUseError naming port and role."""
    java_home = tmp_path / "jdk"
    (java_home / "bin").mkdir(parents=True)
    _fake_mvn(java_home / "bin", "exit 1")
    (java_home / "bin" / "mvn").rename(java_home / "bin" / "java")
    env = {
        "TURNSTREAM_BROKER_PORT": str(listening_port),
        "JAVA_HOME": str(java_home),
        "PATH": "",
    }
    settings = BrokerSettings.for_project(checkout, env)
    broker = DevBroker(settings, probe=_never_called, env=env)
    with pytest.raises(PortInUseError) as info:
        broker.up()
    assert (info.value.port, info.value.role) == (listening_port, "client")
    assert "TURNSTREAM_BROKER_PORT" in str(info.value)


def test_up_on_an_ephemeral_port_is_a_clear_error(
    checkout: Path, tmp_path: Path
) -> None:
    """A client port in the kernel's ephemeral range: refused before anything runs."""
    ephemeral = process.ephemeral_port_range()
    if ephemeral is None:
        pytest.skip("no /proc/sys/net/ipv4/ip_local_port_range here")
    port = next(
        p
        for p in range(ephemeral[0], ephemeral[1])
        if process.port_is_free("127.0.0.1", p)
    )
    java_home = tmp_path / "jdk"
    (java_home / "bin").mkdir(parents=True)
    _fake_mvn(java_home / "bin", "exit 1")
    (java_home / "bin" / "mvn").rename(java_home / "bin" / "java")
    env = {
        "TURNSTREAM_BROKER_PORT": str(port),
        "JAVA_HOME": str(java_home),
        "PATH": "",
    }
    settings = BrokerSettings.for_project(checkout, env)
    broker = DevBroker(settings, probe=_never_called, env=env)
    with pytest.raises(EphemeralPortError) as info:
        broker.up()
    assert info.value.kind == "ephemeral_port"
    assert (info.value.port, info.value.role) == (port, "client")
    assert (info.value.low, info.value.high) == ephemeral
    assert "TURNSTREAM_BROKER_PORT" in str(info.value)
    assert not settings.pid_path.exists()


def test_ephemeral_port_range_reads_the_kernel_setting(tmp_path: Path) -> None:
    """The range comes from ip_local_port_range; unreadable means unknown."""
    path = tmp_path / "ip_local_port_range"
    path.write_text("32768\t60999\n")
    assert process.ephemeral_port_range(path) == (32768, 60999)
    assert process.ephemeral_port_range(tmp_path / "missing") is None


def test_cluster_settings_ports_and_layout(checkout: Path) -> None:
    """Three nodes: clients on 29192-29194, controllers on 29195-29197, own dirs."""
    cluster = ClusterSettings.for_project(checkout, {}, nodes=3)
    assert [n.client_port for n in cluster.nodes] == [29192, 29193, 29194]
    assert [n.controller_port for n in cluster.nodes] == [29195, 29196, 29197]
    assert [n.node_id for n in cluster.nodes] == [1, 2, 3]
    assert cluster.bootstrap == "127.0.0.1:29192,127.0.0.1:29193,127.0.0.1:29194"
    assert cluster.state_dir == checkout.resolve() / "var" / "kafka-cluster"
    dirs = {n.data_dir for n in cluster.nodes} | {n.pid_path for n in cluster.nodes}
    assert len(dirs) == 6
    assert all(n.state_dir.is_relative_to(cluster.state_dir) for n in cluster.nodes)
    assert all(n.heap_max == "512m" for n in cluster.nodes)
    single = BrokerSettings.for_project(checkout, {})
    assert all(n.libs_dir == single.libs_dir for n in cluster.nodes)


def test_cluster_settings_ports_come_from_env(checkout: Path) -> None:
    """TURNSTREAM_CLUSTER_PORT / _CONTROLLER_PORT move every node's listeners."""
    env = {
        "TURNSTREAM_CLUSTER_PORT": "39000",
        "TURNSTREAM_CLUSTER_CONTROLLER_PORT": "39100",
    }
    cluster = ClusterSettings.for_project(checkout, env, nodes=3)
    assert [n.client_port for n in cluster.nodes] == [39000, 39001, 39002]
    assert [n.controller_port for n in cluster.nodes] == [39100, 39101, 39102]


@pytest.mark.parametrize(
    ("env", "nodes", "setting"),
    [
        pytest.param({}, 1, "--nodes", id="one-node"),
        pytest.param(
            {
                "TURNSTREAM_CLUSTER_PORT": "39000",
                "TURNSTREAM_CLUSTER_CONTROLLER_PORT": "39002",
            },
            3,
            "TURNSTREAM_CLUSTER_CONTROLLER_PORT",
            id="overlap",
        ),
        pytest.param(
            {"TURNSTREAM_CLUSTER_PORT": "65534"},
            3,
            "TURNSTREAM_CLUSTER_PORT",
            id="range",
        ),
    ],
)
def test_cluster_settings_reject_bad_layouts(
    checkout: Path, env: dict[str, str], nodes: int, setting: str
) -> None:
    """Too few nodes or overlapping/out-of-range ports are ConfigErrors."""
    with pytest.raises(ConfigError) as info:
        ClusterSettings.for_project(checkout, env, nodes=nodes)
    assert info.value.setting == setting


def test_server_properties_three_node_cluster(checkout: Path) -> None:
    """Each node: own id, listeners and log dir; one static quorum; RF 3, min ISR 2."""
    cluster = ClusterSettings.for_project(checkout, {}, nodes=3)
    rendered = [_parse(render_server_properties(n)) for n in cluster.nodes]
    voters = "1@127.0.0.1:29195,2@127.0.0.1:29196,3@127.0.0.1:29197"
    for node, props in zip(cluster.nodes, rendered, strict=True):
        assert props["node.id"] == str(node.node_id)
        assert props["controller.quorum.voters"] == voters
        assert props["listeners"] == (
            f"PLAINTEXT://127.0.0.1:{node.client_port},"
            f"CONTROLLER://127.0.0.1:{node.controller_port}"
        )
        assert (
            props["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:{node.client_port}"
        )
        assert props["log.dirs"] == str(node.data_dir)
        for key in (
            "default.replication.factor",
            "offsets.topic.replication.factor",
            "transaction.state.log.replication.factor",
            "share.coordinator.state.topic.replication.factor",
        ):
            assert props[key] == "3", key
        for key in (
            "min.insync.replicas",
            "transaction.state.log.min.isr",
            "share.coordinator.state.topic.min.isr",
        ):
            assert props[key] == "2", key
        assert props["unclean.leader.election.enable"] == "false"
        assert props["offsets.topic.num.partitions"] == "3"
    assert len({p["log.dirs"] for p in rendered}) == 3
    assert len({p["listeners"] for p in rendered}) == 3


def test_single_node_properties_have_no_cluster_keys(checkout: Path) -> None:
    """--nodes 1 renders today's file: no unclean-election key, one voter."""
    props = server_properties(BrokerSettings.for_project(checkout, {}))
    assert "unclean.leader.election.enable" not in props
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"


def test_cluster_status_without_nodes_is_stopped(checkout: Path) -> None:
    """No node runs: stopped, every node stopped, the probe is never called."""
    cluster = DevCluster(
        ClusterSettings.for_project(checkout, {}, nodes=3),
        probe=_never_called,
        env=os.environ,
    )
    found = cluster.status()
    assert found.state is BrokerState.STOPPED
    assert [n.state for n in found.nodes] == [BrokerState.STOPPED] * 3
    assert cluster.kill_node(2) is None
    with pytest.raises(ConfigError):
        cluster.node(4)
