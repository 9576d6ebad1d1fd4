"""What the loop-actor service's parts share about its group membership.

Owns :class:`Membership`: the service's commands consumer, its generation
(bumped by every rebalance and every consumer restart, so work started for an
older assignment can tell it is stale), whether the service is stopping and
what makes it stop (``fatal``), and the task group every task of the service
runs in. The service, its consumer loop
(:mod:`~turnstream.kafka.actor.consumer_loop`) and its partitions
(:mod:`~turnstream.kafka.actor.partitions`) hold the same instance; the
consumer-loop task and aiokafka's rebalance callbacks (which block that task
while they run) change it, so no lock guards it.

Part of ``turnstream.kafka``; imports no other part of the service.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Final

from turnstream.errors import TransportError
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.actor.settings import ServiceSettings
from turnstream.kafka.clients import KafkaClients

__all__ = ["SERVICE_LOG", "Membership"]

SERVICE_LOG: Final = "turnstream.kafka.actor.service"
"""The logger every part of the service logs through: operators (and their
filters) see one service, whichever module a line comes from."""


@dataclass(slots=True, kw_only=True, eq=False)
class Membership:
    """The consumer-group state the service's parts share.

    Attributes:
        settings: group, topics and timing.
        clients: builds every Kafka client.
        metrics: the service's counters.
        stop: set when shutdown is requested.
        assignment_done: clear from a revoke until the assignment that follows
            has been handled.
        consumer: the commands consumer (``None``: not started, or restarting).
        generation: bumped by each rebalance and consumer restart.
        waiting_since: when the current group join started (``None``: joined).
        stopping: the service stops: nothing is opened or rebuilt any more.
        fatal: what the service stops with (``None``: nothing so far).
        group: the task group of a running service.
    """

    settings: ServiceSettings
    clients: KafkaClients
    metrics: ServiceMetrics
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    assignment_done: asyncio.Event = field(default_factory=asyncio.Event)
    consumer: Any = None
    generation: int = 0
    waiting_since: float | None = None
    stopping: bool = False
    fatal: BaseException | None = None
    group: asyncio.TaskGroup | None = None

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Start ``coro`` in the service's task group."""
        if self.group is None:
            coro.close()
            raise TransportError(
                "start task", "the service is not running", retriable=False
            )
        return self.group.create_task(coro, name=name)
