"""Fuzzing every decoder: any byte string yields a value or a DecodeError.

Properties (hypothesis): random bytes; random bytes behind a valid frame
header (right marker, a fingerprint the decoder knows, so fastavro really
parses); random fingerprints; and mutations of the golden payloads (flips,
truncations, insertions, spliced huge varints). Only ``DecodeError`` (and its
subclasses) may escape, never another exception, and each example has a
deadline so a hang or a runaway allocation fails the test.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.unit.wire.golden import BUILDERS, decoder_for, encode

from turnstream.errors import DecodeError
from turnstream.wire import Codec, SchemaSet, Topic
from turnstream.wire.framing import MAGIC
from turnstream.wire.schemas import default_schema_dir

# One codec for the module: hypothesis forbids function-scoped fixtures in
# @given tests, and loading schemas per example would dominate the run.
CODEC = Codec(SchemaSet.load(default_schema_dir()))

DECODERS: dict[str, tuple[Topic, Callable[[bytes], Any]]] = {
    "event": (Topic.EVENTS, CODEC.unmarshal_event),
    "ephemeral": (Topic.DELTAS, CODEC.unmarshal_ephemeral),
    "command": (Topic.COMMANDS, CODEC.unmarshal_command),
    "state": (Topic.LOOPS, CODEC.unmarshal_state),
}
GOLDEN: list[tuple[bytes, Callable[[bytes], Any]]] = [
    (encode(CODEC, b()), decoder_for(CODEC, b())) for b in BUILDERS.values()
]
KNOWN_FINGERPRINTS = sorted(
    {fp for by_fp in CODEC.schemas.readable.values() for fp in by_fp}
)

FUZZ = settings(
    max_examples=300,
    deadline=timedelta(milliseconds=500),
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)


def _decode_or_decode_error(decode: Callable[[bytes], Any], data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        decode(data)


def _varint(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


decoder_names = st.sampled_from(sorted(DECODERS))


@pytest.mark.timeout(60)
@FUZZ
@given(which=decoder_names, data=st.binary(max_size=512))
def test_random_bytes_yield_only_decode_errors(which: str, data: bytes) -> None:
    _decode_or_decode_error(DECODERS[which][1], data)


@pytest.mark.timeout(60)
@FUZZ
@given(
    which=decoder_names,
    fingerprint=st.binary(min_size=8, max_size=8),
    body=st.binary(max_size=256),
)
def test_random_fingerprints_yield_only_decode_errors(
    which: str, fingerprint: bytes, body: bytes
) -> None:
    _decode_or_decode_error(DECODERS[which][1], MAGIC + fingerprint + body)


@pytest.mark.timeout(60)
@FUZZ
@given(
    which=decoder_names,
    fingerprint=st.sampled_from(KNOWN_FINGERPRINTS),
    body=st.binary(max_size=512),
)
def test_random_bodies_behind_a_known_fingerprint_yield_only_decode_errors(
    which: str, fingerprint: bytes, body: bytes
) -> None:
    """The frame passes, so fastavro parses the random body for real."""
    _decode_or_decode_error(DECODERS[which][1], MAGIC + fingerprint + body)


mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(1, 255)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.integers(0, 255)),
    st.tuples(st.just("delete"), st.integers(0, 10**6), st.integers(1, 16)),
    st.tuples(
        st.just("varint"), st.integers(0, 10**6), st.integers(-(2**63), 2**63 - 1)
    ),
)


def _mutate(data: bytes, op: str, where: int, arg: int) -> bytes:
    at = where % (len(data) + 1)
    if op == "flip" and at < len(data):
        return data[:at] + bytes([data[at] ^ arg]) + data[at + 1 :]
    if op == "truncate":
        return data[:at]
    if op == "insert":
        return data[:at] + bytes([arg]) + data[at:]
    if op == "delete":
        return data[:at] + data[at + arg :]
    if op == "varint":
        # Overwrite what is there with a (possibly huge) length or count.
        encoded = _varint(arg)
        return data[:at] + encoded + data[at + len(encoded) :]
    return data


@pytest.mark.timeout(60)
@FUZZ
@given(
    index=st.integers(0, len(GOLDEN) - 1),
    mutations=st.lists(mutation, min_size=1, max_size=4),
    cross=st.booleans(),
)
def test_mutated_golden_payloads_yield_values_or_decode_errors(
    index: int, mutations: list[tuple[str, int, int]], cross: bool
) -> None:
    """Mutated real payloads, fed to their own decoder or to every decoder."""
    data, own = GOLDEN[index]
    for op, where, arg in mutations:
        data = _mutate(data, op, where, arg)
    decoders = [d for _, d in DECODERS.values()] if cross else [own]
    for decode in decoders:
        _decode_or_decode_error(decode, data)


@pytest.mark.timeout(60)
@FUZZ
@given(
    which=decoder_names,
    claim=st.integers(-(2**63), 2**63 - 1),
    prefix=st.binary(max_size=40),
    tail=st.binary(max_size=8),
)
def test_huge_declared_lengths_never_hang(
    which: str, claim: int, prefix: bytes, tail: bytes
) -> None:
    """A valid frame whose body declares an enormous string, bytes or array."""
    topic, decode = DECODERS[which]
    fingerprint = CODEC.schemas.writer_schema(topic).fingerprint
    _decode_or_decode_error(
        decode, MAGIC + fingerprint + prefix + _varint(claim) + tail
    )
