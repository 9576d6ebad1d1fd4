"""turnstream: a Kafka-native runtime for LLM agent turns.

The house, by layer (import-linter in ``make check`` keeps the order: a module
imports only from its own layer's package or the layers below):

- leaves and value types -- ``ids``, ``errors``, ``content``, ``events``,
  ``commands``, ``state``, ``validation``: pydantic models and typed errors;
- ``runtime/`` -- the loop actor, turns, steps, tools, hooks, gates, restore and
  the embedded ``LocalSession``; pure asyncio against ports; ``wire/`` -- the
  Avro codec (the only fastavro importer; its speed-only paths apart in
  ``wire/_accel/``); the two never import each other;
- adapters -- ``memory/`` (in-process journal and hub), ``kafka/`` (the only
  aiokafka importer, by role: ``kafka/client`` for applications,
  ``kafka/actor`` for the loop-actor service, ``kafka/admin`` for brokers and
  topics), ``models/`` (model clients), ``testing/`` (fakes), ``devbroker/``
  (the local broker), ``observability/`` (logs, metrics export), ``mcp/`` (MCP
  servers' tools for agents, the only importer of the optional ``mcp`` SDK);
- composition roots -- ``loop_actor/`` (the service's settings and wiring),
  ``analytics/`` (faust processors, the only faust importer) and ``cli/`` (the
  ``turnstream`` command: the one entry point of every deployable).

An application that talks to loops over Kafka imports from here (or from
``turnstream.client``, the same names): :func:`connect` → :class:`KafkaSession`
(``submit``, ``submit_and_wait``, ``submit_turn``, ``subscribe_events``,
``replay``), :class:`JournalConsumer` for downstream services, the typed events
and :func:`unmarshal_event`; see ``turnstream.client`` for the table of
contents and docs/client.md, "Use it from Python". An embedded application needs
``turnstream.runtime.LocalSession``. ``__version__`` is the installed version.

The client names load on first use (PEP 562), so importing a leaf such as
``turnstream.events`` does not pull in Kafka.
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from turnstream.client import (
        AnyEvent,
        CommandId,
        CommandNotConfirmedError,
        CommandTooLargeError,
        Cursor,
        DeltasExpired,
        EnduringEvent,
        EventFilter,
        JournalConsumer,
        JournalRecord,
        KafkaSecurity,
        KafkaSession,
        LoopId,
        LoopScope,
        StepDone,
        Streamed,
        TextChunk,
        TokenDelta,
        TopicNames,
        Turn,
        TurnDone,
        TurnOutcome,
        TurnStatus,
        TurnstreamError,
        connect,
        unmarshal_event,
    )

try:
    __version__ = version("turnstream")
except PackageNotFoundError:  # a bare source tree on sys.path, never installed
    __version__ = "0+unknown"

__all__ = [
    "AnyEvent",
    "CommandId",
    "CommandNotConfirmedError",
    "CommandTooLargeError",
    "Cursor",
    "DeltasExpired",
    "EnduringEvent",
    "EventFilter",
    "JournalConsumer",
    "JournalRecord",
    "KafkaSecurity",
    "KafkaSession",
    "LoopId",
    "LoopScope",
    "StepDone",
    "Streamed",
    "TextChunk",
    "TokenDelta",
    "TopicNames",
    "Turn",
    "TurnDone",
    "TurnOutcome",
    "TurnStatus",
    "TurnstreamError",
    "__version__",
    "connect",
    "unmarshal_event",
]


_CLIENT_NAMES = frozenset(__all__) - {"__version__"}


def __getattr__(name: str) -> Any:
    if name in _CLIENT_NAMES:
        return getattr(import_module("turnstream.client"), name)
    raise AttributeError(f"module 'turnstream' has no attribute {name!r}")
