"""Settings from env and flags, the JSON views, and the package's layering."""

from __future__ import annotations

import ast
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from turnstream import analytics
from turnstream.analytics.aggregate import FoldConfig, TerminalKind, fold_journal
from turnstream.analytics.report import build_snapshot, totals_view, windows_view
from turnstream.analytics.sample import LoopPlan, TurnPlan, build_journal
from turnstream.analytics.settings import AnalyticsSettings, Guarantee
from turnstream.cli.analytics import analytics_settings
from turnstream.errors import ConfigError

PACKAGE_DIR = Path(analytics.__file__).parent


def test_settings_defaults():
    """Defaults match the documented topic names and loopback web server."""
    s = AnalyticsSettings()
    assert (s.events_topic, s.analytics_topic) == (
        "turnstream.events.v1",
        "turnstream.analytics.v1",
    )
    assert (s.web_host, s.web_port, s.window_size_ms) == ("127.0.0.1", 6066, 60_000)
    assert s.guarantee is Guarantee.EXACTLY_ONCE


def test_settings_from_env_reads_every_variable(tmp_path: Path):
    """Each documented variable is honoured."""
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": "k1:9092, k2:9093",
        "TURNSTREAM_SCHEMA_DIR": str(tmp_path),
        "TURNSTREAM_TOPIC_PARTITIONS": "6",
        "TURNSTREAM_TOPIC_REPLICATION_FACTOR": "3",
        "TURNSTREAM_ANALYTICS_APP_ID": "a1",
        "TURNSTREAM_ANALYTICS_EVENTS_TOPIC": "ev",
        "TURNSTREAM_ANALYTICS_TOPIC": "out",
        "TURNSTREAM_ANALYTICS_WINDOW_SECONDS": "2.5",
        "TURNSTREAM_ANALYTICS_WINDOW_RETENTION": "5",
        "TURNSTREAM_ANALYTICS_DEDUPE_WINDOW": "9",
        "TURNSTREAM_ANALYTICS_CLOSED_TURNS": "4",
        "TURNSTREAM_ANALYTICS_PUBLISH_SECONDS": "0.5",
        "TURNSTREAM_ANALYTICS_WEB_HOST": "127.0.0.2",
        "TURNSTREAM_ANALYTICS_WEB_PORT": "7001",
        "TURNSTREAM_ANALYTICS_DATA_DIR": str(tmp_path / "d"),
        "TURNSTREAM_ANALYTICS_GUARANTEE": "at_least_once",
        "TURNSTREAM_ANALYTICS_SESSION_TIMEOUT_SECONDS": "6.5",
    }
    s = AnalyticsSettings.from_env(env)
    assert s.bootstrap == "k1:9092,k2:9093"
    assert s.schema_dir == tmp_path
    assert (s.partitions, s.replication_factor, s.app_id) == (6, 3, "a1")
    assert (s.events_topic, s.analytics_topic) == ("ev", "out")
    assert (s.window_size_ms, s.window_retention) == (2_500, 5)
    assert (s.dedupe_window, s.closed_turns, s.publish_interval_s) == (9, 4, 0.5)
    assert (s.web_host, s.web_port, s.data_dir) == ("127.0.0.2", 7001, tmp_path / "d")
    assert s.guarantee is Guarantee.AT_LEAST_ONCE
    assert s.session_timeout_s == 6.5
    assert s.fold_config() == FoldConfig(
        window_size_ms=2_500, window_retention=5, dedupe_window=9, closed_turns=4
    )


def test_settings_bootstrap_falls_back_to_the_local_broker_port():
    """Without KAFKA_BOOTSTRAP_SERVERS the dev broker's port is used."""
    assert AnalyticsSettings.from_env(
        {"TURNSTREAM_BROKER_PORT": "29092"}
    ).bootstrap == ("127.0.0.1:29092")


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        pytest.param(
            {"KAFKA_BOOTSTRAP_SERVERS": "nohost"}, "bootstrap", id="bootstrap"
        ),
        pytest.param(
            {"TURNSTREAM_TOPIC_PARTITIONS": "x"}, "PARTITIONS", id="partitions-nan"
        ),
        pytest.param(
            {"TURNSTREAM_TOPIC_PARTITIONS": "0"}, "partitions", id="partitions-zero"
        ),
        pytest.param(
            {"TURNSTREAM_ANALYTICS_WINDOW_SECONDS": "0"}, "WINDOW", id="window"
        ),
        pytest.param(
            {"TURNSTREAM_ANALYTICS_GUARANTEE": "maybe"}, "GUARANTEE", id="guarantee"
        ),
        pytest.param(
            {"TURNSTREAM_ANALYTICS_TOPIC": "bad topic"}, "analytics_topic", id="topic"
        ),
        pytest.param(
            {"TURNSTREAM_ANALYTICS_TOPIC": "turnstream.events.v1"},
            "analytics_topic",
            id="same",
        ),
        pytest.param({"TURNSTREAM_ANALYTICS_WEB_PORT": "70000"}, "web_port", id="port"),
        pytest.param(
            {"TURNSTREAM_ANALYTICS_SESSION_TIMEOUT_SECONDS": "0"},
            "session_timeout_s",
            id="session-timeout",
        ),
    ],
)
def test_settings_reject_invalid_values(env, setting):
    """Invalid configuration is a ConfigError naming the setting."""
    with pytest.raises(ConfigError, match=setting):
        AnalyticsSettings.from_env(env)


def test_settings_flags_override_env():
    """Command-line flags win over the environment."""
    s = analytics_settings(
        {
            "KAFKA_BOOTSTRAP_SERVERS": "env:2",
            "TURNSTREAM_ANALYTICS_SESSION_TIMEOUT_SECONDS": "30",
        },
        bootstrap="h:1",
        window_seconds=10,
        web_port=9,
        no_web=True,
        session_timeout=7,
    )
    assert (s.bootstrap, s.window_size_ms, s.web_port, s.web_enabled) == (
        "h:1",
        10_000,
        9,
        False,
    )
    assert s.session_timeout_s == 7


def test_views_render_totals_and_windows():
    """The JSON views carry metadata, totals with means, and the windows."""
    config = FoldConfig()
    plans = [
        LoopPlan(
            turns=[
                TurnPlan(steps=2, tool_calls_per_step=1),
                TurnPlan(TerminalKind.FAILED),
            ]
        )
    ]
    states = fold_journal(build_journal(plans), config)
    snap = build_snapshot(
        states.values(), config, app_id="v", snapshot_id=uuid.UUID(int=3)
    )
    totals = totals_view(snap)
    assert totals["app_id"] == "v"
    assert totals["windows"] == 1
    assert totals["totals"]["turns_ended"] == 2
    assert totals["totals"]["steps"]["mean"] == 1.5
    assert totals["totals"]["tool_calls"]["mean"] == 1.0
    assert "buckets" not in totals["totals"]["latency"]
    windows = windows_view(snap)
    assert [w["start"] for w in windows["windows"]] == ["2026-01-01T12:00:00+00:00"]
    assert windows["windows"][0]["turns_failed"] == 1


# --------------------------------------------------------------------------
# Package shape and layering
# --------------------------------------------------------------------------


def test_package_all_is_a_table_of_contents():
    """Every name in __all__ resolves (serve lazily)."""
    for name in analytics.__all__:
        assert getattr(analytics, name) is not None


def test_package_import_does_not_import_faust():
    """The pure modules are usable without faust (a fresh interpreter checks)."""
    code = (
        "import sys, turnstream.analytics, turnstream.analytics.report, "
        "turnstream.analytics.sample; "
        "assert 'faust' not in sys.modules, 'faust imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)  # noqa: S603


FAUST_MODULES = {
    "codecs.py",
    "transport.py",
    "app.py",
    "__main__.py",
    "failure_streak.py",
}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, id=str(p.relative_to(PACKAGE_DIR)))
        for p in sorted(PACKAGE_DIR.rglob("*.py"))
    ],
)
def test_package_respects_the_layering(path: Path):
    """No runtime/kafka/aiokafka/fastavro imports; faust only in the faust layer."""
    imports = _imports(path)
    roots = {name.split(".")[0] for name in imports}
    assert not {"aiokafka", "fastavro"} & roots
    assert not any(
        name.startswith(("turnstream.runtime", "turnstream.kafka")) for name in imports
    )
    if path.name not in FAUST_MODULES:
        assert not {"faust", "mode"} & roots, f"{path.name} must stay pure"
