"""The commands partitions the loop-actor service owns, and their changes of hands.

Owns :class:`OwnedPartitions`: the service's
:class:`~turnstream.kafka.actor.runner.PartitionRunner` per assigned partition,
and everything that changes that set -- the rebalance callbacks (a partition
assigned again is kept, one that moved is handed over in the background, a new
one is opened, paused in the consumer until its loops are restored), the
takeover of a partition (fence, restore; retried with backoff through
:class:`~turnstream.kafka.actor.takeover_retries.TakeoverRetries` when Kafka
or a restore fails), the rebuild of a partition whose writer broke (the
consumer rewound to the committed offset), and the service's readiness, which
follows from them. See :mod:`turnstream.kafka.actor.service` for the
ownership rules.

Part of ``turnstream.kafka`` (the only aiokafka importer); shares the
service's :class:`~turnstream.kafka.actor.membership.Membership`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import KW_ONLY, dataclass, field

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from turnstream.errors import TransportError, TurnstreamError
from turnstream.kafka.actor.deltas import DeltaPublisher
from turnstream.kafka.actor.membership import SERVICE_LOG, Membership
from turnstream.kafka.actor.runner import PartitionRunner, RunnerContext, SetupFor
from turnstream.kafka.actor.takeover_retries import TakeoverRetries
from turnstream.kafka.actor.writer import WriterState
from turnstream.kafka.errors import KafkaAuthorizationError
from turnstream.runtime.hooks import Tracer
from turnstream.runtime.ports import Clock, IdSource
from turnstream.runtime.tracing import TraceContexts
from turnstream.wire import Codec

__all__ = ["OwnedPartitions"]

_log = logging.getLogger(SERVICE_LOG)


@dataclass(eq=False, repr=False)
class OwnedPartitions:
    """The service's partition runners, kept in step with the group's assignment.

    A little over ~400 lines on purpose: the rebalance callbacks, the takeover
    and the rebuild all change the same runner set and its bookkeeping
    (partitions opening, to rebuild, their generations), so they stay together.

    Args:
        membership: the consumer-group state the service's parts share.
        codec: encodes and decodes records.
        setup_for: the configuration and model a loop runs with.
        clock: stamps events.
        ids: mints ids.
        traces: the trace context submits carry.
        tracer: records each turn's spans (``None``: tracing off).
    """

    membership: Membership
    _: KW_ONLY
    codec: Codec
    setup_for: SetupFor
    clock: Clock
    ids: IdSource
    traces: TraceContexts
    tracer: Tracer | None
    runners: dict[int, PartitionRunner] = field(init=False, default_factory=dict)
    """The current runner of each partition this process owns."""
    count: int = field(init=False, default=0)
    """The commands topic's partition count (set once the service runs)."""
    hub: DeltaPublisher | None = field(init=False, default=None)
    """The deltas hub the loops publish to (set once the service runs)."""
    _to_reset: set[int] = field(init=False, default_factory=set)
    _owned: dict[int, int] = field(init=False, default_factory=dict)
    _member_id: str | None = field(init=False, default=None)
    _leaving: set[asyncio.Task[None]] = field(init=False, default_factory=set)
    _opening: dict[int, asyncio.Task[None]] = field(init=False, default_factory=dict)
    _wanted: set[int] = field(init=False, default_factory=set)
    _retries: TakeoverRetries = field(init=False)

    def __post_init__(self) -> None:
        settings = self.membership.settings
        self._retries = TakeoverRetries(
            initial=settings.writer.backoff_initial, cap=settings.retry_backoff_max
        )

    def taking(self, partition: int) -> PartitionRunner | None:
        """The runner records of ``partition`` go to (``None``: none, or rebuilding)."""
        if partition in self._to_reset:
            return None
        return self.runners.get(partition)

    async def wait_opening(self) -> None:
        """Wait for the partitions being opened."""
        if self._opening:
            await asyncio.wait(list(self._opening.values()))

    # ----------------------------------------------------------- rebalance

    async def revoked(self, revoked: set[TopicPartition]) -> None:
        """The group revoked the assignment (all of it: the protocol is eager)."""
        # Eager rebalancing revokes everything; the runners keep going until
        # the assignment that follows says what actually moved.
        m = self.membership
        m.generation += 1
        m.assignment_done.clear()
        m.waiting_since = asyncio.get_running_loop().time()
        m.metrics.ready = False
        m.metrics.rebalances += 1

    async def assigned(self, assigned: set[TopicPartition]) -> None:
        """The group assigned ``assigned``: keep, hand over and open accordingly."""
        m = self.membership
        try:
            await self._reconcile(assigned)
        except Exception as exc:  # noqa: BLE001 - aiokafka would swallow it: keep it
            _log.exception("taking partitions over failed")
            m.fatal = exc
        finally:
            m.assignment_done.set()
            m.waiting_since = None

    async def _reconcile(self, assigned: set[TopicPartition]) -> None:
        """Keep what stayed, hand over what moved, start opening what is new.

        Returns at once: aiokafka sends no heartbeat while this callback runs,
        so a slow restore here would get the member thrown out of the group.
        New partitions are paused in the consumer and opened in the
        background; each is resumed when its loops are restored.
        """
        m = self.membership
        generation = m.generation
        topic = m.settings.topics.commands
        wanted = {tp.partition for tp in assigned if tp.topic == topic}
        self._wanted = wanted
        member = getattr(getattr(m.consumer, "_coordinator", None), "member_id", None)
        rejoined = self._member_id is not None and member != self._member_id
        self._member_id = member
        kept: list[int] = []
        rebuild: dict[int, PartitionRunner] = {}
        for partition in sorted(self.runners):
            runner = self.runners[partition]
            if partition in wanted and not rejoined and not runner.broken:
                kept.append(partition)
                continue
            del self.runners[partition]
            self._to_reset.discard(partition)
            if partition in wanted:
                # Ours again, but it may have been elsewhere meanwhile (or its
                # writer failed): rebuild it from Kafka.
                rebuild[partition] = runner
            else:
                m.metrics.partitions_moved += 1
                self._retries.forget(partition)
                self._leave(runner)
        for partition in kept:
            self._owned[partition] = generation
            runner = self.runners[partition]
            if runner.next_offset is not None:
                m.consumer.seek(TopicPartition(topic, partition), runner.next_offset)
        m.metrics.partitions_kept += len(kept)
        fresh = [] if m.stopping else sorted(wanted - set(self.runners))
        for partition in fresh:
            self._owned[partition] = generation
            m.consumer.pause(TopicPartition(topic, partition))
            if partition not in self._opening:
                self._opening[partition] = m.spawn(
                    self._open_later(partition, rebuild.pop(partition, None)),
                    f"open-{partition}",
                )
        for runner in rebuild.values():  # stopping: nothing reopens
            self._leave(runner)
        self.update()
        self._log_ready(kept=kept, opening=fresh)

    async def _open_later(
        self, partition: int, previous: PartitionRunner | None
    ) -> None:
        """Open a newly assigned partition, then let the consumer fetch it."""
        m = self.membership
        try:
            if previous is not None:
                await previous.abandon()
            runner = await self._open(partition, self._owned[partition])
        except Exception as exc:  # noqa: BLE001 - not Kafka's or a restore's: fatal
            _log.exception("taking a partition over failed")
            m.fatal = exc
            return
        finally:
            self._opening.pop(partition, None)
        if m.fatal is not None:
            return  # stopping with it (e.g. a denied takeover): never ready
        tp = TopicPartition(m.settings.topics.commands, partition)
        consumer = m.consumer
        if (
            m.stopping
            or partition not in self._wanted
            or consumer is None
            or tp not in consumer.assignment()
        ):
            # Moved on while it opened: hand it over again. The partitions
            # kept may all be open already, so readiness is decided below
            # all the same: this was the last one they waited for.
            self._leave(runner)
        else:
            self.runners[partition] = runner
            if runner.broken:
                self._to_reset.add(partition)
            else:
                self._retries.taken_over(partition)
            consumer.resume(tp)
        self.update()
        if not self._opening and not m.stopping:
            self._log_ready(kept=[], opening=[])

    def update(self) -> None:
        """Show the partitions owned and whether the service is ready."""
        m = self.membership
        m.metrics.partitions = set(self.runners)
        for partition in list(m.metrics.consumer_lag):
            if partition not in self.runners:
                del m.metrics.consumer_lag[partition]
        m.metrics.ready = (
            not m.stopping
            and not self._to_reset
            and not self._opening
            and m.fatal is None
        )

    def _log_ready(self, *, kept: list[int], opening: list[int]) -> None:
        if self._opening:
            _log.info(
                "partitions assigned",
                extra={
                    "kept": ",".join(map(str, kept)),
                    "opening": ",".join(map(str, opening)),
                    "generation": self.membership.generation,
                },
            )
            return
        _log.info(
            "partitions ready: [%s]",
            ",".join(map(str, sorted(self.runners))),
            extra={
                "kept": ",".join(map(str, kept)),
                "generation": self.membership.generation,
            },
        )

    # ------------------------------------------------------------ handover

    def _leave(self, runner: PartitionRunner) -> None:
        """Hand a partition that moved away over, in the background."""
        task = self.membership.spawn(runner.release(), f"handover-{runner.partition}")
        self._leaving.add(task)
        task.add_done_callback(self._leaving.discard)

    async def await_leaving(self) -> None:
        """Wait for the partitions being handed over in the background."""
        if self._leaving:
            await asyncio.wait(list(self._leaving))

    async def stop_runners(
        self, partitions: set[int], *, offline: bool = False
    ) -> None:
        """Hand ``partitions`` over (``offline``: give them up without writing)."""
        runners = [self.runners.pop(p) for p in sorted(partitions) if p in self.runners]
        self._to_reset -= partitions
        if runners:
            async with asyncio.TaskGroup() as group:
                for runner in runners:
                    group.create_task(runner.give_up() if offline else runner.release())
        self.update()

    # ------------------------------------------------------------ takeover

    async def _open(self, partition: int, generation: int) -> PartitionRunner:
        m = self.membership
        settings = m.settings
        ctx = RunnerContext(
            clients=m.clients,
            topics=settings.topics,
            group_id=settings.group_id,
            txn_prefix=settings.txn_prefix,
            codec=self.codec,
            hub=self._require_hub(),
            setup_for=self.setup_for,
            clock=self.clock,
            ids=self.ids,
            metrics=m.metrics,
            writer=settings.writer,
            stop_timeout=settings.stop_timeout,
            spawn=m.spawn,
            partitions=self.count,
            resident_budget=self._resident_share,
            traces=self.traces,
            tracer=self.tracer,
        )
        tp = TopicPartition(settings.topics.commands, partition)
        self._owned[partition] = generation

        def still_owner() -> bool:
            consumer = m.consumer
            return (
                self._owned.get(partition) == m.generation
                and not m.stopping
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
            if m.fatal is None:
                _log.error(
                    "partition takeover denied by an ACL; stopping",
                    extra={"partition": partition, "reason": str(exc)},
                )
                m.fatal = exc
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
            self._retries.later(partition)
            await runner.abandon()
            runner.writer.fail()
        except BaseException:
            await runner.abandon()
            raise
        return runner

    def _resident_share(self) -> int:
        """One partition's share of the resident budget."""
        budget = self.membership.settings.max_resident_loops
        return max(1, budget // max(1, len(self.runners)))

    def _require_hub(self) -> DeltaPublisher:
        if self.hub is None:
            raise TransportError("open partition", "no deltas hub", retriable=False)
        return self.hub

    # ------------------------------------------------------------- rebuild

    def _broken(self, runner: PartitionRunner) -> None:
        m = self.membership
        denied = runner.writer.denial
        if denied is not None and m.fatal is None:
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
            m.fatal = denied
        if m.fatal is not None:
            # Stopping with it: nothing to rebuild, and no fencing happened.
            m.metrics.ready = False
            return
        state = runner.writer.state
        if self.runners.get(runner.partition) is not runner:
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
        m.metrics.ready = False

    def _drop(self, partition: int) -> None:
        """Forget a broken partition that is not ours any more."""
        self.runners.pop(partition, None)
        self._to_reset.discard(partition)
        self._retries.forget(partition)

    async def apply_resets(self) -> None:
        """Rebuild failed partitions from Kafka (consumer-loop task only)."""
        m = self.membership
        if m.stopping:
            return  # a stopping service rebuilds nothing; the handover abandons them
        for partition in sorted(self._to_reset):
            runner = self.runners.get(partition)
            if runner is None or not runner.broken:
                self._to_reset.discard(partition)
                self._retries.forget(partition)
                continue
            if not self._retries.due(partition):
                continue
            await runner.abandon()
            if runner.writer.state is WriterState.FENCED:
                # Another process owns it; the group will take it from us.
                self._drop(partition)
                continue
            tp = TopicPartition(m.settings.topics.commands, partition)
            if tp not in m.consumer.assignment():
                # Not ours any more: re-initialising would fence the new owner.
                self._drop(partition)
                continue
            generation = m.generation
            fresh = await self._open(partition, generation)
            if fresh.broken:
                continue  # takeover failed again: retried after its backoff
            if generation != m.generation or self.runners.get(partition) is not runner:
                await fresh.handover()
                self._to_reset.discard(partition)
                continue
            if not await self._rewind(tp, fresh):
                continue
            self.runners[partition] = fresh
            self._to_reset.discard(partition)
            self._retries.taken_over(partition)
        m.metrics.ready = (
            not self._to_reset
            and not m.stopping
            and not self._opening
            and m.assignment_done.is_set()
        )

    async def _rewind(self, tp: TopicPartition, fresh: PartitionRunner) -> bool:
        """Seek the consumer to ``tp``'s committed offset; ``False``: retry later."""
        m = self.membership
        try:
            async with asyncio.timeout(m.clients.connection.request_timeout):
                committed = await m.consumer.committed(tp)
            if committed is None:
                await m.consumer.seek_to_beginning(tp)
            else:
                m.consumer.seek(tp, committed)
        except (TimeoutError, KafkaError) as exc:
            await fresh.handover()
            if tp.partition not in self._retries:
                _log.warning(
                    "rewind failed; will retry",
                    extra={"partition": tp.partition, "exc_type": type(exc).__name__},
                )
            self._retries.later(tp.partition)
            return False
        return True
