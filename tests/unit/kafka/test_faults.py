"""Kafka failures keep their meaning through every wrapper (no broker)."""

from __future__ import annotations

import pytest
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)

from turnstream.kafka.errors import KafkaAuthorizationError
from turnstream.kafka.faults import transport_error
from turnstream.kafka.security import (
    KafkaSecurity,
    SaslMechanism,
    Secret,
    SecurityProtocol,
)

SECURITY = KafkaSecurity(
    protocol=SecurityProtocol.SASL_SSL,
    sasl_mechanism=SaslMechanism.SCRAM_SHA_512,
    sasl_username="actor",
    sasl_password=Secret("not-logged"),
)


@pytest.mark.parametrize(
    ("exc", "named"),
    [
        pytest.param(
            TopicAuthorizationFailedError("t.loops"),
            "User:actor lacks Read on Topic t.loops",
            id="topic",
        ),
        pytest.param(
            GroupAuthorizationFailedError("g"),
            "User:actor lacks Read on Group g",
            id="group",
        ),
        pytest.param(
            TransactionalIdAuthorizationFailed("txn-0"),
            "User:actor lacks Write on TransactionalId txn-0",
            id="transactional-id",
        ),
    ],
)
def test_a_denial_stays_a_typed_non_retriable_denial(
    exc: Exception, named: str
) -> None:
    """A denied read wrapped for the caller is never a plain (retriable-looking)
    transport error: it keeps the principal, the permission and the resource."""
    wrapped = transport_error(
        "read t.loops[0]", exc, security=SECURITY, permission="Read"
    )

    assert isinstance(wrapped, KafkaAuthorizationError)
    assert not wrapped.is_retriable
    assert wrapped.kind == "kafka_authorization"
    assert named in str(wrapped)
    assert "not-logged" not in str(wrapped)


def test_a_denial_without_settings_still_is_one() -> None:
    """A caller that cannot name its principal still gets the typed denial."""
    wrapped = transport_error("start reader", TopicAuthorizationFailedError("t"))

    assert isinstance(wrapped, KafkaAuthorizationError)
    assert "this client's principal lacks Describe on Topic t" in str(wrapped)


def test_an_unreachable_broker_stays_retriable() -> None:
    wrapped = transport_error("read t[0]", KafkaConnectionError(), security=SECURITY)

    assert not isinstance(wrapped, KafkaAuthorizationError)
    assert wrapped.is_retriable
