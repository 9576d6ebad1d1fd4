"""The codec: values to framed Avro bytes and back, for every topic.

Owns :class:`Codec` (a schema set plus a payload limit), the process default
codec, the module-level ``marshal_*``/``unmarshal_*`` functions and
:func:`kafka_headers`. It is the only module that calls fastavro's reader and
writer for the turn topics (the analytics snapshots have their own codec,
:mod:`turnstream.wire.analytics_codec`), and the only place here ``Any`` appears
(fastavro's decoded value, narrowed at once to a record). Imports value
types, :mod:`turnstream.validation` and fastavro; never the runtime or
aiokafka.

Contract:

* ``marshal_event`` writes *enduring* events only (the journal,
  ``turnstream.events.v1``): an ephemeral event raises
  :class:`~turnstream.errors.EphemeralNotPersistableError`, and
  :func:`~turnstream.validation.validate_event` runs first, so a record that
  could not be restored is never written.
* ``unmarshal_event`` validates after decoding; ``unmarshal_ephemeral`` does
  not (live-only events carry no event id).
* Every decoder is fail-closed: for *any* input it returns a valid value or
  raises a :class:`~turnstream.errors.DecodeError` (oversize input is refused
  before decoding; trailing bytes after the body are rejected). Decoding time
  is linear in the payload size (see ``schemas._check_bounded``).
* Three paths, one result (:attr:`Codec.path` names the one a codec runs):
  events go through the native plans first where the extension is built
  (``native``: :mod:`~turnstream.wire._accel.native_plan`;
  ``unmarshal_event``'s and ``marshal_event``'s id checks are part of the
  plan), then :class:`~turnstream.wire._accel.fast_path.FastPath`
  (``generated`` writers and reader); all three give the same bytes and
  values, and what the first two decline takes the ``generic`` path here
  (``to_record``/``from_record`` and fastavro), which alone raises the errors
  above. ``TURNSTREAM_CODEC=generic`` (:mod:`~turnstream.wire._accel.switch`)
  runs the generic path alone, for every topic.

One module on purpose (~620 lines): the Codec facade over framing, schemas, the
fast paths and the record mappings, plus its module-level shortcuts.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any, Final, TypeGuard, TypeVar

from fastavro import schemaless_reader, schemaless_writer
from pydantic import ValidationError

from turnstream.commands import AnyCommand, CommandBase
from turnstream.errors import (
    DecodeError,
    EphemeralNotPersistableError,
    InvalidEventError,
    PayloadTooLargeError,
    UnknownEventTypeError,
)
from turnstream.events import (
    ENDURING_EVENT_TYPES,
    EPHEMERAL_EVENT_TYPES,
    AnyEvent,
    EnduringEvent,
    EphemeralEvent,
    EventBase,
)
from turnstream.state import LoopState
from turnstream.validation import validate_event
from turnstream.wire import from_record, to_record
from turnstream.wire._accel import native_plan
from turnstream.wire._accel.compiled import Writer, compile_schema
from turnstream.wire._accel.fast_path import FastPath
from turnstream.wire._accel.state_writer import EncodedHistory, StateWriter
from turnstream.wire._accel.switch import CodecChoice, CodecPath, codec_choice
from turnstream.wire.errors import (
    EncodeError,
    InvalidRecordError,
    NotEphemeralError,
    RecordTooLargeError,
    UnknownFingerprintError,
    UnknownRecordTypeError,
)
from turnstream.wire.framing import HEADER_SIZE, frame, read_fingerprint
from turnstream.wire.process_default import ProcessDefault
from turnstream.wire.schemas import SchemaSet, Topic, TopicSchema

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "Codec",
    "default_codec",
    "kafka_headers",
    "marshal_command",
    "marshal_ephemeral",
    "marshal_event",
    "marshal_state",
    "set_default_codec",
    "unmarshal_command",
    "unmarshal_ephemeral",
    "unmarshal_event",
    "unmarshal_state",
]

DEFAULT_MAX_PAYLOAD_BYTES: Final = 8 * 1024 * 1024
"""Largest frame (header included) a codec writes or reads: 8 MiB."""

HEADER_TYPE: Final = "ts-type"
HEADER_SCHEMA: Final = "ts-schema"

_ENDURING_CLASSES: Final = frozenset(ENDURING_EVENT_TYPES)
_EPHEMERAL_CLASSES: Final = frozenset(EPHEMERAL_EVENT_TYPES)
_ENDURING_NAMES: Final = frozenset(t.__name__ for t in ENDURING_EVENT_TYPES)
_EPHEMERAL_NAMES: Final = frozenset(t.__name__ for t in EPHEMERAL_EVENT_TYPES)

_FAST_CLASSES: Final = {
    Topic.EVENTS: _ENDURING_CLASSES,
    Topic.DELTAS: _EPHEMERAL_CLASSES,
}
"""The event classes each event topic carries (what its fast path covers)."""

_T = TypeVar("_T")

_UNBUILT: Final = object()
"""A native reader not looked up yet (None means there is none)."""

# What a writer (compiled, or fastavro's) raises for a value Avro cannot carry
# (the mapping builds exactly the schema's fields): an int beyond a long, a
# lone surrogate.
_UNREPRESENTABLE = (ValueError, TypeError, OverflowError, UnicodeError, KeyError)


class Codec:
    """Framed Avro encoding of events, commands and loop state.

    Args:
        schemas: the loaded schema set (load once, share).
        max_payload_bytes: frames larger than this are refused on write and
            on read (before any decoding).
        native: use the native (C) fast path where it is built (see
            :func:`turnstream.wire.native_available`); False runs the Python
            paths only. Same bytes and values either way.
        paths: the paths it may run (``auto``, ``generated``, ``generic``);
            None reads ``TURNSTREAM_CODEC`` (see
            :mod:`~turnstream.wire._accel.switch`).

    Raises:
        ConfigError: ``TURNSTREAM_CODEC`` holds an unknown value.
    """

    def __init__(
        self,
        schemas: SchemaSet,
        *,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        native: bool = True,
        paths: CodecChoice | None = None,
    ) -> None:
        if max_payload_bytes < HEADER_SIZE:
            raise ValueError("max_payload_bytes must cover the frame header")
        self.schemas = schemas
        self.max_payload_bytes = max_payload_bytes
        choice = codec_choice() if paths is None else paths
        self.path: CodecPath = (
            "generic"
            if choice == "generic"
            else "native"
            if choice == "auto" and native and native_plan.native_available()
            else "generated"
        )
        """The path this codec runs: ``native`` (C plans, then the generated
        and generic paths behind them), ``generated`` (generated Python, then
        generic) or ``generic`` (``to_record``/``from_record`` and fastavro
        alone)."""
        self._accelerated = self.path != "generic"
        # One compiled writer per writer schema, built on first use.
        self._writers: dict[bytes, Writer] = {}
        # The generated writers and readers of the two event topics, built on
        # first use (see fast_path); the generic path covers what they do not.
        self._fast: dict[Topic, FastPath] = {}
        # In front of those, where the extension is built: the same mapping
        # in C (native), also built on first use.
        self._native: dict[Topic, native_plan.NativePath] = {}
        self._use_native = self.path == "native"
        # Their plans, looked up once (a call less per record).
        self._event_plans: dict[type, native_plan.Plan] | None = None
        self._delta_plans: dict[type, native_plan.Plan] | None = None
        self._event_reader: Any = _UNBUILT
        self._delta_reader: Any = _UNBUILT
        # The incremental LoopState writers, per writer schema (state_writer).
        self._state_writers: dict[bytes, StateWriter] = {}

    # ----------------------------------------------------------------- events

    def marshal_event(self, event: EventBase) -> bytes:
        """Encode an enduring event for the journal.

        Raises:
            UnknownEventTypeError: ``event`` is not one of the event classes.
            EphemeralNotPersistableError: ``event`` is live-only.
            InvalidEventError: ``event`` breaks its coordinate profile.
            EncodeError: a value the schema cannot carry (naive datetime,
                integer beyond a long, unencodable text, oversize record).
        """
        # The native plan checks the ids as validate_event does; whatever it
        # declines, the path below validates (raising the typed error) and writes.
        plans = self._event_plans
        if plans is None:
            plans = self._event_plans = self._native_path(Topic.EVENTS).writers
        plan = plans.get(type(event))
        if plan is not None:
            data = native_plan.write(plan, event, self.max_payload_bytes)
            if data is not None:
                return data
        if not _is_enduring(event):
            if _is_ephemeral(event):
                raise EphemeralNotPersistableError(event.type_name)
            raise UnknownEventTypeError(type(event).__name__)
        validate_event(event)
        return self._write_event(Topic.EVENTS, "event", event)

    def unmarshal_event(self, data: bytes) -> EnduringEvent:
        """Decode and validate one journal record.

        Raises:
            DecodeError: for any input that is not a valid enduring event
                (subclasses name the cause; see :mod:`turnstream.wire.errors`).
        """
        reader = self._event_reader
        if reader is _UNBUILT:
            reader = self._event_reader = self._native_path(Topic.EVENTS).reader
        if reader is not None and len(data) <= self.max_payload_bytes:
            # The plan checks the frame's prefix, and the ids as validate_event does.
            found: EnduringEvent | None = native_plan.read(reader, data)
            if found is not None:
                return found
        fast = self._read_fast(Topic.EVENTS, data)
        event: EnduringEvent = (
            fast
            if _is_enduring(fast)
            else self._read(Topic.EVENTS, "event", data, _read_enduring)
        )
        try:
            validate_event(event)
        except InvalidEventError as exc:
            raise InvalidRecordError("event", exc.event, exc.field, exc.rule) from None
        return event

    def marshal_ephemeral(self, event: EventBase) -> bytes:
        """Encode a live-only event for the deltas topic (not validated).

        Raises:
            NotEphemeralError: ``event`` is enduring (it belongs to the journal).
            UnknownEventTypeError: ``event`` is not one of the event classes.
            EncodeError: a value the schema cannot carry.
        """
        plans = self._delta_plans
        if plans is None:
            plans = self._delta_plans = self._native_path(Topic.DELTAS).writers
        plan = plans.get(type(event))
        if plan is not None:
            data = native_plan.write(plan, event, self.max_payload_bytes)
            if data is not None:
                return data
        if not _is_ephemeral(event):
            if _is_enduring(event):
                raise NotEphemeralError(event.type_name)
            raise UnknownEventTypeError(type(event).__name__)
        return self._write_event(Topic.DELTAS, "ephemeral event", event)

    def unmarshal_ephemeral(self, data: bytes) -> EphemeralEvent:
        """Decode one deltas record (no event-id validation).

        Raises:
            DecodeError: for any input that is not a valid ephemeral event.
        """
        reader = self._delta_reader
        if reader is _UNBUILT:
            reader = self._delta_reader = self._native_path(Topic.DELTAS).reader
        if reader is not None and len(data) <= self.max_payload_bytes:
            live: EphemeralEvent | None = native_plan.read(reader, data)
            if live is not None:
                return live
        fast = self._read_fast(Topic.DELTAS, data)
        if _is_ephemeral(fast):
            return fast
        return self._read(Topic.DELTAS, "ephemeral event", data, _read_ephemeral)

    # ------------------------------------------------------ commands, state

    def marshal_command(self, command: AnyCommand) -> bytes:
        """Encode a command for the commands topic.

        Raises:
            EncodeError: a value the schema cannot carry.
        """
        if not isinstance(command, CommandBase):
            raise UnknownEventTypeError(type(command).__name__)
        return self._write(Topic.COMMANDS, "command", command)

    def unmarshal_command(self, data: bytes) -> AnyCommand:
        """Decode one command.

        Raises:
            DecodeError: for any input that is not a valid command.
        """
        return self._read(Topic.COMMANDS, "command", data, from_record.command_from)

    def marshal_state(
        self, state: LoopState, history: EncodedHistory | None = None
    ) -> bytes:
        """Encode a loop-state snapshot for the compacted loops topic.

        Args:
            state: the snapshot.
            history: the loop's memo of encoded history messages (see
                :mod:`turnstream.wire._accel.state_writer`): the same bytes, with
                only the messages new since the last snapshot encoded.

        Raises:
            EncodeError: a value the schema cannot carry.
        """
        if history is None or not self._accelerated:
            return self._write(Topic.LOOPS, "loop state", state)
        schema = self.schemas.writer_schema(Topic.LOOPS)
        writer = self._state_writers.get(schema.fingerprint)
        if writer is None:
            writer = StateWriter(
                schema.fingerprint, schema.parsed, native=self._use_native
            )
            self._state_writers[schema.fingerprint] = writer
        out = bytearray(frame(schema.fingerprint, b""))
        try:
            writer.write(out, state, history)
        except _UNREPRESENTABLE as exc:
            raise EncodeError(
                "loop state", f"value not representable ({type(exc).__name__})"
            ) from None
        return self._within_limit("loop state", bytes(out))

    def unmarshal_state(self, data: bytes) -> LoopState:
        """Decode one loop-state snapshot.

        Raises:
            DecodeError: for any input that is not a valid loop state.
        """
        return self._read(Topic.LOOPS, "loop state", data, from_record.loop_state_from)

    # ---------------------------------------------------------------- headers

    def kafka_headers(
        self, value: EventBase | AnyCommand | LoopState
    ) -> list[tuple[str, bytes]]:
        """Kafka record headers naming the value's type and schema fingerprint.

        ``ts-type`` is the event, command or ``LoopState`` type name;
        ``ts-schema`` the hex fingerprint of the schema it is written with, so
        a consumer can route or skip a record without decoding it.
        """
        if isinstance(value, EventBase):
            topic = Topic.EVENTS if value.is_enduring() else Topic.DELTAS
        elif isinstance(value, LoopState):
            topic = Topic.LOOPS
        else:
            topic = Topic.COMMANDS
        schema = self.schemas.writer_schema(topic)
        return [
            (HEADER_TYPE, type(value).__name__.encode("ascii")),
            (HEADER_SCHEMA, schema.fingerprint_hex.encode("ascii")),
        ]

    # ------------------------------------------------------------- internals

    def _fast_path(self, topic: Topic) -> FastPath:
        fast = self._fast.get(topic)
        if fast is None:
            fast = self._fast[topic] = FastPath(
                self.schemas.writer_schema(topic), _FAST_CLASSES[topic]
            )
        return fast

    def _native_path(self, topic: Topic) -> native_plan.NativePath:
        path = self._native.get(topic)
        if path is None:
            schema = self.schemas.writer_schema(topic)
            path = self._native[topic] = native_plan.NativePath(
                schema.parsed,
                frame(schema.fingerprint, b""),
                _FAST_CLASSES[topic] if self._use_native else frozenset(),
                validated=topic is Topic.EVENTS,
            )
        return path

    def _write_event(self, topic: Topic, what: str, event: AnyEvent) -> bytes:
        if not self._accelerated:
            return self._write(topic, what, event)
        data = self._fast_path(topic).write(event)
        if data is None:
            return self._write(topic, what, event)
        if len(data) > self.max_payload_bytes:
            raise RecordTooLargeError(what, len(data), self.max_payload_bytes)
        return data

    def _write(
        self, topic: Topic, what: str, value: AnyEvent | AnyCommand | LoopState
    ) -> bytes:
        schema = self.schemas.writer_schema(topic)
        record = _to_record(topic, value)
        out = bytearray(frame(schema.fingerprint, b""))
        try:
            if self._accelerated:
                self._compiled_writer(schema)(out, record)
            else:
                out += _fastavro_body(schema, record)
        except _UNREPRESENTABLE as exc:
            # The mapping builds exactly the schema's fields, so what is left
            # are values Avro cannot carry (e.g. an int beyond a long, a lone
            # surrogate). The cause is named by type only: its text may hold
            # user content.
            raise EncodeError(
                what, f"value not representable ({type(exc).__name__})"
            ) from None
        return self._within_limit(what, bytes(out))

    def _compiled_writer(self, schema: TopicSchema) -> Writer:
        writer = self._writers.get(schema.fingerprint)
        if writer is None:
            writer = self._writers[schema.fingerprint] = compile_schema(schema.parsed)
        return writer

    def _within_limit(self, what: str, data: bytes) -> bytes:
        if len(data) > self.max_payload_bytes:
            raise RecordTooLargeError(what, len(data), self.max_payload_bytes)
        return data

    def _read_fast(self, topic: Topic, data: bytes) -> EventBase | None:
        """The event on the fast path, or None: then the generic path decides.

        Oversize input is left to the generic path, which refuses it.
        """
        if not self._accelerated or len(data) > self.max_payload_bytes:
            return None
        return self._fast_path(topic).read(data)

    def _read(
        self,
        topic: Topic,
        what: str,
        data: bytes,
        build: Callable[[from_record.Record], _T],
    ) -> _T:
        if len(data) > self.max_payload_bytes:
            raise PayloadTooLargeError(what, len(data), self.max_payload_bytes)
        fingerprint = read_fingerprint(data, what)
        writer = self.schemas.reader_for(topic, fingerprint)
        if writer is None:
            raise UnknownFingerprintError(what, fingerprint.hex())
        record = _decode_body(what, data, writer, self.schemas.writer_schema(topic))
        try:
            return build(record)
        except ValidationError as exc:
            raise DecodeError(what, _describe(exc)) from None


def _fastavro_body(schema: TopicSchema, record: dict[str, object]) -> bytes:
    """The generic path's writer: fastavro's, union branches in tuple notation."""
    stream = io.BytesIO()
    schemaless_writer(stream, schema.parsed, record)
    return stream.getvalue()


def _decode_body(
    what: str, data: bytes, writer: TopicSchema, current: TopicSchema
) -> from_record.Record:
    stream = io.BytesIO(data)
    stream.seek(HEADER_SIZE)
    # Old data is resolved into the current schema (new fields get their
    # defaults); current data is read as written, without resolution.
    reader = None if writer.fingerprint == current.fingerprint else current.parsed
    try:
        decoded: Any = schemaless_reader(
            stream,
            writer.parsed,
            reader,
            return_record_name=True,
            return_record_name_override=True,
        )
    except Exception as exc:  # noqa: BLE001 - fail closed on any malformed body
        # fastavro raises EOFError, ValueError, IndexError, OverflowError,
        # UnicodeDecodeError, SchemaResolutionError … for malformed bodies;
        # all of them mean "not a valid record". The text is left out: it may
        # echo payload bytes.
        raise DecodeError(
            what, f"malformed body ({type(exc).__name__} at byte {stream.tell()})"
        ) from None
    if stream.tell() != len(data):
        raise DecodeError(
            what, f"{len(data) - stream.tell()} trailing bytes after the body"
        )
    if not isinstance(decoded, dict):
        raise DecodeError(what, "the body is not a record")
    record: from_record.Record = decoded
    return record


def _describe(exc: ValidationError) -> str:
    """A data-free summary of a validation failure: where and which rule."""
    errors = exc.errors(include_url=False, include_context=False, include_input=False)
    first = errors[0] if errors else None
    if first is None:
        return "value out of contract"
    where = ".".join([exc.title, *(str(p) for p in first["loc"])])
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"value out of contract at {where}: {first['type']}{more}"


def _is_enduring(value: object) -> TypeGuard[EnduringEvent]:
    # Exact classes only, as in validate_event: a subclass is not a known type.
    return type(value) in _ENDURING_CLASSES


def _is_ephemeral(value: object) -> TypeGuard[EphemeralEvent]:
    return type(value) in _EPHEMERAL_CLASSES


def _to_record(
    topic: Topic, value: AnyEvent | AnyCommand | LoopState
) -> dict[str, object]:
    if isinstance(value, LoopState):
        return to_record.loop_state_record(value)
    if isinstance(value, CommandBase):
        return to_record.command_record(value)
    return to_record.event_record(value)


def _read_enduring(record: from_record.Record) -> EnduringEvent:
    event = from_record.event_from(record, _ENDURING_NAMES)
    if not _is_enduring(event):  # unreachable: event_from checks the names
        raise UnknownRecordTypeError("event", event.type_name)
    return event


def _read_ephemeral(record: from_record.Record) -> EphemeralEvent:
    event = from_record.event_from(record, _EPHEMERAL_NAMES)
    if not _is_ephemeral(event):  # unreachable: event_from checks the names
        raise UnknownRecordTypeError("ephemeral event", event.type_name)
    return event


# --------------------------------------------------------------------------
# The process default codec and the module-level API
# --------------------------------------------------------------------------

_default: Final = ProcessDefault(lambda: Codec(SchemaSet.load()))


def set_default_codec(codec: Codec | None) -> None:
    """Install the codec the module-level functions use (``None`` resets it).

    Composition roots call this once at start-up with a codec built from the
    configured schema directory.
    """
    _default.install(codec)


def default_codec() -> Codec:
    """The installed codec, or one loaded from the checkout's ``schemas/``.

    Raises:
        ConfigError: the default schema directory cannot be loaded.
    """
    return _default.get()


def marshal_event(event: EventBase) -> bytes:
    """Encode an enduring event with the default codec (see :class:`Codec`)."""
    return default_codec().marshal_event(event)


def unmarshal_event(data: bytes) -> EnduringEvent:
    """Decode and validate a journal record with the default codec."""
    return default_codec().unmarshal_event(data)


def marshal_ephemeral(event: EventBase) -> bytes:
    """Encode a live-only event with the default codec."""
    return default_codec().marshal_ephemeral(event)


def unmarshal_ephemeral(data: bytes) -> EphemeralEvent:
    """Decode a deltas record with the default codec."""
    return default_codec().unmarshal_ephemeral(data)


def marshal_command(command: AnyCommand) -> bytes:
    """Encode a command with the default codec."""
    return default_codec().marshal_command(command)


def unmarshal_command(data: bytes) -> AnyCommand:
    """Decode a command with the default codec."""
    return default_codec().unmarshal_command(data)


def marshal_state(state: LoopState) -> bytes:
    """Encode a loop-state snapshot with the default codec."""
    return default_codec().marshal_state(state)


def unmarshal_state(data: bytes) -> LoopState:
    """Decode a loop-state snapshot with the default codec."""
    return default_codec().unmarshal_state(data)


def kafka_headers(value: EventBase | AnyCommand | LoopState) -> list[tuple[str, bytes]]:
    """Kafka record headers (``ts-type``, ``ts-schema``) for ``value``."""
    return default_codec().kafka_headers(value)
