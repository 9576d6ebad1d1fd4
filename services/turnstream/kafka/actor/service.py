"""The loop-actor service: a consumer group member that runs loops on Kafka.

Owns :class:`LoopActorService` (and re-exports :class:`ServiceSettings`). The service
consumes ``turnstream.commands.v1`` in a consumer group (auto-commit off,
``read_committed``) and, per assigned partition, runs a
:class:`~turnstream.kafka.actor.runner.PartitionRunner` (one transactional producer
with a stable id, the journal, the loop actors). Offsets are committed only
inside those transactions.

Tasks (all in the service's ``TaskGroup``): the consumer loop (the only task
that calls ``getmany``, ``seek`` and ``committed``), the deltas sender, the lag
and health watchers, every partition writer and every loop actor. The
rebalance listener runs inside aiokafka's coordinator task and blocks
``getmany`` while it runs, so it never waits on anything the consumer loop
holds.

Ownership changes harm only what moves. The group uses the sticky assignor
(:mod:`~turnstream.kafka.actor.assignment`), so a rebalance moves as few
partitions as the balance allows. aiokafka's protocol is eager -- every
rebalance revokes every partition -- so on revoke the service keeps its
runners going (turns run and commit; no records arrive) and decides on the
assignment that follows: a partition assigned again carries on where its
runner stopped taking records, without a restore; one that went elsewhere is
handed over in the background (its running turns end ``TurnInterrupted``
unless the new owner's fence comes first, in which case the new owner's restore
writes that terminal; a continuing agent's turn is left open and the new owner
resumes it); a new one is opened (fence, restore) before the callback
returns, so no command is dispatched to an unrestored loop. If the consumer
came back with a new member id it may have been out of the group meanwhile, so
nothing it held is trusted: every partition is rebuilt.

The service never exits because Kafka or the group is slow: the consumer is
started without waiting for an assignment and restarted with backoff while the
broker is unreachable; the health watcher logs an outage and the recovery once
each and exposes them as metrics.

A writer that finally fails a commit (or cannot tell whether one committed)
gets its partition rebuilt from Kafka by the consumer loop (loops stopped
without writing, state re-read, consumer rewound to the committed offset). A
fenced writer's partition is abandoned until the group reassigns it.

Shutdown is ordered: drain (new inputs stay in the log for the next owner,
running turns finish, up to ``drain_timeout``; a continuing agent's turn only
finishes its current step, whose ``StepDone`` commits, and stays open), hand
every partition over (what still runs is interrupted, or, for a continuing
agent, left open without its uncommitted step), leave the group (a static
member leaves only with ``leave_on_stop``: otherwise its replacement takes its
partitions back without a rebalance), stop the deltas producer. Part of
``turnstream.kafka``; the composition root (:mod:`turnstream.loop_actor`)
builds it. It must not read the environment or install signal handlers (the
composition root's job), and never imports the composition root.

The service's parts, each in a module of its own, share one
:class:`~turnstream.kafka.actor.membership.Membership`: the consumer loop
(:mod:`~turnstream.kafka.actor.consumer_loop`: join, fetch, dispatch, the
rebalance bridge), the owned partitions
(:mod:`~turnstream.kafka.actor.partitions`: rebalance callbacks, takeover,
handover, rebuild, readiness) and the watchers
(:mod:`~turnstream.kafka.actor.watchers`). This module keeps the lifecycle:
start, the drain and the ordered stop.
"""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType
from typing import Self

from turnstream.errors import TurnstreamError
from turnstream.kafka.actor.consumer_loop import ConsumerLoop
from turnstream.kafka.actor.deltas import DeltaPublisher
from turnstream.kafka.actor.group_leave import leave_group
from turnstream.kafka.actor.membership import Membership
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.actor.partitions import OwnedPartitions
from turnstream.kafka.actor.runner import PartitionRunner, SetupFor
from turnstream.kafka.actor.settings import ServiceSettings
from turnstream.kafka.actor.watchers import watch_health, watch_lag
from turnstream.kafka.clients import KafkaClients, stop_client
from turnstream.kafka.topology import check_copartitioned
from turnstream.runtime.hooks import Tracer
from turnstream.runtime.ports import Clock, IdSource, RandomIds, SystemClock
from turnstream.runtime.tracing import TraceContexts
from turnstream.wire import Codec

__all__ = ["LoopActorService", "ServiceSettings"]

_log = logging.getLogger(__name__)


class LoopActorService:
    """Runs loop actors for the commands partitions this process is assigned.

    Use :meth:`run` (returns after shutdown) with :meth:`request_shutdown`, or
    ``async with`` (runs in the background, shuts down on exit).

    Args:
        clients: builds every Kafka client (one security configuration).
        settings: group, topics and timing.
        codec: encodes and decodes records.
        setup_for: the configuration and model a loop runs with.
        clock: stamps events.
        ids: mints ids.
        metrics: where counters go (a fresh object by default).
        traces: the trace context submits carry (a fresh store by default:
            a submit's ``traceparent`` reaches its turn's event records
            whether or not this process exports spans).
        tracer: records each turn's spans (``None``: tracing off).
    """

    def __init__(
        self,
        *,
        clients: KafkaClients,
        settings: ServiceSettings,
        codec: Codec,
        setup_for: SetupFor,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        metrics: ServiceMetrics | None = None,
        traces: TraceContexts | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        self._clients = clients
        self.settings = settings
        self._codec = codec
        self.metrics = metrics or ServiceMetrics()
        self.metrics.kafka_connects = clients.connect_stats
        self._m = Membership(settings=settings, clients=clients, metrics=self.metrics)
        self._partitions = OwnedPartitions(
            self._m,
            codec=codec,
            setup_for=setup_for,
            clock=clock or SystemClock(),
            ids=ids or RandomIds(),
            traces=traces or TraceContexts(),
            tracer=tracer,
        )
        self._consumer_loop = ConsumerLoop(self._m, self._partitions, done=self._done)
        self._hub: DeltaPublisher | None = None
        self._task: asyncio.Task[None] | None = None
        self._draining = False
        self._drain_deadline: float | None = None

    # ------------------------------------------------------------ lifecycle

    @property
    def ready(self) -> bool:
        """Joined the group and every assigned partition is restored."""
        return self.metrics.ready

    @property
    def _runners(self) -> dict[int, PartitionRunner]:
        """The current runner of each owned partition."""
        return self._partitions.runners

    def request_shutdown(self) -> None:
        """Ask :meth:`run` to stop (safe from a signal handler's callback)."""
        self._m.stop.set()

    async def shutdown(self) -> None:
        """Request shutdown and wait for :meth:`run` (when run by ``async with``)."""
        self.request_shutdown()
        if self._task is not None:
            await asyncio.wait([self._task])

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self.run(), name="loop-actor-service")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.shutdown()
        if self._task is not None and not self._task.cancelled():
            failure = self._task.exception()
            if failure is not None and exc is None:
                raise failure

    async def run(self) -> None:
        """Serve until shutdown is requested; then stop in order.

        Raises:
            ConfigError: the topics are missing or not co-partitioned.
            TransportError: Kafka failed in a way the service cannot survive
                (authorization, configuration; never mere slowness).
        """
        settings = self.settings
        m = self._m
        self._partitions.count = await check_copartitioned(
            self._clients, settings.topics
        )
        self._hub = DeltaPublisher(
            clients=self._clients,
            topic=settings.topics.deltas,
            codec=self._codec,
            metrics=self.metrics,
            capacity=settings.delta_capacity,
        )
        self._partitions.hub = self._hub
        await self._hub.start()
        try:
            async with asyncio.TaskGroup() as group:
                m.group = group
                watchers = [
                    group.create_task(self._hub.run(), name="deltas"),
                    group.create_task(watch_lag(m), name="lag"),
                    group.create_task(watch_health(m), name="health"),
                ]
                try:
                    if await self._join():
                        await self._consumer_loop.run()
                finally:
                    await self._stop_everything()
                    for task in watchers:
                        task.cancel()
        finally:
            m.group = None
            m.consumer = None
            self.metrics.ready = False
        if m.fatal is not None:
            raise m.fatal

    async def _join(self) -> bool:
        """Start the consumer and subscribe; ``False`` if stopped first."""
        return await self._consumer_loop.join()

    async def _stop_everything(self) -> None:
        """Stop fetching is done; drain, hand partitions over, leave the group."""
        m = self._m
        partitions = self._partitions
        m.stopping = True
        self.metrics.ready = False
        await partitions.wait_opening()
        # With Kafka unreachable nothing can be handed over: waiting for
        # commits that cannot happen would only hold the exit past the drain.
        offline = not self.metrics.kafka_reachable
        if offline:
            _log.warning(
                "stopping while Kafka is unreachable: partitions given up "
                "without writing (their next owner ends the turns they ran)",
                extra={"partitions": ",".join(map(str, sorted(partitions.runners)))},
            )
        seconds = min(self.settings.stop_timeout, 2.0) if offline else None
        await partitions.stop_runners(set(partitions.runners), offline=offline)
        await partitions.await_leaving()
        if m.consumer is not None:
            await stop_client(m.consumer, seconds=seconds or self.settings.stop_timeout)
            if not offline:
                await self._leave_for_good()
        # An assignment that raced the stop may have opened runners: stop them.
        await partitions.stop_runners(set(partitions.runners), offline=offline)
        await partitions.await_leaving()
        await self._consumer_loop.close_bridge(seconds or self.settings.stop_timeout)

    async def _leave_for_good(self) -> None:
        """A static member going away: leave, so its partitions move now."""
        instance = self.settings.group_instance_id
        if instance is None or not self.settings.leave_on_stop:
            return
        try:
            left = await leave_group(
                self._clients,
                group_id=self.settings.group_id,
                instance_id=instance,
                seconds=min(self.settings.stop_timeout, 5.0),
            )
        except TurnstreamError as exc:
            # The partitions still move, after the session timeout.
            _log.warning(
                "could not leave the group; partitions move after the session timeout",
                extra={"reason": str(exc)},
            )
            return
        if left:
            _log.info("left the group: partitions reassigned now")

    def _done(self) -> bool:
        """Whether the consumer loop ends (fatal error, or a finished drain).

        A planned stop keeps fetching (interrupts and gate answers for running
        turns still apply) until those turns are done or the drain times out.
        """
        if self._m.fatal is not None:
            return True
        if not self._m.stop.is_set():
            return False
        if not self._draining:
            self._draining = True
            self._drain_deadline = self._begin_drain()
        deadline = self._drain_deadline
        return deadline is None or self._drained(deadline)

    def _begin_drain(self) -> float | None:
        """Stop starting turns; the deadline for running ones (``None``: none run)."""
        self._m.stopping = True
        self.metrics.ready = False
        runners = [r for r in self._runners.values() if not r.broken]
        for runner in runners:
            runner.begin_drain()
        running = sum(r.running_turns for r in runners)
        if running == 0 or self.settings.drain_timeout <= 0:
            return None
        _log.info(
            "draining: waiting for running turns to finish",
            extra={"turns": running, "timeout_s": self.settings.drain_timeout},
        )
        return asyncio.get_running_loop().time() + self.settings.drain_timeout

    def _drained(self, deadline: float) -> bool:
        """Whether the drain is over (every turn ended, or time is up)."""
        running = sum(r.running_turns for r in self._runners.values())
        if running == 0:
            _log.info("drained: no turn running")
            return True
        if asyncio.get_running_loop().time() < deadline:
            return False
        self.metrics.drain_interrupted += running
        _log.warning(
            "drain timeout: handing over the turns still running "
            "(interrupted; a continuing agent's left open for the next owner)",
            extra={"turns": running},
        )
        return True
