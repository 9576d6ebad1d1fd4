"""Record keys, dead-letter headers and error classification."""

from __future__ import annotations

from uuid import uuid4

import pytest
from aiokafka.errors import (
    KafkaConnectionError,
    MessageSizeTooLargeError,
    NotLeaderForPartitionError,
    OutOfOrderSequenceNumber,
    ProducerFenced,
)

from turnstream.errors import TransportError
from turnstream.kafka.faults import Fault, classify, transport_error
from turnstream.kafka.records import (
    DLQ_OFFSET,
    DLQ_PARTITION,
    DLQ_REASON,
    DLQ_TOPIC,
    dead_letter_headers,
    dead_letter_id,
    loop_key,
    parse_loop_key,
)


def test_records_loop_key_round_trips() -> None:
    """Keys are the loop id's canonical text."""
    loop_id = uuid4()
    assert loop_key(loop_id) == str(loop_id).encode()
    assert parse_loop_key(loop_key(loop_id)) == loop_id


@pytest.mark.parametrize(
    "key",
    [
        pytest.param(None, id="none"),
        pytest.param(b"", id="empty"),
        pytest.param(b"not-a-uuid", id="text"),
        pytest.param(b"\xff\xfe", id="binary"),
        pytest.param(b"x" * 100, id="long"),
    ],
)
def test_records_malformed_keys_name_no_loop(key: bytes | None) -> None:
    """A key that is not a loop id is ``None``, never an exception."""
    assert parse_loop_key(key) is None


def test_records_dead_letter_headers_keep_originals_and_say_where() -> None:
    """Original headers stay; reason, topic, partition and offset are added."""
    headers = dead_letter_headers(
        [("trace", b"1"), (DLQ_REASON, b"old")],
        reason="cannot decode command: x" * 100,
        topic="cmds",
        partition=2,
        offset=41,
    )
    values = dict(headers)
    assert values["trace"] == b"1"
    assert len(values[DLQ_REASON]) == 512
    assert values[DLQ_TOPIC] == b"cmds"
    assert values[DLQ_PARTITION] == b"2"
    assert values[DLQ_OFFSET] == b"41"
    assert [name for name, _ in headers].count(DLQ_REASON) == 1


def test_records_dead_letter_id_is_stable_per_position() -> None:
    """The same record always gets the same pseudo command id."""
    assert dead_letter_id("t", 0, 5) == dead_letter_id("t", 0, 5)
    assert dead_letter_id("t", 0, 5) != dead_letter_id("t", 0, 6)


@pytest.mark.parametrize(
    ("error", "fault"),
    [
        pytest.param(ProducerFenced(), Fault.FENCED, id="fenced"),
        pytest.param(OutOfOrderSequenceNumber(), Fault.FATAL, id="sequence"),
        pytest.param(KafkaConnectionError(), Fault.RETRIABLE, id="connection"),
        pytest.param(NotLeaderForPartitionError(), Fault.RETRIABLE, id="leader"),
        pytest.param(TimeoutError(), Fault.RETRIABLE, id="timeout"),
        pytest.param(MessageSizeTooLargeError(), Fault.PERMANENT, id="too-large"),
        pytest.param(ValueError("x"), Fault.PERMANENT, id="other"),
    ],
)
def test_records_classify_sorts_producer_errors(error: Exception, fault: Fault) -> None:
    """Fencing stops, transient retries, the rest fails the request."""
    assert classify(error) is fault


def test_records_transport_error_keeps_retriable_and_hides_text() -> None:
    """The wrapped error names the type, never the library's message."""
    wrapped = transport_error("send", KafkaConnectionError("secret host detail"))
    assert isinstance(wrapped, TransportError)
    assert wrapped.is_retriable
    assert "secret host detail" not in str(wrapped)
