"""The one public import surface: ``turnstream`` and ``turnstream.client``.

The top-level names are the client's (loaded on first use), so a leaf import
stays free of Kafka; every name resolves to the object the subpackages define.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import turnstream
import turnstream.client
from turnstream.kafka.client import JournalConsumer, KafkaSession, TurnOutcome


def test_top_level_names_are_the_clients() -> None:
    """Every top-level export (but the version) is the same object as the client's."""
    for name in turnstream.__all__:
        if name == "__version__":
            continue
        assert getattr(turnstream, name) is getattr(turnstream.client, name), name
    assert turnstream.KafkaSession is KafkaSession
    assert turnstream.JournalConsumer is JournalConsumer
    assert turnstream.TurnOutcome is TurnOutcome
    assert (turnstream.__doc__ or "").strip()


def test_unknown_top_level_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = turnstream.nope  # type: ignore[attr-defined]


def test_importing_a_leaf_does_not_load_kafka() -> None:
    """``import turnstream.events`` loads neither aiokafka nor the client."""
    code = (
        "import sys, turnstream.events; "
        "print('aiokafka' in sys.modules, 'turnstream.client' in sys.modules)"
    )
    done = subprocess.run(  # noqa: S603 - our own interpreter, fixed code
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": ":".join(sys.path)},
    )
    assert done.stdout.split() == ["False", "False"]
