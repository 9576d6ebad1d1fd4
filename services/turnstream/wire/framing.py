"""Avro single-object encoding: the frame around every value on our topics.

Owns the 10-byte header ``C3 01`` + 8-byte little-endian CRC-64-AVRO
fingerprint that precedes the schemaless Avro body. No registry is needed:
readers map the fingerprint to a schema from the repository's ``schemas/``.
Pure: imports only :mod:`turnstream.wire.errors`; never fastavro.
"""

from __future__ import annotations

from typing import Final

from turnstream.wire.errors import FramingError

__all__ = ["FINGERPRINT_SIZE", "HEADER_SIZE", "MAGIC", "frame", "read_fingerprint"]

MAGIC: Final = b"\xc3\x01"
"""The single-object encoding marker (format version 1)."""

FINGERPRINT_SIZE: Final = 8
HEADER_SIZE: Final = len(MAGIC) + FINGERPRINT_SIZE


def frame(fingerprint: bytes, body: bytes) -> bytes:
    """Prefix ``body`` with the marker and the writer schema's fingerprint."""
    if len(fingerprint) != FINGERPRINT_SIZE:
        raise ValueError("a CRC-64-AVRO fingerprint is 8 bytes")
    return MAGIC + fingerprint + body


def read_fingerprint(data: bytes, what: str) -> bytes:
    """Check the frame header of ``data`` and return its fingerprint.

    The body starts at :data:`HEADER_SIZE`; callers read it in place, so a
    large payload is never copied.

    Raises:
        FramingError: ``data`` is shorter than the header or lacks the marker.
    """
    if len(data) < HEADER_SIZE:
        raise FramingError(what, f"{len(data)} bytes is shorter than the header")
    if data[: len(MAGIC)] != MAGIC:
        raise FramingError(what, "missing the single-object marker C3 01")
    return bytes(data[len(MAGIC) : HEADER_SIZE])
