"""The Grafana dashboard and the compose ``metrics`` profile, without Docker.

The dashboard may only query metrics the exporter renders; Prometheus must
scrape the compose actor at the address its ``actor run`` command serves; Grafana
must get the dashboard and a datasource with the uid the dashboard selects.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import typer
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from turnstream.cli.main import app
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.observability import service_registry

PROJECT_DIR = Path(__file__).resolve().parents[3]
DASHBOARD = PROJECT_DIR / "infra" / "grafana" / "turnstream-dashboard.json"
# PromQL words in the dashboard that are not metric names.
_PROMQL = {"sum", "rate", "increase", "histogram_quantile", "up"}


def exported_samples() -> set[str]:
    """Every sample name the actor's registry renders (``_total``, ``_bucket`` …)."""
    metrics = ServiceMetrics()
    text = generate_latest(service_registry(metrics)).decode()
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)  # a gauge or counter family with no sample yet
        if family.type == "counter":
            names.add(f"{family.name}_total")
        if family.type == "histogram":
            names |= {f"{family.name}_{part}" for part in ("bucket", "count", "sum")}
        names |= {sample.name for sample in family.samples}
    return names


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return data


def panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def expressions() -> list[str]:
    return [t["expr"] for p in panels() for t in p["targets"]]


def test_dashboard_queries_only_exported_metrics() -> None:
    """Each metric name in a panel's query is one the exporter renders."""
    exported = exported_samples()
    used = set()
    for expr in expressions():
        # Drop label matchers, ranges, strings and `by (label, …)` groupings.
        without_labels = re.sub(
            r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"|\bby \([^)]*\)", "", expr
        )
        used |= set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", without_labels))
    metric_names = {w for w in used if w not in _PROMQL and not w.isdigit()}

    assert metric_names, "the dashboard queries nothing"
    assert metric_names - exported == set()


def test_dashboard_covers_what_an_operator_asks() -> None:
    """Turns by terminal, durations, tokens, tools, failures, rejections, lag,
    commit latency and Kafka reachability all have a panel."""
    queries = "\n".join(expressions())
    for needed in (
        "sum by (kind) (rate(turnstream_turn_terminals_total",
        "histogram_quantile(0.95, sum by (le) (rate(turnstream_turn_duration_"
        "seconds_bucket",
        "turnstream_tokens_total",
        "turnstream_tool_calls_total",
        "sum by (kind) (rate(turnstream_turn_failures_total",
        "sum by (reason) (rate(turnstream_inputs_rejected_total",
        "turnstream_consumer_lag_records",
        "turnstream_commit_latency_seconds_bucket",
        'up{job="turnstream-actor"}',
        "sum(turnstream_kafka_reachable)",
        "turnstream_kafka_outages_total",
        "turnstream_ready",
        "turnstream_commit_retries_total",
    ):
        assert needed in queries, needed


def test_dashboard_is_a_grafana_dashboard() -> None:
    """Unique ids, a grid position and the datasource variable on every panel."""
    data = dashboard()
    assert data["uid"] == "turnstream-actor"
    assert isinstance(data["schemaVersion"], int)
    ids = [p["id"] for p in data["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"]: v for v in data["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in panels():
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]


def compose_services() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(
        (PROJECT_DIR / "docker-compose.yml").read_text(encoding="utf-8")
    )
    services: dict[str, Any] = data["services"]
    return services


def _mounts(service: dict[str, Any]) -> dict[str, str]:
    """container path -> host path (relative to the compose file)."""
    found = {}
    for volume in service["volumes"]:
        host, container, *_ = volume.split(":")
        found[container] = host
    return found


def _actor_run_params(command: list[str]) -> dict[str, Any]:
    """The parameters ``turnstream actor run`` parses from ``command``."""
    assert command[:3] == ["turnstream", "actor", "run"]
    root: Any = typer.main.get_command(app)
    run = root.commands["actor"].commands["run"]
    params: dict[str, Any] = run.make_context("run", command[3:]).params
    return params


def test_compose_prometheus_scrapes_the_compose_actor() -> None:
    """The metrics profile: Prometheus's target is where the actor serves."""
    services = compose_services()
    for name in ("actor", "prometheus", "grafana"):
        assert services[name]["profiles"] == ["metrics"], name

    params = _actor_run_params(services["actor"]["command"])
    assert params["metrics_host"] == "0.0.0.0"  # noqa: S104 - inside its container
    port = params["metrics_port"]
    assert port == 9464
    assert services["actor"]["depends_on"]["topics"] == {
        "condition": "service_completed_successfully"
    }

    mounts = _mounts(services["prometheus"])
    config_path = mounts["/etc/prometheus/prometheus.yml"]
    assert config_path == "./infra/prometheus/prometheus.yml"
    assert (
        "--config.file=/etc/prometheus/prometheus.yml"
        in (services["prometheus"]["command"])
    )
    config = yaml.safe_load((PROJECT_DIR / config_path).read_text(encoding="utf-8"))
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    job = jobs["turnstream-actor"]  # the job the dashboard's `up` panel names
    assert job["metrics_path"] == "/metrics"
    targets = [t for c in job["static_configs"] for t in c["targets"]]
    assert targets == [f"actor:{port}"]


def test_compose_grafana_gets_the_dashboard_and_the_datasource() -> None:
    """Grafana's provisioning points at Prometheus and loads the dashboard."""
    grafana = compose_services()["grafana"]
    mounts = _mounts(grafana)
    provisioning = PROJECT_DIR / mounts["/etc/grafana/provisioning"]
    board = mounts["/var/lib/grafana/dashboards/turnstream-dashboard.json"]
    assert (PROJECT_DIR / board).resolve() == DASHBOARD

    sources = yaml.safe_load(
        (provisioning / "datasources" / "prometheus.yml").read_text(encoding="utf-8")
    )["datasources"]
    assert [(s["type"], s["uid"], s["url"]) for s in sources] == [
        ("prometheus", "prometheus", "http://prometheus:9090")
    ]
    current = {v["name"]: v for v in dashboard()["templating"]["list"]}
    assert current["datasource"]["current"]["value"] == sources[0]["uid"]

    providers = yaml.safe_load(
        (provisioning / "dashboards" / "turnstream.yml").read_text(encoding="utf-8")
    )["providers"]
    assert [p["options"]["path"] for p in providers] == ["/var/lib/grafana/dashboards"]
