"""Errors raised by the Kafka admin side: reaching the broker and managing topics.

Owns these branches of the turnstream error tree::

    TurnstreamError
    ├── TransportError
    │   ├── BrokerUnreachableError     no admin call succeeded against the bootstrap
    │   ├── TopicCreateError           the broker refused to create a topic
    │   └── TopicAlterError            a topic's configs could not be altered safely
    └── TopicConfigMismatchError       existing topics differ from their declared spec

Pure: stdlib and ``turnstream.errors`` only; must not import aiokafka (callers
translate aiokafka's errors into these).
"""

from __future__ import annotations

from dataclasses import dataclass

from turnstream.errors import TransportError, TurnstreamError

__all__ = [
    "BrokerUnreachableError",
    "ConfigMismatch",
    "TopicAlterError",
    "TopicConfigMismatchError",
    "TopicCreateError",
]


class BrokerUnreachableError(TransportError):
    """No admin call succeeded against the bootstrap servers in time.

    Attributes:
        bootstrap: the bootstrap servers tried.
        reason: what went wrong (connection refused, timeout, ...).
    """

    kind = "broker_unreachable"
    retriable = True

    def __init__(self, bootstrap: str, reason: str) -> None:
        self.bootstrap = bootstrap
        super().__init__(f"reach Kafka at {bootstrap}", reason, retriable=True)
        # One readable line, e.g. for the CLI: the operation prefix adds nothing.
        self.args = (f"cannot reach Kafka at {bootstrap}: {reason}",)


class TopicCreateError(TransportError):
    """The broker answered a CreateTopics request with an error for one topic.

    Attributes:
        topic: the topic name.
        error_code: Kafka's numeric error code.
        error_name: the error's class name (e.g. ``InvalidReplicationFactorError``).
        detail: the broker's message, if any.
    """

    kind = "topic_create_failed"

    def __init__(
        self,
        topic: str,
        error_code: int,
        error_name: str,
        detail: str,
        *,
        retriable: bool,
    ) -> None:
        self.topic = topic
        self.error_code = error_code
        self.error_name = error_name
        self.detail = detail
        super().__init__(
            f"create topic {topic}",
            f"{error_name} ({error_code}): {detail or 'no detail'}",
            retriable=retriable,
        )


class TopicAlterError(TransportError):
    """Altering an existing topic's configs failed or could not be done safely.

    Attributes:
        topic: the topic name.
        reason: the broker's error, or why the change was refused.
    """

    kind = "topic_alter_failed"

    def __init__(self, topic: str, reason: str, *, retriable: bool) -> None:
        self.topic = topic
        super().__init__(f"alter configs of topic {topic}", reason, retriable=retriable)


@dataclass(frozen=True, slots=True)
class ConfigMismatch:
    """One setting of an existing topic that differs from its spec.

    Attributes:
        topic: the topic name.
        key: ``partitions``, ``replication.factor`` or a topic config key.
        expected: the declared value.
        actual: the broker's value (``None`` if the broker did not report it).
    """

    topic: str
    key: str
    expected: str
    actual: str | None

    def __str__(self) -> str:
        return (
            f"topic {self.topic}: {self.key} is {self.actual!r}, "
            f"expected {self.expected!r}"
        )


class TopicConfigMismatchError(TurnstreamError):
    """Topics exist with a configuration other than the declared one.

    They are never silently accepted: an event journal created with
    ``cleanup.policy=compact`` would lose history.

    Attributes:
        mismatches: every differing setting, in spec order (at least one).
    """

    kind = "topic_config_mismatch"

    def __init__(self, mismatches: tuple[ConfigMismatch, ...]) -> None:
        if not mismatches:
            raise ValueError("TopicConfigMismatchError needs at least one mismatch")
        self.mismatches = mismatches
        lines = "\n".join(f"  {m}" for m in mismatches)
        super().__init__(
            f"{len(mismatches)} topic setting(s) differ from the spec:\n{lines}"
        )

    @property
    def topic(self) -> str:
        """The first mismatching topic."""
        return self.mismatches[0].topic

    @property
    def key(self) -> str:
        """The first mismatching setting."""
        return self.mismatches[0].key

    @property
    def expected(self) -> str:
        """The first mismatch's declared value."""
        return self.mismatches[0].expected

    @property
    def actual(self) -> str | None:
        """The first mismatch's actual value."""
        return self.mismatches[0].actual
