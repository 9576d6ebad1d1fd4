"""The loop-actor service: a consumer group member that runs loops on Kafka.

Owns :class:`LoopActorService` and :class:`ServiceSettings`. The service
consumes ``turnstream.commands.v1`` in a consumer group (auto-commit off,
``read_committed``) and, per assigned partition, runs a
:class:`~turnstream.kafka.actor.runner.PartitionRunner` (one transactional producer
with a stable id, the journal, the loop actors). Offsets are committed only
inside those transactions.

Tasks (all in the service's ``TaskGroup``): the consumer loop (the only task
that calls ``getmany``, ``seek`` and ``committed``), the deltas sender, the lag
watcher, every partition writer and every loop actor. The rebalance listener
runs inside aiokafka's coordinator task and blocks ``getmany`` while it runs,
so it never waits on anything the consumer loop holds: on revoke it hands the
partitions over (turns interrupted, terminals committed, offsets committed,
producers closed) *before* returning; on assignment it opens them (fence,
restore) before returning, so no command is dispatched to an unrestored loop.

A writer that finally fails a commit (or cannot tell whether one committed)
gets its partition rebuilt from Kafka by the consumer loop (loops stopped
without writing, state re-read, consumer rewound to the committed offset). A
fenced writer's partition is abandoned until the group reassigns it.

Shutdown is ordered: stop fetching, hand every partition over, leave the group,
stop the deltas producer. Part of ``turnstream.kafka``; the composition root
(:mod:`turnstream.loop_actor`) builds it. It must not read the environment or
install signal handlers (the composition root's job), and never imports the
composition root.
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
from turnstream.kafka.actor.deltas import DeltaPublisher
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.actor.runner import PartitionRunner, RunnerContext, SetupFor
from turnstream.kafka.actor.writer import WriterSettings, WriterState
from turnstream.kafka.clients import KafkaClients, start_client, stop_client
from turnstream.kafka.diagnose import authorization_error
from turnstream.kafka.errors import KafkaAuthorizationError
from turnstream.kafka.faults import Fault, classify, transport_error
from turnstream.kafka.topology import TopicNames, check_copartitioned
from turnstream.runtime.ports import Clock, IdSource, RandomIds, SystemClock
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
        session_timeout_ms: how long the group waits for a silent member
            before reassigning its partitions (the broker allows 6000 and up).
        heartbeat_interval_ms: heartbeat period (a third of the session).
        rebalance_timeout_ms: how long a rebalance waits for members to hand
            their partitions over.
        max_poll_interval_ms: longest gap between fetches before leaving.
        poll_timeout_ms: how long one fetch waits for records.
        max_poll_records: records taken per fetch.
        writer: the partition writers' settings.
        stop_timeout: seconds one loop may take to stop on a handover.
        delta_capacity: ephemeral events buffered for the deltas producer (a
            full buffer makes streaming turns wait up to a second, then drop).
        lag_interval: seconds between consumer-lag updates.
    """

    group_id: str = "turnstream-loop-actor"
    topics: TopicNames = field(default_factory=TopicNames)
    txn_prefix: str = "turnstream"
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 3_000
    rebalance_timeout_ms: int = 30_000
    max_poll_interval_ms: int = 300_000
    poll_timeout_ms: int = 250
    max_poll_records: int = 200
    writer: WriterSettings = field(default_factory=WriterSettings)
    stop_timeout: float = 15.0
    delta_capacity: int = 8192
    lag_interval: float = 5.0


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
    ) -> None:
        self._clients = clients
        self.settings = settings
        self._codec = codec
        self._setup_for = setup_for
        self._clock = clock or SystemClock()
        self._ids = ids or RandomIds()
        self.metrics = metrics or ServiceMetrics()
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
            TransportError: Kafka failed in a way the service cannot survive.
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
        request_ms = max(
            self._clients.connection.request_timeout_ms,
            settings.rebalance_timeout_ms + 5_000,
        )
        consumer = self._clients.consumer(
            "actor",
            group_id=settings.group_id,
            read_committed=True,
            auto_offset_reset="earliest",
            session_timeout_ms=settings.session_timeout_ms,
            heartbeat_interval_ms=settings.heartbeat_interval_ms,
            rebalance_timeout_ms=settings.rebalance_timeout_ms,
            max_poll_interval_ms=settings.max_poll_interval_ms,
            max_poll_records=settings.max_poll_records,
            request_timeout_ms=request_ms,
        )
        consumer.subscribe([settings.topics.commands], listener=_Listener(self))
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                hub_task = group.create_task(self._hub.run(), name="deltas")
                await start_client(
                    consumer,
                    seconds=self._clients.connection.connect_timeout,
                    operation="start commands consumer",
                )
                self._consumer = consumer
                lag_task = group.create_task(self._watch_lag(), name="lag")
                try:
                    await self._consume()
                finally:
                    await self._stop_everything()
                    lag_task.cancel()
                    hub_task.cancel()
        finally:
            self._group = None
            self._consumer = None
            self.metrics.ready = False
        if self._fatal is not None:
            raise self._fatal

    async def _stop_everything(self) -> None:
        """Stop fetching is done; hand partitions over, then leave the group."""
        self._stopping = True
        self.metrics.ready = False
        await self._stop_runners(set(self._runners))
        if self._consumer is not None:
            await stop_client(self._consumer, seconds=self.settings.stop_timeout)
        # An assignment that raced the stop may have opened runners: stop them.
        await self._stop_runners(set(self._runners))

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
        while not self._stop.is_set():
            if self._fatal is not None:
                return
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
                    self._fatal = authorization_error(
                        exc,
                        security=self._clients.security,
                        operation="fetch commands",
                        permission="Read",
                        resource=self.settings.topics.commands,
                    ) or transport_error("fetch commands", exc)
                    return
                _log.warning("fetch failed", extra={"exc_type": type(exc).__name__})
                continue
            if not batch:
                continue
            # aiokafka returns only records of the assignment current when
            # getmany returns, but it may return them while our assignment
            # callback is still opening the partitions: wait for it. A rebalance
            # after that makes the batch stale (the new assignment refetches
            # from the committed offsets).
            generation = self._generation
            while not self._assignment_done.is_set() and not self._stop.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(poll_ms / 1000):
                        await self._assignment_done.wait()
            await self._dispatch(batch, generation)

    async def _dispatch(self, batch: dict[Any, list[Any]], generation: int) -> None:
        for tp, records in batch.items():
            for record in records:
                if generation != self._generation or self._stop.is_set():
                    return  # fetched before a rebalance: refetched from committed
                runner = self._runners.get(tp.partition)
                if runner is None or tp.partition in self._to_reset:
                    break
                await runner.dispatch(record)

    # ----------------------------------------------------------- rebalance

    async def _revoked(self, revoked: set[TopicPartition]) -> None:
        self._generation += 1
        self._assignment_done.clear()
        self.metrics.ready = False
        mine = {
            tp.partition for tp in revoked if tp.topic == self.settings.topics.commands
        }
        try:
            await self._stop_runners(mine)
        except Exception as exc:  # noqa: BLE001 - aiokafka would swallow it: keep it
            _log.exception("handing partitions over failed")
            self._fatal = exc

    async def _assigned(self, assigned: set[TopicPartition]) -> None:
        try:
            await self._take_over(assigned)
        finally:
            self._assignment_done.set()

    async def _take_over(self, assigned: set[TopicPartition]) -> None:
        if self._stopping:
            return
        generation = self._generation
        partitions = sorted(
            tp.partition for tp in assigned if tp.topic == self.settings.topics.commands
        )
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [
                    group.create_task(self._open(p, generation)) for p in partitions
                ]
        except Exception as exc:  # noqa: BLE001 - aiokafka would swallow it: keep it
            _log.exception("taking partitions over failed")
            self._fatal = exc
            return
        for task in tasks:
            runner = task.result()
            self._runners[runner.partition] = runner
            if runner.broken:
                self._to_reset.add(runner.partition)
        self.metrics.partitions = set(self._runners)
        self.metrics.ready = not self._stopping and not self._to_reset
        _log.info("partitions ready: [%s]", ",".join(map(str, partitions)))

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
        )
        tp = TopicPartition(self.settings.topics.commands, partition)

        def still_owner() -> bool:
            consumer = self._consumer
            return (
                generation == self._generation
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
            _log.error(
                "partition takeover denied by an ACL; stopping",
                extra={"partition": partition, "reason": str(exc)},
            )
            self._fatal = exc
            await runner.abandon()
            runner.writer.fail()
        except TurnstreamError as exc:
            # Kafka is unreachable or a loop cannot be restored right now: the
            # consumer loop retries the takeover (records wait meanwhile).
            _log.warning(
                "partition takeover failed; will retry",
                extra={"partition": partition, "exc_type": type(exc).__name__},
            )
            await runner.abandon()
            runner.writer.fail()
        except BaseException:
            await runner.abandon()
            raise
        return runner

    def _require_hub(self) -> DeltaPublisher:
        if self._hub is None:
            raise TransportError("open partition", "no deltas hub", retriable=False)
        return self._hub

    def _broken(self, runner: PartitionRunner) -> None:
        if runner.writer.denial is not None and self._fatal is None:
            # An ACL: rebuilding the partition would fail the same way. Stop
            # with the missing permission (reported once, by the writer).
            self._fatal = runner.writer.denial
        state = runner.writer.state
        _log.error(
            "partition writer broken",
            extra={"partition": runner.partition, "state": state.value},
        )
        self._to_reset.add(runner.partition)
        self.metrics.ready = False

    async def _stop_runners(self, partitions: set[int]) -> None:
        runners = [
            self._runners.pop(p) for p in sorted(partitions) if p in self._runners
        ]
        self._to_reset -= partitions
        if runners:
            async with asyncio.TaskGroup() as group:
                for runner in runners:
                    stop = runner.abandon() if runner.broken else runner.handover()
                    group.create_task(stop)
        self.metrics.partitions = set(self._runners)
        for partition in partitions:
            self.metrics.consumer_lag.pop(partition, None)

    async def _apply_resets(self) -> None:
        """Rebuild failed partitions from Kafka (consumer-loop task only)."""
        for partition in sorted(self._to_reset):
            runner = self._runners.get(partition)
            if runner is None or not runner.broken:
                self._to_reset.discard(partition)
                continue
            await runner.abandon()
            if runner.writer.state is WriterState.FENCED:
                # Another process owns it; the group will take it from us.
                self._runners.pop(partition, None)
                self._to_reset.discard(partition)
                continue
            tp = TopicPartition(self.settings.topics.commands, partition)
            if tp not in self._consumer.assignment():
                # Not ours any more: re-initialising would fence the new owner.
                self._runners.pop(partition, None)
                self._to_reset.discard(partition)
                continue
            generation = self._generation
            fresh = await self._open(partition, generation)
            if fresh.broken:
                return  # takeover failed again: retried on the next round
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
                _log.warning("rewind failed", extra={"exc_type": type(exc).__name__})
                return
            self._runners[partition] = fresh
            self._to_reset.discard(partition)
        self.metrics.ready = (
            not self._to_reset and not self._stopping and self._assignment_done.is_set()
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
