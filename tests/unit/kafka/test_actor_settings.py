"""The loop-actor deployable's settings: flags over environment, secrets masked."""

from __future__ import annotations

import gc

import pytest

from turnstream.errors import ConfigError
from turnstream.kafka.security import SaslMechanism, SecurityProtocol
from turnstream.loop_actor.gc_policy import DEFAULT_GC_THRESHOLD, apply_gc_threshold
from turnstream.loop_actor.settings import parse_settings
from turnstream.loop_actor.tools import DemoTool, tool_set


def test_actor_settings_defaults() -> None:
    """Nothing set: the local broker, the demo model, the demo tools."""
    settings = parse_settings({})
    assert settings.bootstrap == "127.0.0.1:19092"
    assert settings.model == "demo"
    assert settings.tools == "demo"
    assert settings.group_id == "turnstream-loop-actor"
    assert settings.security.protocol is SecurityProtocol.PLAINTEXT


def test_actor_settings_flags_win_over_environment() -> None:
    """A flag overrides its environment variable."""
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": "kafka:9092",
        "TURNSTREAM_GROUP_ID": "from-env",
        "TURNSTREAM_DEMO_CHUNK_DELAY": "0.5",
        "TURNSTREAM_SESSION_TIMEOUT_MS": "7000",
    }
    settings = parse_settings(env, {"group_id": "from-flag", "topic_prefix": "t."})
    assert settings.bootstrap == "kafka:9092"
    assert settings.group_id == "from-flag"
    assert settings.topic_prefix == "t."
    assert settings.chunk_delay == 0.5
    assert settings.session_timeout_ms == 7000


def test_actor_settings_secrets_come_from_the_environment_and_stay_hidden() -> None:
    """SASL password and API key are read from env and never shown."""
    env = {
        "TURNSTREAM_KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
        "TURNSTREAM_KAFKA_SASL_MECHANISM": "scram-sha-256",
        "TURNSTREAM_KAFKA_SASL_USERNAME": "svc",
        "TURNSTREAM_KAFKA_SASL_PASSWORD": "pa55word",
        "TURNSTREAM_MODEL_API_KEY": "sk-secret",
    }
    settings = parse_settings(env)
    assert settings.security.protocol is SecurityProtocol.SASL_SSL
    assert settings.security.sasl_mechanism is SaslMechanism.SCRAM_SHA_256
    assert "pa55word" not in repr(settings)
    assert "sk-secret" not in repr(settings)
    kwargs = settings.security.client_kwargs()
    assert kwargs["sasl_plain_password"] == "pa55word"


@pytest.mark.parametrize(
    ("flags", "env", "setting"),
    [
        pytest.param({"tools": "all"}, {}, "tools", id="unknown-tools"),
        pytest.param(
            {"session_timeout_ms": "1000"},
            {},
            "session_timeout_ms",
            id="short-session",
        ),
        pytest.param({"chunk_delay": "fast"}, {}, "chunk_delay", id="not-a-number"),
        pytest.param(
            {},
            {"TURNSTREAM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"},
            "sasl_mechanism",
            id="sasl-incomplete",
        ),
        pytest.param({"bootstrap": "nohostport"}, {}, "--bootstrap", id="bootstrap"),
    ],
)
def test_actor_settings_reject_bad_values(
    flags: dict[str, str | None], env: dict[str, str], setting: str
) -> None:
    """Every invalid setting is a ConfigError naming it."""
    with pytest.raises(ConfigError) as caught:
        parse_settings(env, flags)
    assert caught.value.setting == setting


async def test_actor_demo_tools_wrap_the_pure_functions() -> None:
    """The demo tool set runs ``add``; bad input is an error result, not a raise."""
    tools = tool_set("demo")
    assert [t.spec.name for t in tools] == ["add", "word_count"]
    add = tools[0]
    assert isinstance(add, DemoTool)
    ok = await add.run('{"a": 2, "b": 3}', None)  # type: ignore[arg-type]
    assert ok.content[0].text == "5"  # type: ignore[union-attr]
    bad = await add.run('{"a": "x", "b": 3}', None)  # type: ignore[arg-type]
    assert bad.is_error
    assert tool_set("none") == ()


def test_actor_module_alias_rejects_an_unknown_flag() -> None:
    """``python -m turnstream.loop_actor`` is ``actor run``: a bad flag exits 2."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "turnstream.loop_actor", "--no-such-flag"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "No such option" in done.stderr
    assert "--no-such-flag" in done.stderr


def test_actor_settings_group_timings_and_membership() -> None:
    """Defaults, flags and the checks of the group settings."""
    default = parse_settings({})
    assert (
        default.session_timeout_ms,
        default.heartbeat_interval_ms,
        default.rebalance_timeout_ms,
        default.drain_timeout,
        default.instance_id,
    ) == (8000, 1000, 10_000, 30.0, "auto")
    env = {"TURNSTREAM_DRAIN_TIMEOUT": "5", "TURNSTREAM_INSTANCE_ID": "pod-1"}
    flags = {"heartbeat_interval_ms": "2000", "rebalance_timeout_ms": "4000"}
    tuned = parse_settings(env, flags)
    assert (tuned.heartbeat_interval_ms, tuned.rebalance_timeout_ms) == (2000, 4000)
    assert (tuned.drain_timeout, tuned.instance_id) == (5.0, "pod-1")
    for bad in (
        {"heartbeat_interval_ms": "4000"},  # more than a third of the session
        {"rebalance_timeout_ms": "10"},
        {"drain_timeout": "-1"},
    ):
        with pytest.raises(ConfigError):
            parse_settings({}, bad)


def test_actor_settings_gc_threshold() -> None:
    """The collector's threshold: 10,000 by default, flag over variable, checked."""
    assert parse_settings({}).gc_threshold == DEFAULT_GC_THRESHOLD == 10_000
    env = {"TURNSTREAM_GC_THRESHOLD": "0"}
    assert parse_settings(env).gc_threshold == 0
    assert parse_settings(env, {"gc_threshold": "50000"}).gc_threshold == 50_000
    for bad in ("-1", "1000001", "many"):
        with pytest.raises(ConfigError) as caught:
            parse_settings({}, {"gc_threshold": bad})
        assert caught.value.setting == "gc_threshold"


def test_actor_settings_max_resident_loops() -> None:
    """The resident budget: 10,000 loops by default, flag over variable, >= 1."""
    assert parse_settings({}).max_resident_loops == 10_000
    env = {"TURNSTREAM_MAX_RESIDENT_LOOPS": "500"}
    assert parse_settings(env).max_resident_loops == 500
    flags = {"max_resident_loops": "7"}
    assert parse_settings(env, flags).max_resident_loops == 7
    for bad in ("0", "-3", "lots"):
        with pytest.raises(ConfigError) as caught:
            parse_settings({}, {"max_resident_loops": bad})
        assert caught.value.setting == "max_resident_loops"


def test_apply_gc_threshold_sets_the_first_generation_only() -> None:
    """The first threshold changes, the older ones stay; 0 changes nothing."""
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 11, 12)
        assert apply_gc_threshold(0) == (700, 11, 12)
        assert apply_gc_threshold(10_000) == (10_000, 11, 12)
        assert gc.get_threshold() == (10_000, 11, 12)
    finally:
        gc.set_threshold(*before)
