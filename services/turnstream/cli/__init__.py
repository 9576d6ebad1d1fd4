"""The ``turnstream`` command line (typer + rich).

A table of contents: ``main`` builds the typer app and registers one module per
command group (``broker``, ``topics``, ``smoke``, ...); ``_common`` holds the shared
consoles, error-to-exit-code mapping and the composition of the development broker
with its Kafka readiness probe.

This is a composition root: it reads flags and the environment once and passes narrow
typed settings down. It must not import aiokafka (it calls ``turnstream.kafka``).
"""

__all__: list[str] = []
