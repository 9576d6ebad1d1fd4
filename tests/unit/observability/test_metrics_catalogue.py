"""Every metric the actor exports: rendered with a value, and listed in the docs.

``service_registry`` over a :class:`ServiceMetrics` whose every field holds a
distinct value must render exactly those values, and ``docs/operations.md``'s
``/metrics`` table must name exactly the rendered families, with their type, unit
and labels.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.observability import service_registry

GUIDE = Path(__file__).resolve().parents[3] / "docs/operations.md"
Sample = tuple[str, tuple[tuple[str, str], ...]]


def populated() -> ServiceMetrics:
    """A ServiceMetrics with a distinct value in every exported field."""
    m = ServiceMetrics()
    m.ready = True
    m.partitions = {0, 2}
    m.live_loops = 3
    m.turns_started = 4
    m.steps_committed = 5
    m.terminals.update({"TurnDone": 6, "TurnFailed": 7, "TurnInterrupted": 8})
    m.turn_duration.observe(0.07)
    m.turn_duration.observe(700.0)
    m.failures.update({"provider": 9, "tool_limit": 10})
    m.rejections.update({"queue_full": 11})
    m.tokens.update({"input": 12, "output": 13})
    m.tool_calls.update({"ok": 14, "error": 15})
    m.commits = 16
    m.commit_retries = 17
    m.commit_failures = 18
    m.offset_mispredictions = 39
    m.commit_latency.observe(0.003)
    m.commands.update({"SubmitInput": 19, "Interrupt": 20})
    m.duplicates = 21
    m.dead_letters = 22
    m.dead_letters_truncated = 23
    m.dead_letters_dropped = 24
    m.deltas_sent = 25
    m.deltas_dropped = 26
    m.fenced = 27
    m.restores.update({"snapshot": 28, "replay": 29})
    m.consumer_lag.update({0: 30, 2: 31})
    m.kafka_reachable = False
    m.kafka_outages = 32
    m.kafka_connects.attempts = 40
    m.kafka_connects.failures = 41
    m.rebalances = 33
    m.partitions_kept = 34
    m.partitions_moved = 35
    m.bridged = 36
    m.drain_interrupted = 37
    m.passivated = 41
    m.rejoins = 38
    return m


def rendered(metrics: ServiceMetrics) -> str:
    return generate_latest(service_registry(metrics, process=False)).decode()


def turnstream_samples(text: str) -> dict[Sample, float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("turnstream_") and not s.name.endswith("_created")
    }


def _histogram(
    name: str, buckets: dict[str, float], count: float, total: float
) -> dict[Sample, float]:
    found: dict[Sample, float] = {
        (f"{name}_bucket", (("le", le),)): n for le, n in buckets.items()
    }
    found[(f"{name}_count", ())] = count
    found[(f"{name}_sum", ())] = total
    return found


def test_every_exported_metric_renders_its_value() -> None:
    """Each family of the exporter carries exactly the value its field holds."""
    samples = turnstream_samples(rendered(populated()))

    # 0.07 s lands in the 0.1 bucket, 700 s only in +Inf; 0.003 s in the first.
    turn_bounds = "0.1 0.25 0.5 1.0 2.5 5.0 10.0 30.0 60.0 120.0 300.0 600.0"
    durations = {"0.05": 0.0, **dict.fromkeys(turn_bounds.split(), 1.0)}
    durations["+Inf"] = 2.0
    commit_bounds = "0.005 0.01 0.025 0.05 0.1 0.25 0.5 1.0 2.5 5.0 10.0 +Inf"
    latencies = dict.fromkeys(commit_bounds.split(), 1.0)
    expected: dict[Sample, float] = {
        ("turnstream_ready", ()): 1.0,
        ("turnstream_partitions_owned", ()): 2.0,
        ("turnstream_live_loops", ()): 3.0,
        ("turnstream_turns_started_total", ()): 4.0,
        ("turnstream_steps_total", ()): 5.0,
        ("turnstream_turn_terminals_total", (("kind", "TurnDone"),)): 6.0,
        ("turnstream_turn_terminals_total", (("kind", "TurnFailed"),)): 7.0,
        ("turnstream_turn_terminals_total", (("kind", "TurnInterrupted"),)): 8.0,
        **_histogram("turnstream_turn_duration_seconds", durations, 2.0, 700.07),
        ("turnstream_turn_failures_total", (("kind", "provider"),)): 9.0,
        ("turnstream_turn_failures_total", (("kind", "tool_limit"),)): 10.0,
        ("turnstream_inputs_rejected_total", (("reason", "queue_full"),)): 11.0,
        ("turnstream_tokens_total", (("kind", "input"),)): 12.0,
        ("turnstream_tokens_total", (("kind", "output"),)): 13.0,
        ("turnstream_tool_calls_total", (("outcome", "error"),)): 15.0,
        ("turnstream_tool_calls_total", (("outcome", "ok"),)): 14.0,
        ("turnstream_commits_total", ()): 16.0,
        ("turnstream_commit_retries_total", ()): 17.0,
        ("turnstream_commit_failures_total", ()): 18.0,
        ("turnstream_offset_mispredictions_total", ()): 39.0,
        **_histogram("turnstream_commit_latency_seconds", latencies, 1.0, 0.003),
        ("turnstream_commands_total", (("type", "Interrupt"),)): 20.0,
        ("turnstream_commands_total", (("type", "SubmitInput"),)): 19.0,
        ("turnstream_duplicate_commands_total", ()): 21.0,
        ("turnstream_loops_passivated_total", ()): 41.0,
        ("turnstream_dead_letters_total", ()): 22.0,
        ("turnstream_dead_letters_truncated_total", ()): 23.0,
        ("turnstream_dead_letters_dropped_total", ()): 24.0,
        ("turnstream_deltas_sent_total", ()): 25.0,
        ("turnstream_delta_drops_total", ()): 26.0,
        ("turnstream_fenced_total", ()): 27.0,
        ("turnstream_restores_total", (("how", "replay"),)): 29.0,
        ("turnstream_restores_total", (("how", "snapshot"),)): 28.0,
        ("turnstream_consumer_lag_records", (("partition", "0"),)): 30.0,
        ("turnstream_consumer_lag_records", (("partition", "2"),)): 31.0,
        ("turnstream_kafka_reachable", ()): 0.0,
        ("turnstream_kafka_outages_total", ()): 32.0,
        ("turnstream_kafka_connects_total", ()): 40.0,
        ("turnstream_kafka_connect_failures_total", ()): 41.0,
        ("turnstream_rebalances_total", ()): 33.0,
        ("turnstream_partitions_kept_total", ()): 34.0,
        ("turnstream_partitions_moved_total", ()): 35.0,
        ("turnstream_bridged_commands_total", ()): 36.0,
        ("turnstream_drain_interrupted_total", ()): 37.0,
        ("turnstream_group_rejoins_total", ()): 38.0,
    }
    assert samples.keys() == expected.keys()
    for key, value in expected.items():
        assert samples[key] == pytest.approx(value), key


def readme_table() -> dict[str, tuple[str, str, str]]:
    """name -> (type, unit, label) of the operations guide's /metrics table."""
    section = GUIDE.read_text().split("## Metrics (`/metrics`)", 1)[1]
    section = section.split("\n## ", 1)[0]
    rows: dict[str, tuple[str, str, str]] = {}
    for line in section.splitlines():
        match = re.match(
            r"^\| `(turnstream_[a-z_]+)` \| (\w+) \| ([^|]+) \| ([^|]+) \|", line
        )
        if match:
            name, kind, unit, labels = match.groups()
            label = re.match(r"`(\w+)`", labels.strip())
            rows[name] = (kind, unit.strip(), label.group(1) if label else "")
    return rows


def exported_families() -> dict[str, tuple[str, str]]:
    """exposition name -> (type, label other than ``le``) of every family."""
    families: dict[str, tuple[str, str]] = {}
    for family in text_string_to_metric_families(rendered(populated())):
        if not family.name.startswith("turnstream_"):
            continue
        name = f"{family.name}_total" if family.type == "counter" else family.name
        labels = {k for s in family.samples for k in s.labels if k != "le"}
        assert len(labels) <= 1, (name, labels)
        families[name] = (family.type, next(iter(labels), ""))
    return families


def test_readme_lists_every_exported_metric_with_its_type_and_labels() -> None:
    """The guide's table and the exporter name the same metrics, types, labels."""
    table = readme_table()
    families = exported_families()

    assert sorted(table) == sorted(families)
    for name, (kind, unit, label) in table.items():
        assert (kind, label) == families[name], name
        if name.endswith("_seconds"):
            assert unit == "seconds", name
        if name.endswith("_records"):
            assert unit == "records", name
