"""Errors of the wire layer: typed refinements of the contract errors.

Owns the errors the codec raises beyond those in :mod:`turnstream.errors`.
Pure: imports only :mod:`turnstream.errors`; never fastavro.

Every failure to *decode* is a :class:`~turnstream.errors.DecodeError`, so a
consumer needs exactly one ``except DecodeError`` around any decoder. Where a
decode failure also means "unsupported schema", "unknown event type" or
"invalid event", the error is an instance of both classes (multiple
inheritance), so either ``except`` clause catches it::

    ContractError
    ├── DecodeError
    │   ├── PayloadTooLargeError            (turnstream.errors)
    │   ├── FramingError                    not C3 01 + fingerprint + body
    │   ├── UnknownFingerprintError         also an UnsupportedSchemaError
    │   ├── UnknownRecordTypeError          also an UnknownEventTypeError
    │   └── InvalidRecordError              also an InvalidEventError
    ├── EncodeError                         a value the schema cannot carry
    │   └── RecordTooLargeError             encoded size over the limit
    └── NotEphemeralError                   enduring event given to the deltas codec

Messages are built from fields and never include payload bytes or text.
"""

from __future__ import annotations

from turnstream.errors import (
    ContractError,
    DecodeError,
    InvalidEventError,
    UnknownEventTypeError,
    UnsupportedSchemaError,
)

__all__ = [
    "EncodeError",
    "FramingError",
    "InvalidRecordError",
    "NotEphemeralError",
    "RecordTooLargeError",
    "UnknownFingerprintError",
    "UnknownRecordTypeError",
]


def _decode_error(error: DecodeError, what: str, reason: str) -> None:
    """What ``DecodeError.__init__`` does, for a class with a second contract base.

    Both bases have their own ``__init__`` signature: the shared root is
    initialised directly so neither is called with the other's arguments.
    """
    error.what = what
    error.reason = reason
    ContractError.__init__(error, f"cannot decode {what}: {reason}")


class FramingError(DecodeError):
    """The bytes are not an Avro single-object encoding frame."""

    kind = "framing"


class UnknownFingerprintError(DecodeError, UnsupportedSchemaError):
    """A schema fingerprint this build cannot read for this topic.

    Attributes:
        what: which value was decoded (``"event"``, ``"command"`` …).
        fingerprint: the frame's CRC-64-AVRO fingerprint, as hex.
    """

    kind = "unsupported_schema"

    def __init__(self, what: str, fingerprint: str) -> None:
        self.fingerprint = fingerprint
        self.detail = f"unknown schema fingerprint {fingerprint}"
        _decode_error(self, what, self.detail)


class UnknownRecordTypeError(DecodeError, UnknownEventTypeError):
    """A union branch (event or command type) this build has no class for."""

    kind = "unknown_event_type"

    def __init__(self, what: str, type_name: str) -> None:
        self.type_name = type_name
        _decode_error(self, what, f"unknown type {type_name!r}")


class InvalidRecordError(DecodeError, InvalidEventError):
    """A decoded event breaks its coordinate profile or a body rule."""

    kind = "invalid_event"

    def __init__(self, what: str, event: str, field: str, rule: str) -> None:
        self.event = event
        self.field = field
        self.rule = rule
        _decode_error(self, what, f"event {event}: {field} {rule}")


class EncodeError(ContractError):
    """A value could not be encoded with the current schema.

    Attributes:
        what: which value was encoded.
        reason: a short, data-free reason (``"naive datetime in created_at"``).
    """

    kind = "encode"

    def __init__(self, what: str, reason: str) -> None:
        self.what = what
        self.reason = reason
        super().__init__(f"cannot encode {what}: {reason}")


class RecordTooLargeError(EncodeError):
    """An encoded value is larger than the codec's payload limit."""

    kind = "record_too_large"

    def __init__(self, what: str, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(what, f"{size} bytes exceeds the limit of {limit} bytes")


class NotEphemeralError(ContractError):
    """An enduring event was given to the ephemeral (deltas) codec."""

    kind = "not_ephemeral"

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name
        super().__init__(f"event {type_name} is enduring; it belongs to the journal")
