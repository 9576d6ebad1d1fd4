"""Errors raised by the Kafka admin side: reaching the broker and managing topics.

Owns these branches of the turnstream error tree::

    TurnstreamError
    ├── TransportError
    │   ├── BrokerUnreachableError     no admin call succeeded against the bootstrap
    │   ├── KafkaAuthenticationError   the broker refused the SASL login
    │   ├── KafkaTlsError              the TLS handshake failed (CA, hostname, protocol)
    │   ├── KafkaAuthorizationError    an ACL denies a permission on a resource
    │   ├── TopicCreateError           the broker refused to create a topic
    │   └── TopicAlterError            a topic's configs could not be altered safely
    └── TopicConfigMismatchError       existing topics differ from their declared spec

None of authentication, TLS and authorisation failures is retriable: the same
settings fail the same way until an operator changes them, so each says which
setting or permission to change.

Pure: stdlib and ``turnstream.errors`` only; must not import aiokafka (callers
translate aiokafka's errors into these).
"""

from __future__ import annotations

from dataclasses import dataclass

from turnstream.errors import TransportError, TurnstreamError

__all__ = [
    "BrokerUnreachableError",
    "ConfigMismatch",
    "KafkaAuthenticationError",
    "KafkaAuthorizationError",
    "KafkaTlsError",
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


class KafkaAuthenticationError(TransportError):
    """The broker refused the SASL login (wrong password, unknown user, mechanism).

    Kafka answers a wrong password and an unknown user alike, on purpose.

    Attributes:
        bootstrap: the servers tried.
        username: the SASL user (never the password).
        mechanism: the SASL mechanism used.
        detail: the broker's answer, e.g. ``invalid credentials``.
        fix: what to change.
    """

    kind = "kafka_authentication"

    def __init__(
        self, bootstrap: str, *, username: str, mechanism: str, detail: str, fix: str
    ) -> None:
        self.bootstrap = bootstrap
        self.username = username
        self.mechanism = mechanism
        self.detail = detail
        self.fix = fix
        super().__init__(f"log in to Kafka at {bootstrap}", detail, retriable=False)
        self.args = (
            f"Kafka at {bootstrap} refused the {mechanism} login of user "
            f"{username!r}: {detail}; {fix}",
        )


class KafkaTlsError(TransportError):
    """The TLS handshake with the broker failed, or one side does not speak TLS.

    Attributes:
        bootstrap: the servers tried.
        problem: ``untrusted_certificate``, ``certificate_expired``,
            ``hostname_mismatch``, ``client_certificate_required``,
            ``client_certificate_refused``, ``listener_is_tls``,
            ``listener_not_tls``, ``listener_needs_sasl`` or
            ``handshake_failed``.
        detail: what the TLS layer said.
        fix: what to change.
    """

    kind = "kafka_tls"

    def __init__(self, bootstrap: str, *, problem: str, detail: str, fix: str) -> None:
        self.bootstrap = bootstrap
        self.problem = problem
        self.detail = detail
        self.fix = fix
        super().__init__(
            f"open a TLS connection to Kafka at {bootstrap}", detail, retriable=False
        )
        self.args = (f"TLS with Kafka at {bootstrap} failed: {detail}; {fix}",)


class KafkaAuthorizationError(TransportError):
    """An ACL denies this principal a permission the operation needs.

    Attributes:
        principal: e.g. ``User:actor``.
        permission: the ACL operation, e.g. ``Write``, ``Read``, ``Describe``.
        resource_type: ``Topic``, ``Group``, ``TransactionalId`` or ``Cluster``.
        resource: the resource name (``kafka-cluster`` for the cluster).
        operation: what was being done.
    """

    kind = "kafka_authorization"

    def __init__(
        self,
        *,
        principal: str,
        permission: str,
        resource_type: str,
        resource: str,
        operation: str,
    ) -> None:
        self.principal = principal
        self.permission = permission
        self.resource_type = resource_type
        self.resource = resource
        super().__init__(
            operation,
            f"{principal} lacks {permission} on {resource_type} {resource}",
            retriable=False,
        )
        self.args = (
            f"not authorised to {operation}: {principal} lacks {permission} on "
            f"{resource_type} {resource}; grant it (see `turnstream acls`)",
        )


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
