"""In-process adapters for the runtime's ports: no broker, production grade.

Contents:

- :class:`InMemoryJournal` -- the durable port, per process;
- :class:`InMemoryHub` -- live fan-out to subscriptions;
- :func:`embedded_session` -- a :class:`~turnstream.runtime.LocalSession` over
  both.

Imports the runtime and value types; never Kafka, Avro or test fakes.
"""

from typing import TYPE_CHECKING

from turnstream.memory.embedded import embedded_session
from turnstream.memory.hub import InMemoryHub
from turnstream.memory.journal import IdempotencyCollisionError, InMemoryJournal

__all__ = [
    "IdempotencyCollisionError",
    "InMemoryHub",
    "InMemoryJournal",
    "embedded_session",
]


if TYPE_CHECKING:  # the adapters implement the runtime's ports (checked by mypy)
    from turnstream.runtime.ports import Journal, SubscribableHub

    def _journal(journal: InMemoryJournal) -> Journal:
        return journal

    def _hub(hub: InMemoryHub) -> SubscribableHub:
        return hub
