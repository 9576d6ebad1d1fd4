"""turnstream: a Kafka-native runtime for LLM agent turns.

The house, by layer (import-linter in ``make check`` keeps the order: a module
imports only from its own layer's package or the layers below):

- leaves and value types -- ``ids``, ``errors``, ``content``, ``events``,
  ``commands``, ``state``, ``validation``: pydantic models and typed errors;
- ``runtime/`` -- the loop actor, turns, steps, tools, hooks, gates, restore and
  the embedded ``LocalSession``; pure asyncio against ports; ``wire/`` -- the
  Avro codec (the only fastavro importer); the two never import each other;
- adapters -- ``memory/`` (in-process journal and hub), ``kafka/`` (the only
  aiokafka importer, by role: ``kafka/client`` for applications,
  ``kafka/actor`` for the loop-actor service, ``kafka/admin`` for brokers and
  topics), ``models/`` (model clients), ``testing/`` (fakes), ``devbroker/``
  (the local broker), ``observability/`` (logs, metrics export);
- composition roots -- ``loop_actor/`` (the service's settings and wiring),
  ``analytics/`` (faust processors, the only faust importer) and ``cli/`` (the
  ``turnstream`` command: the one entry point of every deployable).

An application that talks to loops over Kafka needs ``turnstream.kafka.client``
(``KafkaSession``) and the value types; an embedded one needs
``turnstream.runtime.LocalSession``.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("turnstream")
except PackageNotFoundError:  # a bare source tree on sys.path, never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
