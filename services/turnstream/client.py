"""The Python client of turnstream: everything an application that talks to loops needs.

``from turnstream.client import ...`` (or the same names from ``turnstream``)
gives one import surface; docs/client.md, "Use it from Python", walks through it.
A composition facade: it re-exports, defines only :func:`connect`, and sits
above the adapters it gathers (never imported by them).

Table of contents:

- **connect and send** -- :func:`connect` returns a :class:`KafkaSession`:
  ``submit`` (returns the command id once the broker has it), ``interrupt``,
  ``respond_gate``, ``retract``, ``stop_loop``; :class:`KafkaSecurity` for
  TLS/SASL, :class:`TopicNames` for a prefixed topic set;
- **submit and wait** -- ``session.submit_and_wait(...)`` returns a
  :class:`TurnOutcome` (:class:`TurnStatus`: done, failed, interrupted,
  rejected, cancelled); ``session.submit_turn(..., tokens=True)`` returns a
  :class:`Turn` to iterate (``TokenDelta`` chunks included) before its outcome;
  ``session.follow(command_id)`` does the same for an input sent earlier;
- **attach and resume** -- ``session.attach(loop_id, after=cursor)`` returns
  an :class:`Attachment`: the loop's journal events and deltas as
  :class:`Streamed` items, each with the :class:`Cursor` after it, replayed
  from the cursor and then live (a :class:`DeltasExpired` notice when tokens
  after it are gone); the cursor may come from any stream a session yields:
  an attachment's, ``turn.cursor`` or a subscription's;
- **watch and replay** -- ``session.subscribe_events(EventFilter(...))`` (live,
  :class:`LoopScope` per delivery class; a :class:`CursorSubscription`:
  ``subscription.cursor_for(loop_id)``) and ``session.replay(loop_id)``;
- **consume downstream** -- :class:`JournalConsumer` hands every loop's
  journal events to a handler as :class:`JournalRecord` (event, partition,
  offset), in a consumer group, at least once;
- **the events** -- the typed, frozen event models (``TurnStarted`` …
  ``TurnDone``; ``TokenDelta`` live only). Accessors: ``event.type_name`` is a
  property (the wire type name, also the ``type`` field); ``reply_to()`` (the
  command an answer replies to), ``ends_turn()`` and ``is_enduring()`` are
  methods; ``event.header`` carries ``event_id``, ``loop_id``, ``turn_id``;
- **the wire** -- :func:`default_codec`, :func:`marshal_event`,
  :func:`unmarshal_event` for records read or written by other tools;
- **errors** -- :class:`TurnstreamError` and the ones a client meets.
"""

from __future__ import annotations

from typing import Any

from turnstream.content import AIMessage, TextBlock, TextChunk, UserMessage, text_of
from turnstream.errors import (
    CommandNotConfirmedError,
    CommandTooLargeError,
    ConfigError,
    DecodeError,
    InvalidCursorError,
    SessionError,
    SubscriptionLossError,
    TransportError,
    TurnstreamError,
    UnknownCommandError,
)
from turnstream.events import (
    AnyEvent,
    EnduringEvent,
    InputCancelled,
    InputQueued,
    LoopIdle,
    LoopStarted,
    StepDone,
    TokenDelta,
    TurnDone,
    TurnFailed,
    TurnFoldedInto,
    TurnInterrupted,
    TurnRejected,
    TurnStarted,
)
from turnstream.ids import CommandId, LoopId, SessionId
from turnstream.kafka.client import (
    Attachment,
    Cursor,
    CursorSubscription,
    DeltasExpired,
    JournalConsumer,
    JournalRecord,
    KafkaSecurity,
    KafkaSession,
    Streamed,
    TopicNames,
    Turn,
    TurnOutcome,
    TurnStatus,
)
from turnstream.runtime.subscription import EventFilter, LoopScope
from turnstream.tracing import current_traceparent_source
from turnstream.wire import Codec, default_codec, marshal_event, unmarshal_event

__all__ = [
    "AIMessage",
    "AnyEvent",
    "Attachment",
    "Codec",
    "CommandId",
    "CommandNotConfirmedError",
    "CommandTooLargeError",
    "ConfigError",
    "Cursor",
    "CursorSubscription",
    "DecodeError",
    "DeltasExpired",
    "EnduringEvent",
    "EventFilter",
    "InputCancelled",
    "InputQueued",
    "InvalidCursorError",
    "JournalConsumer",
    "JournalRecord",
    "KafkaSecurity",
    "KafkaSession",
    "LoopId",
    "LoopIdle",
    "LoopScope",
    "LoopStarted",
    "SessionError",
    "SessionId",
    "StepDone",
    "Streamed",
    "SubscriptionLossError",
    "TextBlock",
    "TextChunk",
    "TokenDelta",
    "TopicNames",
    "TransportError",
    "Turn",
    "TurnDone",
    "TurnFailed",
    "TurnFoldedInto",
    "TurnInterrupted",
    "TurnOutcome",
    "TurnRejected",
    "TurnStarted",
    "TurnStatus",
    "TurnstreamError",
    "UnknownCommandError",
    "UserMessage",
    "connect",
    "default_codec",
    "marshal_event",
    "text_of",
    "unmarshal_event",
]


async def connect(
    bootstrap: str,
    *,
    topic_prefix: str = "",
    **options: Any,
) -> KafkaSession:
    """Connect a :class:`KafkaSession` to the brokers at ``bootstrap``.

    Args:
        bootstrap: ``host:port[,host:port…]``.
        topic_prefix: the prefix of the topic set (``TopicNames.with_affixes``);
            ignored when ``topics=`` is passed.
        options: as :meth:`KafkaSession.connect` (``security``, ``topics``,
            ``loop_id``, ``session_id``, ``request_timeout``, ``capacity`` …).

    Raises:
        ConfigError: bad settings, or the topics do not exist.
        TransportError: Kafka could not be reached in time.
    """
    if "topics" not in options and topic_prefix:
        options["topics"] = TopicNames.with_affixes(prefix=topic_prefix)
    if "trace_source" not in options:
        # Each submit joins the caller's current span, when OpenTelemetry is
        # installed and there is one.
        options["trace_source"] = current_traceparent_source()
    return await KafkaSession.connect(bootstrap, **options)
