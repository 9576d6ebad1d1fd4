"""Sorting a faust crash reason (no broker)."""

from __future__ import annotations

import pytest
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)

from turnstream.analytics.errors import (
    WorkerDeniedError,
    WorkerStoppedError,
    stopped_error,
)


def fetched_records() -> None:
    raise TopicAuthorizationFailedError("app-changelog")


def send() -> None:
    raise TopicAuthorizationFailedError({"out", "app-changelog"})


def _raised(fn: object) -> BaseException:
    try:
        fn()  # type: ignore[operator]
    except TopicAuthorizationFailedError as exc:
        return exc
    raise AssertionError("did not raise")


def test_a_denied_fetch_is_a_denied_read() -> None:
    error = stopped_error(_raised(fetched_records))

    assert isinstance(error, WorkerDeniedError)
    assert (error.permission, error.resource) == ("Read", "app-changelog")


def test_a_denied_send_is_a_denied_write_naming_every_topic() -> None:
    error = stopped_error(_raised(send))

    assert isinstance(error, WorkerDeniedError)
    assert (error.permission, error.resource) == ("Write", "app-changelog, out")


def test_any_other_crash_is_a_stop_naming_the_type() -> None:
    error = stopped_error(KafkaConnectionError("x"))

    assert type(error) is WorkerStoppedError
    assert str(error) == "the analytics worker stopped by itself (KafkaConnectionError)"
    assert str(stopped_error(None)).endswith("(no reason given)")


def test_a_refused_topic_creation_is_a_denied_create_naming_the_topic() -> None:
    """faust's create_topic names the topic only in its message."""
    refused = TopicAuthorizationFailedError(
        "Cannot create topic: p.turnstream.analytics.v1 (29): Authorization failed."
    )

    error = stopped_error(refused)

    assert isinstance(error, WorkerDeniedError)
    assert (error.permission, error.resource) == ("Create", "p.turnstream.analytics.v1")


@pytest.mark.parametrize(
    ("refusal", "denied"),
    [
        pytest.param(
            GroupAuthorizationFailedError("app"), ("Read", "Group", "app"), id="group"
        ),
        pytest.param(
            TransactionalIdAuthorizationFailed("app-0-1"),
            ("Write", "TransactionalId", "app-0-1"),
            id="transactional-id",
        ),
    ],
)
def test_a_group_or_transactional_id_refused_while_running_is_a_denial(
    refusal: BaseException, denied: tuple[str, str, str]
) -> None:
    """A grant removed while the worker runs surfaces in its transactions (the
    offsets' commit, a new transaction); named like the start-up check names it."""
    error = stopped_error(refusal)

    assert isinstance(error, WorkerDeniedError)
    assert (error.permission, error.resource_type, error.resource) == denied
