"""What every partition runner of the loop-actor service shares.

Owns :class:`RunnerContext` and the callables it carries (:data:`SetupFor`,
:data:`Spawn`), in a module of their own so that the runner's parts
(:mod:`~turnstream.kafka.actor.live_loops`) read them without importing the
runner, which re-exports them. Part of ``turnstream.kafka``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from turnstream.ids import LoopId
from turnstream.kafka.actor.deltas import DeltaPublisher
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.actor.writer_settings import WriterSettings
from turnstream.kafka.clients import KafkaClients
from turnstream.kafka.topology import TopicNames
from turnstream.runtime.hooks import Tracer
from turnstream.runtime.ports import Clock, IdSource
from turnstream.runtime.session import LoopSetup
from turnstream.runtime.tracing import TraceContexts
from turnstream.wire import Codec

__all__ = ["RunnerContext", "SetupFor", "Spawn"]

SetupFor = Callable[[LoopId, str], LoopSetup]
"""What a loop runs with, by the agent it is bound to or asks for (``""``: the
service's single agent); given by the composition root (an
:class:`~turnstream.runtime.agent.AgentHost`'s ``setup_for``)."""

Spawn = Callable[[Coroutine[Any, Any, None], str], asyncio.Task[None]]
"""Starts a task in the service's task group."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunnerContext:
    """What every partition runner of a service shares.

    Attributes:
        clients: builds producers and consumers.
        topics: the topic set.
        group_id: the consumer group.
        txn_prefix: prefix of the transactional ids.
        codec: encodes and decodes records.
        hub: the live (deltas) hub for the actors.
        setup_for: the loop configuration and model for a loop id.
        clock: stamps events.
        ids: mints ids.
        metrics: the service's counters.
        writer: the writers' settings.
        stop_timeout: seconds a handover may take per loop.
        spawn: starts tasks in the service's task group.
        partitions: the commands topic's partition count (a command on any
            other partition than its key's is dead-lettered).
        resident_budget: how many loops this runner keeps live (actor and
            decoded state) before it passivates the least recently used.
        traces: the trace context submits carried, for the turns and their
            event records (``None``: no trace headers are read or written).
        tracer: records the loops' spans (``None``: tracing off).
    """

    clients: KafkaClients
    topics: TopicNames
    group_id: str
    txn_prefix: str
    codec: Codec
    hub: DeltaPublisher
    setup_for: SetupFor
    clock: Clock
    ids: IdSource
    metrics: ServiceMetrics
    writer: WriterSettings
    stop_timeout: float
    spawn: Spawn
    partitions: int
    resident_budget: Callable[[], int] = lambda: 1 << 62
    traces: TraceContexts | None = None
    tracer: Tracer | None = None
