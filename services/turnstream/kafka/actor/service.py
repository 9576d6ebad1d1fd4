"""The loop-actor service: a consumer group member that runs loops on Kafka.

Owns :class:`LoopActorService` and :class:`ServiceSettings`. The service
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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from aiokafka import ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError

from turnstream.errors import TransportError, TurnstreamError
from turnstream.kafka.actor.assignment import assignors
from turnstream.kafka.actor.deltas import DeltaPublisher
from turnstream.kafka.actor.group_leave import leave_group
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.actor.runner import PartitionRunner, RunnerContext, SetupFor
from turnstream.kafka.actor.writer import WriterSettings, WriterState
from turnstream.kafka.backoff import Backoff
from turnstream.kafka.clients import (
    KafkaClients,
    reachable,
    start_client,
    stop_client,
)
from turnstream.kafka.diagnose import authorization_error
from turnstream.kafka.errors import KafkaAuthorizationError
from turnstream.kafka.faults import Fault, classify, transport_error
from turnstream.kafka.topology import TopicNames, check_copartitioned
from turnstream.runtime.hooks import Tracer
from turnstream.runtime.ports import Clock, IdSource, RandomIds, SystemClock
from turnstream.runtime.tracing import TraceContexts
from turnstream.wire import Codec

__all__ = ["LoopActorService", "ServiceSettings"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceSettings:
    """How the service takes part in its consumer group.

    Attributes:
        group_id: the consumer group (also part of the transactional ids).
        topics: the topic set.
        txn_prefix: prefix of every transactional id.
        group_instance_id: a static member id (``None``: dynamic membership).
            A static member that restarts within the session timeout takes its
            partitions back with no rebalance; one that stops does not leave
            the group, so its partitions wait for it up to the session timeout
            (unless ``leave_on_stop``).
        leave_on_stop: a static member going away for good: once its
            partitions are handed over on a planned stop, it leaves the group,
            so the others take them at once instead of after the session
            timeout. Off for a restart in place (its replacement, with the same
            instance id, takes them back with no rebalance).
        session_timeout_ms: how long the group waits for a silent member
            before reassigning its partitions (the broker allows 6000 and up).
            With the restore, this bounds the takeover after a crash.
        heartbeat_interval_ms: heartbeat period; also how soon a member learns
            that a rebalance started.
        rebalance_timeout_ms: how long a rebalance waits for members to
            rejoin (they rejoin at once: revoking only pauses).
        max_poll_interval_ms: longest gap between fetches before leaving.
        poll_timeout_ms: how long one fetch waits for records.
        max_poll_records: records taken per fetch.
        writer: the partition writers' settings.
        stop_timeout: seconds one loop may take to stop on a handover.
        delta_capacity: ephemeral events buffered for the deltas producer (a
            full buffer makes streaming turns wait up to a second, then drop).
        lag_interval: seconds between consumer-lag updates.
        drain_timeout: on a planned stop, seconds running turns may take to
            finish before they are interrupted and the partitions handed over.
        health_interval: seconds between broker reachability checks.
        retry_backoff_max: longest wait between attempts to start the consumer
            or to take a failed partition over again (doubling with jitter).
        max_resident_loops: loops the process keeps live (actor and decoded
            state), shared evenly by its partitions; beyond that the least
            recently used idle loops are passivated (kept encoded, restored
            on their next command).
    """

    group_id: str = "turnstream-loop-actor"
    topics: TopicNames = field(default_factory=TopicNames)
    txn_prefix: str = "turnstream"
    group_instance_id: str | None = None
    leave_on_stop: bool = False
    session_timeout_ms: int = 8_000
    heartbeat_interval_ms: int = 1_000
    rebalance_timeout_ms: int = 10_000
    max_poll_interval_ms: int = 300_000
    poll_timeout_ms: int = 250
    max_poll_records: int = 200
    writer: WriterSettings = field(default_factory=WriterSettings)
    stop_timeout: float = 15.0
    delta_capacity: int = 8192
    lag_interval: float = 5.0
    drain_timeout: float = 30.0
    health_interval: float = 2.0
    retry_backoff_max: float = 5.0
    max_resident_loops: int = 10_000


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, service: LoopActorService) -> None:
        self._service = service

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._service._revoked(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self._service._assigned(assigned)


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
        self._traces = traces or TraceContexts()
        self._tracer = tracer
        self.settings = settings
        self._codec = codec
        self._setup_for = setup_for
        self._clock = clock or SystemClock()
        self._ids = ids or RandomIds()
        self.metrics = metrics or ServiceMetrics()
        self.metrics.kafka_connects = clients.connect_stats
        self._runners: dict[int, PartitionRunner] = {}
        self._partitions = 0
        self._to_reset: set[int] = set()
        self._generation = 0
        self._assignment_done = asyncio.Event()
        self._stop = asyncio.Event()
        self._stopping = False
        self._fatal: BaseException | None = None
        self._group: asyncio.TaskGroup | None = None
        self._consumer: Any = None
        self._hub: DeltaPublisher | None = None
        self._task: asyncio.Task[None] | None = None
        self._owned: dict[int, int] = {}
        self._member_id: str | None = None
        self._leaving: set[asyncio.Task[None]] = set()
        self._opening: dict[int, asyncio.Task[None]] = {}
        self._wanted: set[int] = set()
        self._bridge: Any = None
        self._waiting_since: float | None = None
        self._draining = False
        self._drain_deadline: float | None = None
        self._bridge_generation = -1
        # Partitions whose takeover failed: when each may be tried again.
        self._retries: dict[int, tuple[Backoff, float]] = {}

    # ------------------------------------------------------------ lifecycle

    @property
    def ready(self) -> bool:
        """Joined the group and every assigned partition is restored."""
        return self.metrics.ready

    def request_shutdown(self) -> None:
        """Ask :meth:`run` to stop (safe from a signal handler's callback)."""
        self._stop.set()

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
        self._partitions = await check_copartitioned(self._clients, settings.topics)
        self._hub = DeltaPublisher(
            clients=self._clients,
            topic=settings.topics.deltas,
            codec=self._codec,
            metrics=self.metrics,
            capacity=settings.delta_capacity,
        )
        await self._hub.start()
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                watchers = [
                    group.create_task(self._hub.run(), name="deltas"),
                    group.create_task(self._watch_lag(), name="lag"),
                    group.create_task(self._watch_health(), name="health"),
                ]
                try:
                    if await self._join():
                        await self._consume()
                finally:
                    await self._stop_everything()
                    for task in watchers:
                        task.cancel()
        finally:
            self._group = None
            self._consumer = None
            self.metrics.ready = False
        if self._fatal is not None:
            raise self._fatal

    def _new_consumer(self) -> Any:
        settings = self.settings
        request_ms = max(
            self._clients.connection.request_timeout_ms,
            settings.rebalance_timeout_ms + 5_000,
        )
        return self._clients.consumer(
            "actor",
            group_id=settings.group_id,
            group_instance_id=settings.group_instance_id,
            partition_assignment_strategy=assignors(),
            read_committed=True,
            auto_offset_reset="earliest",
            session_timeout_ms=settings.session_timeout_ms,
            heartbeat_interval_ms=settings.heartbeat_interval_ms,
            rebalance_timeout_ms=settings.rebalance_timeout_ms,
            max_poll_interval_ms=settings.max_poll_interval_ms,
            max_poll_records=settings.max_poll_records,
            request_timeout_ms=request_ms,
        )

    async def _join(self) -> bool:
        """Start the consumer and subscribe; ``False`` if stopped first.

        Subscribing after the start keeps ``start`` from waiting for the first
        assignment (the group may take long to settle); an unreachable broker
        is retried with backoff, never fatal.
        """
        backoff = Backoff(0.5, self.settings.retry_backoff_max)
        waiting = False
        while not self._stop.is_set():
            consumer = self._new_consumer()
            try:
                await start_client(
                    consumer,
                    seconds=self._clients.connection.connect_timeout,
                    operation="start commands consumer",
                    security=self._clients.security,
                )
            except TransportError as exc:
                if not exc.is_retriable:
                    raise
                if not waiting:
                    waiting = True
                    _log.warning(
                        "commands consumer cannot start yet; retrying",
                        extra={"exc_type": type(exc.__cause__).__name__},
                    )
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(backoff.next()):
                        await self._stop.wait()
                continue
            consumer.subscribe(
                [self.settings.topics.commands], listener=_Listener(self)
            )
            self._consumer = consumer
            self._waiting_since = asyncio.get_running_loop().time()
            if waiting:
                _log.info("commands consumer started")
            return True
        return False

    async def _stop_everything(self) -> None:
        """Stop fetching is done; drain, hand partitions over, leave the group."""
        self._stopping = True
        self.metrics.ready = False
        if self._opening:
            await asyncio.wait(list(self._opening.values()))
        # With Kafka unreachable nothing can be handed over: waiting for
        # commits that cannot happen would only hold the exit past the drain.
        offline = not self.metrics.kafka_reachable
        if offline:
            _log.warning(
                "stopping while Kafka is unreachable: partitions given up "
                "without writing (their next owner ends the turns they ran)",
                extra={"partitions": ",".join(map(str, sorted(self._runners)))},
            )
        seconds = min(self.settings.stop_timeout, 2.0) if offline else None
        await self._stop_runners(set(self._runners), offline=offline)
        await self._await_leaving()
        if self._consumer is not None:
            await stop_client(
                self._consumer, seconds=seconds or self.settings.stop_timeout
            )
            if not offline:
                await self._leave_for_good()
        # An assignment that raced the stop may have opened runners: stop them.
        await self._stop_runners(set(self._runners), offline=offline)
        await self._await_leaving()
        if self._bridge is not None:
            await stop_client(
                self._bridge, seconds=seconds or self.settings.stop_timeout
            )
            self._bridge = None

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
        if self._fatal is not None:
            return True
        if not self._stop.is_set():
            return False
        if not self._draining:
            self._draining = True
            self._drain_deadline = self._begin_drain()
        deadline = self._drain_deadline
        return deadline is None or self._drained(deadline)

    def _begin_drain(self) -> float | None:
        """Stop starting turns; the deadline for running ones (``None``: none run)."""
        self._stopping = True
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

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        if self._group is None:
            coro.close()
            raise TransportError(
                "start task", "the service is not running", retriable=False
            )
        return self._group.create_task(coro, name=name)

    # --------------------------------------------------------- the consumer

    async def _consume(self) -> None:
        consumer = self._consumer
        poll_ms = self.settings.poll_timeout_ms
        bound = poll_ms / 1000 + self._clients.connection.request_timeout
        while not self._done():
            if await self._join_stuck():
                consumer = self._consumer
                continue
            if not self._assignment_done.is_set() and self._runners:
                # The group is rebalancing: the group consumer returns nothing
                # until it is done, but the turns it left running must still get
                # their interrupts and gate answers in log order.
                await self._bridge_once()
                continue
            await self._apply_resets()
            try:
                async with asyncio.timeout(bound):
                    batch = await consumer.getmany(
                        timeout_ms=poll_ms, max_records=self.settings.max_poll_records
                    )
            except TimeoutError:
                continue
            except KafkaError as exc:
                if classify(exc) is not Fault.RETRIABLE:
                    denied = authorization_error(
                        exc,
                        security=self._clients.security,
                        operation="fetch commands",
                        permission="Read",
                        resource=self.settings.topics.commands,
                    )
                    if denied is not None:
                        _log.error(
                            "fetch denied by an ACL; stopping",
                            extra={"reason": str(denied)},
                        )
                    else:
                        _log.error(
                            "fetch failed and cannot be retried; stopping",
                            extra={"exc_type": type(exc).__name__},
                        )
                    self._fatal = denied or transport_error("fetch commands", exc)
                    return
                if self.metrics.kafka_reachable:
                    _log.warning("fetch failed", extra={"exc_type": type(exc).__name__})
                continue
            if not batch:
                continue
            # aiokafka returns only records of the assignment current when
            # getmany returns, but it may return them while our assignment
            # callback is still opening the partitions: wait for it. A rebalance
            # after that makes the batch stale (the new assignment refetches).
            generation = self._generation
            while not self._assignment_done.is_set() and not self._stop.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(poll_ms / 1000):
                        await self._assignment_done.wait()
            if self._assignment_done.is_set():
                await self._dispatch(batch, generation)

    async def _join_stuck(self) -> bool:
        """Restart the consumer if a join has hung; ``True`` if it did.

        Seen under churn with static membership: a member's join never
        completed, so its partitions stayed unowned. Far past every group
        timeout, a fresh consumer (same instance id) joins again; whatever
        this process held is rebuilt on the assignment (a new member id).
        """
        since = self._waiting_since
        if since is None or self._stop.is_set() or self._consumer is None:
            return False
        settings = self.settings
        limit = max(3 * settings.rebalance_timeout_ms, 2 * settings.session_timeout_ms)
        waited = asyncio.get_running_loop().time() - since
        if waited < limit / 1000:
            return False
        _log.warning(
            "group join has not completed; restarting the commands consumer",
            extra={"waited_s": round(waited, 1)},
        )
        self.metrics.rejoins += 1
        old, self._consumer = self._consumer, None
        self._generation += 1  # whatever it fetched is stale
        await stop_client(old, seconds=settings.stop_timeout)
        self._waiting_since = None
        await self._join()
        return True

    async def _bridge_once(self) -> None:
        """Read the kept runners' partitions without the group, one fetch.

        During a rebalance a group-less consumer reads on from each runner's
        :attr:`~PartitionRunner.next_offset` and dispatches as usual. If the
        partition stays, the group consumer is sought to where the runner got
        to (records read twice are skipped by offset); if it moved, the new
        owner's fence voids whatever this process still tries to commit.
        """
        poll_ms = self.settings.poll_timeout_ms
        positions = {
            p: r.next_offset
            for p, r in self._runners.items()
            if r.next_offset is not None and not r.broken
        }
        if not positions:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(poll_ms / 1000):
                    await self._assignment_done.wait()
            return
        bridge = await self._bridge_consumer()
        if bridge is None:
            await asyncio.sleep(poll_ms / 1000)
            return
        topic = self.settings.topics.commands
        generation = self._generation
        if self._bridge_generation != generation:
            self._bridge_generation = generation
            bridge.assign([TopicPartition(topic, p) for p in sorted(positions)])
            for partition, offset in positions.items():
                bridge.seek(TopicPartition(topic, partition), offset)
        try:
            async with asyncio.timeout(
                poll_ms / 1000 + self._clients.connection.request_timeout
            ):
                batch = await bridge.getmany(
                    timeout_ms=poll_ms, max_records=self.settings.max_poll_records
                )
        except (TimeoutError, KafkaError):
            self._bridge_generation = -1  # reassign and seek next time
            return
        if batch and not self._assignment_done.is_set():
            self.metrics.bridged += sum(len(records) for records in batch.values())
            await self._dispatch(batch, generation)

    async def _bridge_consumer(self) -> Any:
        if self._bridge is None:
            consumer = self._clients.consumer(
                "actor-bridge",
                group_id=None,
                read_committed=True,
                auto_offset_reset="earliest",
                max_poll_records=self.settings.max_poll_records,
            )
            try:
                await start_client(
                    consumer,
                    seconds=self._clients.connection.connect_timeout,
                    operation="start rebalance reader",
                    security=self._clients.security,
                )
            except TransportError:
                return None
            self._bridge = consumer
            self._bridge_generation = -1
        return self._bridge

    async def _dispatch(self, batch: dict[Any, list[Any]], generation: int) -> None:
        for tp, records in batch.items():
            for record in records:
                if generation != self._generation:
                    return  # fetched before a rebalance: refetched after it
                runner = self._runners.get(tp.partition)
                if runner is None or tp.partition in self._to_reset:
                    break
                await runner.dispatch(record)

    # ----------------------------------------------------------- rebalance

    async def _revoked(self, revoked: set[TopicPartition]) -> None:
        # Eager rebalancing revokes everything; the runners keep going until
        # the assignment that follows says what actually moved.
        self._generation += 1
        self._assignment_done.clear()
        self._waiting_since = asyncio.get_running_loop().time()
        self.metrics.ready = False
        self.metrics.rebalances += 1

    async def _assigned(self, assigned: set[TopicPartition]) -> None:
        try:
            await self._reconcile(assigned)
        except Exception as exc:  # noqa: BLE001 - aiokafka would swallow it: keep it
            _log.exception("taking partitions over failed")
            self._fatal = exc
        finally:
            self._assignment_done.set()
            self._waiting_since = None

    async def _reconcile(self, assigned: set[TopicPartition]) -> None:
        """Keep what stayed, hand over what moved, start opening what is new.

        Returns at once: aiokafka sends no heartbeat while this callback runs,
        so a slow restore here would get the member thrown out of the group.
        New partitions are paused in the consumer and opened in the
        background; each is resumed when its loops are restored.
        """
        generation = self._generation
        topic = self.settings.topics.commands
        wanted = {tp.partition for tp in assigned if tp.topic == topic}
        self._wanted = wanted
        member = getattr(
            getattr(self._consumer, "_coordinator", None), "member_id", None
        )
        rejoined = self._member_id is not None and member != self._member_id
        self._member_id = member
        kept: list[int] = []
        rebuild: dict[int, PartitionRunner] = {}
        for partition in sorted(self._runners):
            runner = self._runners[partition]
            if partition in wanted and not rejoined and not runner.broken:
                kept.append(partition)
                continue
            del self._runners[partition]
            self._to_reset.discard(partition)
            if partition in wanted:
                # Ours again, but it may have been elsewhere meanwhile (or its
                # writer failed): rebuild it from Kafka.
                rebuild[partition] = runner
            else:
                self.metrics.partitions_moved += 1
                self._retries.pop(partition, None)
                self._leave(runner)
        for partition in kept:
            self._owned[partition] = generation
            runner = self._runners[partition]
            if runner.next_offset is not None:
                self._consumer.seek(
                    TopicPartition(topic, partition), runner.next_offset
                )
        self.metrics.partitions_kept += len(kept)
        fresh = [] if self._stopping else sorted(wanted - set(self._runners))
        for partition in fresh:
            self._owned[partition] = generation
            self._consumer.pause(TopicPartition(topic, partition))
            if partition not in self._opening:
                self._opening[partition] = self._spawn(
                    self._open_later(partition, rebuild.pop(partition, None)),
                    f"open-{partition}",
                )
        for runner in rebuild.values():  # stopping: nothing reopens
            self._leave(runner)
        self._update_partitions()
        self._log_ready(kept=kept, opening=fresh)

    async def _open_later(
        self, partition: int, previous: PartitionRunner | None
    ) -> None:
        """Open a newly assigned partition, then let the consumer fetch it."""
        try:
            if previous is not None:
                await previous.abandon()
            runner = await self._open(partition, self._owned[partition])
        except Exception as exc:  # noqa: BLE001 - not Kafka's or a restore's: fatal
            _log.exception("taking a partition over failed")
            self._fatal = exc
            return
        finally:
            self._opening.pop(partition, None)
        if self._fatal is not None:
            return  # stopping with it (e.g. a denied takeover): never ready
        tp = TopicPartition(self.settings.topics.commands, partition)
        consumer = self._consumer
        if (
            self._stopping
            or partition not in self._wanted
            or consumer is None
            or tp not in consumer.assignment()
        ):
            # Moved on while it opened: hand it over again. The partitions
            # kept may all be open already, so readiness is decided below
            # all the same: this was the last one they waited for.
            self._leave(runner)
        else:
            self._runners[partition] = runner
            if runner.broken:
                self._to_reset.add(partition)
            else:
                self._taken_over(partition)
            consumer.resume(tp)
        self._update_partitions()
        if not self._opening and not self._stopping:
            self._log_ready(kept=[], opening=[])

    def _update_partitions(self) -> None:
        self.metrics.partitions = set(self._runners)
        for partition in list(self.metrics.consumer_lag):
            if partition not in self._runners:
                del self.metrics.consumer_lag[partition]
        self.metrics.ready = (
            not self._stopping
            and not self._to_reset
            and not self._opening
            and self._fatal is None
        )

    def _log_ready(self, *, kept: list[int], opening: list[int]) -> None:
        if self._opening:
            _log.info(
                "partitions assigned",
                extra={
                    "kept": ",".join(map(str, kept)),
                    "opening": ",".join(map(str, opening)),
                    "generation": self._generation,
                },
            )
            return
        _log.info(
            "partitions ready: [%s]",
            ",".join(map(str, sorted(self._runners))),
            extra={"kept": ",".join(map(str, kept)), "generation": self._generation},
        )

    def _leave(self, runner: PartitionRunner) -> None:
        """Hand a partition that moved away over, in the background."""
        task = self._spawn(runner.release(), f"handover-{runner.partition}")
        self._leaving.add(task)
        task.add_done_callback(self._leaving.discard)

    async def _await_leaving(self) -> None:
        if self._leaving:
            await asyncio.wait(list(self._leaving))

    async def _open(self, partition: int, generation: int) -> PartitionRunner:
        ctx = RunnerContext(
            clients=self._clients,
            topics=self.settings.topics,
            group_id=self.settings.group_id,
            txn_prefix=self.settings.txn_prefix,
            codec=self._codec,
            hub=self._require_hub(),
            setup_for=self._setup_for,
            clock=self._clock,
            ids=self._ids,
            metrics=self.metrics,
            writer=self.settings.writer,
            stop_timeout=self.settings.stop_timeout,
            spawn=self._spawn,
            partitions=self._partitions,
            resident_budget=self._resident_share,
            traces=self._traces,
            tracer=self._tracer,
        )
        tp = TopicPartition(self.settings.topics.commands, partition)
        self._owned[partition] = generation

        def still_owner() -> bool:
            consumer = self._consumer
            return (
                self._owned.get(partition) == self._generation
                and not self._stopping
                and consumer is not None
                and tp in consumer.assignment()
            )

        runner = PartitionRunner(
            partition, ctx, still_owner=still_owner, on_broken=self._broken
        )
        try:
            await runner.open()
        except KafkaAuthorizationError as exc:
            # Not retriable: retrying the takeover would only fail the same way.
            # Every partition is denied alike: the first one says so.
            if self._fatal is None:
                _log.error(
                    "partition takeover denied by an ACL; stopping",
                    extra={"partition": partition, "reason": str(exc)},
                )
                self._fatal = exc
            await runner.abandon()
            runner.writer.fail()
        except TurnstreamError as exc:
            # Kafka is unreachable or a loop cannot be restored right now: the
            # consumer loop retries the takeover with backoff (records wait
            # meanwhile). One line per failing streak, one when it ends.
            if partition not in self._retries:
                _log.warning(
                    "partition takeover failed; will retry",
                    extra={"partition": partition, "exc_type": type(exc).__name__},
                )
            self._retry_later(partition)
            await runner.abandon()
            runner.writer.fail()
        except BaseException:
            await runner.abandon()
            raise
        return runner

    def _retry_later(self, partition: int) -> None:
        """Back the next takeover attempt of ``partition`` off (jittered)."""
        backoff, _ = self._retries.get(partition) or (
            Backoff(
                self.settings.writer.backoff_initial, self.settings.retry_backoff_max
            ),
            0.0,
        )
        not_before = asyncio.get_running_loop().time() + backoff.next()
        self._retries[partition] = (backoff, not_before)

    def _retry_due(self, partition: int) -> bool:
        retry = self._retries.get(partition)
        return retry is None or asyncio.get_running_loop().time() >= retry[1]

    def _taken_over(self, partition: int) -> None:
        """A takeover succeeded: log the end of a failing streak once."""
        retry = self._retries.pop(partition, None)
        if retry is not None:
            _log.info(
                "partition taken over again",
                extra={"partition": partition, "attempts": retry[0].failures + 1},
            )

    def _resident_share(self) -> int:
        """One partition's share of the resident budget."""
        return max(1, self.settings.max_resident_loops // max(1, len(self._runners)))

    def _require_hub(self) -> DeltaPublisher:
        if self._hub is None:
            raise TransportError("open partition", "no deltas hub", retriable=False)
        return self._hub

    def _broken(self, runner: PartitionRunner) -> None:
        denied = runner.writer.denial
        if denied is not None and self._fatal is None:
            # An ACL: rebuilding the partition would fail the same way. Stop
            # with the missing permission, reported once (the first partition).
            _log.error(
                "commit denied by an ACL; stopping",
                extra={
                    "partition": runner.partition,
                    "principal": denied.principal,
                    "permission": denied.permission,
                    "resource_type": denied.resource_type,
                    "resource": denied.resource,
                },
            )
            self._fatal = denied
        if self._fatal is not None:
            # Stopping with it: nothing to rebuild, and no fencing happened.
            self.metrics.ready = False
            return
        state = runner.writer.state
        if self._runners.get(runner.partition) is not runner:
            # Already handed over (the partition moved, or is being rebuilt):
            # the new owner fencing its last commits is the handover itself.
            # A runner whose takeover failed was never current: its failure is
            # logged by the takeover.
            if state is WriterState.FENCED:
                _log.info(
                    "fenced after the partition moved",
                    extra={"partition": runner.partition, "state": state.value},
                )
            return
        _log.error(
            "partition writer broken",
            extra={"partition": runner.partition, "state": state.value},
        )
        self._to_reset.add(runner.partition)
        self.metrics.ready = False

    async def _stop_runners(
        self, partitions: set[int], *, offline: bool = False
    ) -> None:
        runners = [
            self._runners.pop(p) for p in sorted(partitions) if p in self._runners
        ]
        self._to_reset -= partitions
        if runners:
            async with asyncio.TaskGroup() as group:
                for runner in runners:
                    group.create_task(runner.give_up() if offline else runner.release())
        self._update_partitions()

    async def _apply_resets(self) -> None:
        """Rebuild failed partitions from Kafka (consumer-loop task only)."""
        if self._stopping:
            return  # a stopping service rebuilds nothing; the handover abandons them
        for partition in sorted(self._to_reset):
            runner = self._runners.get(partition)
            if runner is None or not runner.broken:
                self._to_reset.discard(partition)
                self._retries.pop(partition, None)
                continue
            if not self._retry_due(partition):
                continue
            await runner.abandon()
            if runner.writer.state is WriterState.FENCED:
                # Another process owns it; the group will take it from us.
                self._runners.pop(partition, None)
                self._to_reset.discard(partition)
                self._retries.pop(partition, None)
                continue
            tp = TopicPartition(self.settings.topics.commands, partition)
            if tp not in self._consumer.assignment():
                # Not ours any more: re-initialising would fence the new owner.
                self._runners.pop(partition, None)
                self._to_reset.discard(partition)
                self._retries.pop(partition, None)
                continue
            generation = self._generation
            fresh = await self._open(partition, generation)
            if fresh.broken:
                continue  # takeover failed again: retried after its backoff
            if (
                generation != self._generation
                or self._runners.get(partition) is not runner
            ):
                await fresh.handover()
                self._to_reset.discard(partition)
                continue
            try:
                async with asyncio.timeout(self._clients.connection.request_timeout):
                    committed = await self._consumer.committed(tp)
                if committed is None:
                    await self._consumer.seek_to_beginning(tp)
                else:
                    self._consumer.seek(tp, committed)
            except (TimeoutError, KafkaError) as exc:
                await fresh.handover()
                if partition not in self._retries:
                    _log.warning(
                        "rewind failed; will retry",
                        extra={"partition": partition, "exc_type": type(exc).__name__},
                    )
                self._retry_later(partition)
                continue
            self._runners[partition] = fresh
            self._to_reset.discard(partition)
            self._taken_over(partition)
        self.metrics.ready = (
            not self._to_reset
            and not self._stopping
            and not self._opening
            and self._assignment_done.is_set()
        )

    async def _watch_lag(self) -> None:
        while True:
            await asyncio.sleep(self.settings.lag_interval)
            consumer = self._consumer
            if consumer is None:
                continue
            for tp in list(consumer.assignment()):
                high = consumer.highwater(tp)
                if high is None:
                    continue
                try:
                    async with asyncio.timeout(
                        self._clients.connection.request_timeout
                    ):
                        position = await consumer.position(tp)
                except (TimeoutError, KafkaError):
                    continue
                self.metrics.consumer_lag[tp.partition] = max(
                    int(high) - int(position), 0
                )

    async def _watch_health(self) -> None:
        """Log an outage and the recovery once each; expose them as metrics."""
        metrics = self.metrics
        since = 0.0
        while True:
            await asyncio.sleep(self.settings.health_interval)
            consumer = self._consumer
            if consumer is None:
                continue
            up = await reachable(
                consumer, seconds=self._clients.connection.request_timeout
            )
            now = asyncio.get_running_loop().time()
            if up == metrics.kafka_reachable:
                continue
            metrics.kafka_reachable = up
            if not up:
                since = now
                metrics.kafka_outages += 1
                _log.error("Kafka unreachable; retrying until it answers")
            else:
                _log.info(
                    "Kafka reachable again",
                    extra={"outage_s": round(now - since, 1)},
                )
