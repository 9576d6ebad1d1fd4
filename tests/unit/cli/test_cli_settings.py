"""Settings of the turn commands: validated once, one clear error per problem."""

from __future__ import annotations

import uuid

import pytest

from turnstream.cli.settings import (
    ExitCode,
    KafkaTarget,
    MetricsEndpoint,
    ModelChoice,
    parse_log_format,
    parse_loop_id,
)
from turnstream.errors import ConfigError
from turnstream.kafka.security import SaslMechanism, SecurityProtocol
from turnstream.loop_actor.settings import parse_security, parse_settings
from turnstream.observability.logs import LogFormat

KEY = "sk-test-not-a-real-key-0123456789"


def test_exit_codes_are_the_documented_ones() -> None:
    """0 done, 1 failed, 2 usage, 3 unreachable, 4 login refused, 5 TLS failed,
    6 ACL denied, 130 interrupted."""
    assert [int(c) for c in ExitCode] == [0, 1, 2, 3, 4, 5, 6, 130]


@pytest.mark.parametrize(
    ("spec", "base_url", "env", "provider", "name"),
    [
        pytest.param("demo", None, {}, "demo", "demo", id="demo"),
        pytest.param(" Demo ", None, {}, "demo", "demo", id="demo-case-space"),
        pytest.param(
            "openai:gpt-4o-mini",
            None,
            {"OPENAI_API_KEY": KEY},
            "openai",
            "gpt-4o-mini",
            id="openai-default-url",
        ),
        pytest.param(
            "openai:llama3.1",
            "http://127.0.0.1:11434/v1",
            {},
            "openai",
            "llama3.1",
            id="openai-local-no-key",
        ),
        pytest.param(
            "anthropic:claude-sonnet-4-5",
            None,
            {"ANTHROPIC_API_KEY": KEY},
            "anthropic",
            "claude-sonnet-4-5",
            id="anthropic",
        ),
    ],
)
def test_model_choice_accepts(
    spec: str, base_url: str | None, env: dict[str, str], provider: str, name: str
) -> None:
    """Valid specs parse into provider and name; the key comes from the env."""
    choice = ModelChoice.parse(spec, base_url=base_url, env=env)

    assert (choice.provider, choice.name) == (provider, name)
    assert KEY not in repr(choice)


@pytest.mark.parametrize(
    ("spec", "base_url", "env", "message"),
    [
        pytest.param("gpt-4", None, {}, "--model", id="bare-name"),
        pytest.param("demo:x", None, {}, "--model", id="demo-with-name"),
        pytest.param("openai:", None, {}, "model name is empty", id="empty-name"),
        pytest.param("mistral:large", None, {}, "--model", id="unknown-provider"),
        pytest.param("openai:gpt-4o", None, {}, "OPENAI_API_KEY", id="openai-no-key"),
        pytest.param(
            "anthropic:claude",
            "http://127.0.0.1:9/v1",
            {},
            "ANTHROPIC_API_KEY",
            id="anthropic-no-key",
        ),
        pytest.param("openai:m", "ftp://x", {}, "--base-url", id="bad-base-url"),
    ],
)
def test_model_choice_rejects(
    spec: str, base_url: str | None, env: dict[str, str], message: str
) -> None:
    """Each bad spec is a ConfigError naming the flag or variable to fix."""
    with pytest.raises(ConfigError) as caught:
        ModelChoice.parse(spec, base_url=base_url, env=env)

    assert message in str(caught.value)


def test_model_choice_rejects_negative_chunk_delay() -> None:
    """The demo's chunk delay must be a finite number >= 0."""
    with pytest.raises(ConfigError, match="--chunk-delay"):
        ModelChoice.parse("demo", base_url=None, env={}, chunk_delay=-1)


def test_kafka_target_flag_beats_env() -> None:
    """--bootstrap wins over KAFKA_BOOTSTRAP_SERVERS, which wins over the default."""
    env = {"KAFKA_BOOTSTRAP_SERVERS": "kafka:9092"}

    assert KafkaTarget.resolve(bootstrap="h:1", env=env).bootstrap == "h:1"
    assert KafkaTarget.resolve(bootstrap=None, env=env).bootstrap == "kafka:9092"
    assert KafkaTarget.resolve(bootstrap=None, env={}).bootstrap == "127.0.0.1:19092"


def test_kafka_target_topic_affixes_from_env() -> None:
    """TURNSTREAM_TOPIC_PREFIX/SUFFIX name an isolated topic set."""
    target = KafkaTarget.resolve(
        bootstrap=None,
        env={"TURNSTREAM_TOPIC_PREFIX": "t1.", "TURNSTREAM_TOPIC_SUFFIX": ".x"},
    )

    assert target.topics.commands == "t1.turnstream.commands.v1.x"


@pytest.mark.parametrize(
    ("bootstrap", "timeout", "message"),
    [
        pytest.param("no-port", 5.0, "not host:port", id="bad-bootstrap"),
        pytest.param(None, 0.0, "--timeout", id="zero-timeout"),
    ],
)
def test_kafka_target_rejects(
    bootstrap: str | None, timeout: float, message: str
) -> None:
    """A malformed bootstrap or timeout is a ConfigError."""
    with pytest.raises(ConfigError, match=message):
        KafkaTarget.resolve(bootstrap=bootstrap, env={}, timeout=timeout)


def test_metrics_endpoint_port_zero_is_off() -> None:
    """Port 0 turns the endpoint off; it binds to loopback by default."""
    assert not MetricsEndpoint(port=0).enabled
    assert MetricsEndpoint().enabled
    assert MetricsEndpoint().host == "127.0.0.1"


def test_metrics_endpoint_rejects_bad_port() -> None:
    """A port outside 0..65535 is refused."""
    with pytest.raises(ConfigError, match="--metrics-port"):
        MetricsEndpoint(port=70000)


def test_parse_loop_id() -> None:
    """Loop ids are UUIDs; anything else names the flag."""
    loop = uuid.uuid4()
    assert parse_loop_id(str(loop)) == loop
    assert parse_loop_id(loop.hex) == loop
    with pytest.raises(ConfigError, match="--loop"):
        parse_loop_id("loop-1")


def test_parse_log_format() -> None:
    """json or text, case-insensitive."""
    assert parse_log_format("JSON") is LogFormat.JSON
    with pytest.raises(ConfigError, match="--log-format"):
        parse_log_format("xml")


def test_model_choice_falls_back_to_the_generic_key() -> None:
    """TURNSTREAM_MODEL_API_KEY serves when the provider's variable is unset."""
    choice = ModelChoice.parse(
        "openai:gpt-4o-mini", base_url=None, env={"TURNSTREAM_MODEL_API_KEY": KEY}
    )

    assert choice.api_key == KEY


def test_actor_settings_apply_flags_over_the_environment() -> None:
    """Flags win; the key becomes a masked Secret; the topic affixes carry over."""
    env = {
        "TURNSTREAM_GROUP_ID": "from-env",
        "TURNSTREAM_SYSTEM_PROMPT": "be brief",
        "ANTHROPIC_API_KEY": KEY,
    }
    flags = {
        "bootstrap": "kafka:9092",
        "topic_prefix": "p.",
        "group_id": "from-flag",
        "model": "anthropic:claude-x",
        "tools": "none",
    }

    settings = parse_settings(env, flags)

    assert settings.bootstrap == "kafka:9092"
    assert settings.group_id == "from-flag"
    assert settings.topic_prefix == "p."
    assert settings.model == "anthropic:claude-x"
    assert settings.tools == "none"
    assert settings.system_prompt == "be brief"
    assert settings.model_api_key is not None
    assert settings.model_api_key.reveal() == KEY
    assert KEY not in repr(settings)


def test_kafka_target_reads_security_like_the_loop_actor() -> None:
    """Flags win over TURNSTREAM_KAFKA_*; the password comes from the env only;
    the result equals what the loop actor's own parser makes of the same input."""
    env = {
        "TURNSTREAM_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "TURNSTREAM_KAFKA_SASL_MECHANISM": "PLAIN",
        "TURNSTREAM_KAFKA_SASL_USERNAME": "from-env",
        "TURNSTREAM_KAFKA_SASL_PASSWORD": "pw-from-env",
    }
    flags = {"sasl_mechanism": "scram-sha-512", "sasl_username": "from-flag"}

    target = KafkaTarget.resolve(bootstrap="k:9092", env=env, security=flags)

    assert target.security == parse_security(flags, env)
    assert target.security.protocol is SecurityProtocol.SASL_PLAINTEXT
    assert target.security.sasl_mechanism is SaslMechanism.SCRAM_SHA_512
    assert target.security.sasl_username == "from-flag"
    common = target.clients("turnstream-cli").common("admin")
    assert common["sasl_plain_password"] == "pw-from-env"
    assert "pw-from-env" not in repr(target)


def test_actor_settings_take_the_targets_security() -> None:
    """actor run's services use the security its own broker probe used."""
    flags = {"bootstrap": "k:9092", "security_protocol": "SSL"}
    target = KafkaTarget.resolve(bootstrap="k:9092", env={}, security=flags)

    settings = parse_settings({}, flags)

    assert settings.security == target.security

    assert settings.security.protocol is SecurityProtocol.SSL


def test_actor_settings_security_flags_with_the_password_in_the_environment() -> None:
    """Flags give protocol, mechanism and user; the password is in the environment:
    both are validated together (the environment alone is not checked first).
    """
    env = {"TURNSTREAM_KAFKA_SASL_PASSWORD": "pw-from-env"}
    settings = parse_settings(
        env,
        {
            "bootstrap": "kafka:9093",
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username": "actor",
        },
    )
    assert settings.security.protocol is SecurityProtocol.SASL_SSL
    assert settings.security.client_kwargs()["sasl_plain_password"] == "pw-from-env"
    assert "pw-from-env" not in repr(settings)


def test_analytics_worker_gets_the_resolved_security() -> None:
    """analytics run hands faust the flags-over-environment security, the
    password hidden from the settings' repr."""
    from turnstream.analytics.app import _credentials
    from turnstream.cli.analytics import analytics_auth, analytics_settings

    env = {"TURNSTREAM_KAFKA_SASL_PASSWORD": "pw-from-env"}
    target = KafkaTarget.resolve(
        bootstrap="k:9092",
        env=env,
        security={
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username": "analytics",
        },
    )

    settings = analytics_settings(
        env, bootstrap=target.bootstrap, auth=analytics_auth(target.security)
    )
    credentials = _credentials(settings.auth)["broker_credentials"]

    assert settings.bootstrap == "k:9092"
    assert (settings.auth.protocol, settings.auth.sasl_username) == (
        "SASL_PLAINTEXT",
        "analytics",
    )
    assert "pw-from-env" not in repr(settings)
    assert (credentials.protocol.value, credentials.mechanism.value) == (
        "SASL_PLAINTEXT",
        "SCRAM-SHA-512",
    )
    assert (credentials.username, credentials.password) == ("analytics", "pw-from-env")


def test_analytics_run_names_an_isolated_topic_sets_topics_and_group() -> None:
    """--topic-prefix: the set's journal, and its own analytics topic and app id."""
    pytest.importorskip("faust")
    from turnstream.cli.analytics import affixed_names, analytics_settings

    names = affixed_names(
        {}, prefix="team-a.", suffix="", events="team-a.turnstream.events.v1"
    )
    settings = analytics_settings({}, **names)
    assert settings.events_topic == "team-a.turnstream.events.v1"
    assert settings.analytics_topic == "team-a.turnstream.analytics.v1"
    assert settings.app_id == "team-a.turnstream-analytics"
    assert affixed_names({}, prefix="", suffix="", events="turnstream.events.v1") == {}
    # A name the environment sets is kept.
    env = {"TURNSTREAM_ANALYTICS_APP_ID": "mine"}
    assert "app_id" not in affixed_names(env, prefix="p.", suffix="", events="e")


def test_analytics_run_takes_a_topic_prefix_and_says_what_it_computes() -> None:
    from typer.testing import CliRunner

    from turnstream.cli.main import app

    result = CliRunner().invoke(
        app, ["analytics", "run", "--help"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert "--topic-prefix" in result.output
    assert "latency percentiles" in " ".join(result.output.split())
