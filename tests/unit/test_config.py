"""The shared settings vocabulary: one Secret, one lookup rule, one bootstrap lookup."""

from __future__ import annotations

import pytest

from turnstream.config import (
    BOOTSTRAP,
    TIMEOUT,
    Secret,
    Setting,
    bootstrap_source,
    lookup,
)
from turnstream.kafka import security
from turnstream.models import _http


def test_one_secret_class_masks_its_value() -> None:
    """Kafka passwords and model keys are the same masked type."""
    assert security.Secret is Secret is _http.Secret
    secret = Secret("hunter2")
    assert "hunter2" not in repr(secret) + str(secret)
    assert secret.redact("key hunter2 refused") == "key [redacted] refused"


def test_a_flag_wins_and_blank_is_unset() -> None:
    env = {"TURNSTREAM_KAFKA_TIMEOUT": "7"}
    assert lookup(TIMEOUT, {"timeout": 3.0}, env) == 3.0
    assert lookup(TIMEOUT, {}, env) == "7"
    assert lookup(TIMEOUT, {}, {"TURNSTREAM_KAFKA_TIMEOUT": "  "}) is None


def test_a_flag_the_cli_left_unset_does_not_read_the_variable_again() -> None:
    """The CLI read the variable into the flag already: once is enough."""
    env = {"TURNSTREAM_KAFKA_TIMEOUT": "7"}
    assert lookup(TIMEOUT, {"timeout": None}, env) is None
    # The bootstrap's three-way lookup is the parser's, so it still reads it.
    assert lookup(BOOTSTRAP, {"bootstrap": None}, {"KAFKA_BOOTSTRAP_SERVERS": "k:1"})


def test_the_bootstrap_lookup_names_its_source() -> None:
    assert bootstrap_source(" a:1 ", {}) == (" a:1 ", "--bootstrap")
    assert bootstrap_source(None, {"KAFKA_BOOTSTRAP_SERVERS": "b:2"}) == (
        "b:2",
        "KAFKA_BOOTSTRAP_SERVERS",
    )
    assert bootstrap_source(None, {"TURNSTREAM_BROKER_PORT": "3"}) == (
        "127.0.0.1:3",
        "TURNSTREAM_BROKER_PORT",
    )
    assert bootstrap_source(None, {}) == ("127.0.0.1:19092", "bootstrap")


def test_a_secret_has_no_flag() -> None:
    with pytest.raises(ValueError, match="no flag"):
        Setting(name="pw", env="PW", flags=("--pw",), help="x", secret=True)
