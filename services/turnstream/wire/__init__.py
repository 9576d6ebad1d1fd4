"""Avro wire format: schemas, framing and the codec for every topic.

The only package that imports fastavro. It must not import
:mod:`turnstream.runtime`, any Kafka client or faust; the Kafka adapters call
it, not the other way round.

Contents:

* :mod:`~turnstream.wire.schemas` -- :class:`SchemaSet`: loads ``schemas/``
  (current set plus ``history/<version>/``) once; fingerprint → schema.
* :mod:`~turnstream.wire.framing` -- Avro single-object encoding
  (``C3 01`` + 8-byte little-endian CRC-64-AVRO fingerprint + body).
* :mod:`~turnstream.wire.codec` -- :class:`Codec` and the module-level
  ``marshal_*``/``unmarshal_*`` functions and :func:`kafka_headers`.
* :mod:`~turnstream.wire.to_record` / :mod:`~turnstream.wire.from_record` --
  the explicit model ↔ Avro-record mappings (the generic path, with
  fastavro: the authority).
* :mod:`~turnstream.wire._accel` -- speed only: the generated Python
  writers and reader, the C extension (``_native.c``) and its plans, the
  compiled record writer and the loop-state writer that encodes each history
  message once (:class:`EncodedHistory`). Same bytes and values as the generic
  path; ``TURNSTREAM_CODEC=generic`` switches them off, :attr:`Codec.path`
  names the path a codec runs (``native``, ``generated`` or ``generic``).
* :mod:`~turnstream.wire.errors` -- the wire refinements of the error tree.
* :mod:`~turnstream.wire.compat` -- the schema-compatibility check
  (``python -m turnstream.wire.compat``).
* :mod:`~turnstream.wire.bundle` -- the generated per-topic schemas and
  fingerprint table in ``schemas/bundled/`` for other languages
  (``python -m turnstream.wire.bundle [--check]``).
* :mod:`~turnstream.wire.analytics_codec` -- the analytics snapshot contract
  (``schemas/analytics/``), built on the framing and errors above.
"""

from __future__ import annotations

from turnstream.wire._accel.native_plan import native_available
from turnstream.wire._accel.state_writer import EncodedHistory
from turnstream.wire._accel.switch import CODEC_ENV, CodecPath
from turnstream.wire.codec import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    Codec,
    default_codec,
    kafka_headers,
    marshal_command,
    marshal_ephemeral,
    marshal_event,
    marshal_state,
    set_default_codec,
    unmarshal_command,
    unmarshal_ephemeral,
    unmarshal_event,
    unmarshal_state,
)
from turnstream.wire.errors import (
    EncodeError,
    FramingError,
    InvalidRecordError,
    NotEphemeralError,
    RecordTooLargeError,
    UnknownFingerprintError,
    UnknownRecordTypeError,
)
from turnstream.wire.schemas import SchemaSet, Topic, TopicSchema

__all__ = [
    "CODEC_ENV",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "Codec",
    "CodecPath",
    "EncodeError",
    "EncodedHistory",
    "FramingError",
    "InvalidRecordError",
    "NotEphemeralError",
    "RecordTooLargeError",
    "SchemaSet",
    "Topic",
    "TopicSchema",
    "UnknownFingerprintError",
    "UnknownRecordTypeError",
    "default_codec",
    "kafka_headers",
    "marshal_command",
    "marshal_ephemeral",
    "marshal_event",
    "marshal_state",
    "native_available",
    "set_default_codec",
    "unmarshal_command",
    "unmarshal_ephemeral",
    "unmarshal_event",
    "unmarshal_state",
]
