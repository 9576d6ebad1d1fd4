"""docker-compose.yml without Docker: the ``cluster`` profile is a coherent KRaft
cluster on the ports ``turnstream broker up --nodes 3`` uses."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from turnstream.devbroker import ClusterSettings

PROJECT_DIR = Path(__file__).resolve().parents[2]
BROKERS = ("kafka-1", "kafka-2", "kafka-3")


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(
        (PROJECT_DIR / "docker-compose.yml").read_text(encoding="utf-8")
    )
    return data["services"]


def test_default_services_have_no_profile() -> None:
    """`docker compose up -d` still starts the single broker and its topics job."""
    services = _compose()
    assert "profiles" not in services["kafka"]
    assert "profiles" not in services["topics"]


def test_cluster_profile_is_one_static_quorum_of_three() -> None:
    """Three nodes, distinct ids, one cluster id, one voter list naming them all."""
    services = _compose()
    envs = [services[name]["environment"] for name in BROKERS]
    assert all(services[name]["profiles"] == ["cluster"] for name in BROKERS)
    assert [e["KAFKA_NODE_ID"] for e in envs] == ["1", "2", "3"]
    assert len({e["CLUSTER_ID"] for e in envs}) == 1
    raw = base64.urlsafe_b64decode(envs[0]["CLUSTER_ID"] + "==")
    assert len(raw) == 16  # a Kafka Uuid
    voters = "1@kafka-1:9093,2@kafka-2:9093,3@kafka-3:9093"
    assert {e["KAFKA_CONTROLLER_QUORUM_VOTERS"] for e in envs} == {voters}
    for name, env in zip(BROKERS, envs, strict=True):
        assert services[name]["hostname"] == name
        assert f"INTERNAL://{name}:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
        assert env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == "3"
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == "2"
        assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "2"
        assert env["KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE"] == "false"


def test_cluster_profile_publishes_the_dev_cluster_ports() -> None:
    """Host ports 29192-29194, as the JVM cluster, advertised on loopback."""
    services = _compose()
    ports = ClusterSettings.for_project(PROJECT_DIR, {}, nodes=3)
    for name, node in zip(BROKERS, ports.nodes, strict=True):
        port = node.client_port
        assert services[name]["ports"] == [f"127.0.0.1:{port}:{port}"]
        env = services[name]["environment"]
        assert f"HOST://127.0.0.1:{port}" in env["KAFKA_ADVERTISED_LISTENERS"]
        assert f"HOST://:{port}" in env["KAFKA_LISTENERS"]
    topics = services["topics-cluster"]
    assert topics["profiles"] == ["cluster"]
    assert set(topics["depends_on"]) == set(BROKERS)
    assert "--replication-factor" not in topics["command"]
