"""The loop-actor service's commands consumer and the task that reads it.

Owns :class:`ConsumerLoop`: it starts the group consumer (retried with backoff
while the broker is unreachable; subscribed after the start so the start never
waits for an assignment), restarts it if a group join hangs, and is the only
task that calls ``getmany``, ``seek`` and ``committed``. It hands each fetched
record to its partition's runner in offset order, rebuilds broken partitions
between fetches (:meth:`OwnedPartitions.apply_resets`), and during a rebalance
reads the kept partitions on through a group-less *bridge* consumer so their
running turns still get interrupts and gate answers in log order.

Part of ``turnstream.kafka`` (the only aiokafka importer); shares the
service's :class:`~turnstream.kafka.actor.membership.Membership`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from aiokafka import ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError

from turnstream.errors import TransportError
from turnstream.kafka.actor.assignment import assignors
from turnstream.kafka.actor.membership import SERVICE_LOG, Membership
from turnstream.kafka.actor.partitions import OwnedPartitions
from turnstream.kafka.backoff import Backoff
from turnstream.kafka.clients import stop_client
from turnstream.kafka.diagnose import authorization_error
from turnstream.kafka.faults import Fault, classify, transport_error

__all__ = ["ConsumerLoop"]

_log = logging.getLogger(SERVICE_LOG)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, partitions: OwnedPartitions) -> None:
        self._partitions = partitions

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._partitions.revoked(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self._partitions.assigned(assigned)


class ConsumerLoop:
    """Fetches the commands partitions and dispatches their records.

    Args:
        membership: the consumer-group state the service's parts share.
        partitions: the partitions the records go to.
        done: whether the loop ends (asked before each fetch).
    """

    def __init__(
        self,
        membership: Membership,
        partitions: OwnedPartitions,
        *,
        done: Callable[[], bool],
    ) -> None:
        self._m = membership
        self._partitions = partitions
        self._done = done
        self._bridge: Any = None
        self._bridge_generation = -1

    def _new_consumer(self) -> Any:
        settings = self._m.settings
        clients = self._m.clients
        request_ms = max(
            clients.connection.request_timeout_ms,
            settings.rebalance_timeout_ms + 5_000,
        )
        return clients.consumer(
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

    async def join(self) -> bool:
        """Start the consumer and subscribe; ``False`` if stopped first.

        Subscribing after the start keeps ``start`` from waiting for the first
        assignment (the group may take long to settle); an unreachable broker
        is retried with backoff, never fatal.
        """
        m = self._m
        backoff = Backoff(0.5, m.settings.retry_backoff_max)
        waiting = False
        while not m.stop.is_set():
            consumer = self._new_consumer()
            try:
                await m.clients.start(consumer, operation="start commands consumer")
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
                        await m.stop.wait()
                continue
            consumer.subscribe(
                [m.settings.topics.commands], listener=_Listener(self._partitions)
            )
            m.consumer = consumer
            m.waiting_since = asyncio.get_running_loop().time()
            if waiting:
                _log.info("commands consumer started")
            return True
        return False

    async def close_bridge(self, seconds: float) -> None:
        """Stop the rebalance reader, if one was started."""
        if self._bridge is not None:
            await stop_client(self._bridge, seconds=seconds)
            self._bridge = None

    async def run(self) -> None:
        """Fetch and dispatch until :attr:`done` says so (or a fetch is fatal)."""
        m = self._m
        consumer = m.consumer
        poll_ms = m.settings.poll_timeout_ms
        bound = poll_ms / 1000 + m.clients.connection.request_timeout
        while not self._done():
            if await self._join_stuck():
                consumer = m.consumer
                continue
            if not m.assignment_done.is_set() and self._partitions.runners:
                # The group is rebalancing: the group consumer returns nothing
                # until it is done, but the turns it left running must still get
                # their interrupts and gate answers in log order.
                await self._bridge_once()
                continue
            await self._partitions.apply_resets()
            try:
                async with asyncio.timeout(bound):
                    batch = await consumer.getmany(
                        timeout_ms=poll_ms, max_records=m.settings.max_poll_records
                    )
            except TimeoutError:
                continue
            except KafkaError as exc:
                if classify(exc) is not Fault.RETRIABLE:
                    m.fatal = self._fetch_fatal(exc)
                    return
                if m.metrics.kafka_reachable:
                    _log.warning("fetch failed", extra={"exc_type": type(exc).__name__})
                continue
            if not batch:
                continue
            # aiokafka returns only records of the assignment current when
            # getmany returns, but it may return them while our assignment
            # callback is still opening the partitions: wait for it. A rebalance
            # after that makes the batch stale (the new assignment refetches).
            generation = m.generation
            while not m.assignment_done.is_set() and not m.stop.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(poll_ms / 1000):
                        await m.assignment_done.wait()
            if m.assignment_done.is_set():
                await self._dispatch(batch, generation)

    def _fetch_fatal(self, exc: KafkaError) -> BaseException:
        """What a fetch that cannot be retried stops the service with (logged)."""
        m = self._m
        denied = authorization_error(
            exc,
            security=m.clients.security,
            operation="fetch commands",
            permission="Read",
            resource=m.settings.topics.commands,
        )
        if denied is not None:
            _log.error(
                "fetch denied by an ACL; stopping", extra={"reason": str(denied)}
            )
        else:
            _log.error(
                "fetch failed and cannot be retried; stopping",
                extra={"exc_type": type(exc).__name__},
            )
        return denied or transport_error("fetch commands", exc)

    async def _join_stuck(self) -> bool:
        """Restart the consumer if a join has hung; ``True`` if it did.

        Seen under churn with static membership: a member's join never
        completed, so its partitions stayed unowned. Far past every group
        timeout, a fresh consumer (same instance id) joins again; whatever
        this process held is rebuilt on the assignment (a new member id).
        """
        m = self._m
        since = m.waiting_since
        if since is None or m.stop.is_set() or m.consumer is None:
            return False
        settings = m.settings
        limit = max(3 * settings.rebalance_timeout_ms, 2 * settings.session_timeout_ms)
        waited = asyncio.get_running_loop().time() - since
        if waited < limit / 1000:
            return False
        _log.warning(
            "group join has not completed; restarting the commands consumer",
            extra={"waited_s": round(waited, 1)},
        )
        m.metrics.rejoins += 1
        old, m.consumer = m.consumer, None
        m.generation += 1  # whatever it fetched is stale
        await stop_client(old, seconds=settings.stop_timeout)
        m.waiting_since = None
        await self.join()
        return True

    async def _bridge_once(self) -> None:
        """Read the kept runners' partitions without the group, one fetch.

        During a rebalance a group-less consumer reads on from each runner's
        :attr:`~PartitionRunner.next_offset` and dispatches as usual. If the
        partition stays, the group consumer is sought to where the runner got
        to (records read twice are skipped by offset); if it moved, the new
        owner's fence voids whatever this process still tries to commit.
        """
        m = self._m
        poll_ms = m.settings.poll_timeout_ms
        positions = {
            p: r.next_offset
            for p, r in self._partitions.runners.items()
            if r.next_offset is not None and not r.broken
        }
        if not positions:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(poll_ms / 1000):
                    await m.assignment_done.wait()
            return
        bridge = await self._bridge_consumer()
        if bridge is None:
            await asyncio.sleep(poll_ms / 1000)
            return
        topic = m.settings.topics.commands
        generation = m.generation
        if self._bridge_generation != generation:
            self._bridge_generation = generation
            bridge.assign([TopicPartition(topic, p) for p in sorted(positions)])
            for partition, offset in positions.items():
                bridge.seek(TopicPartition(topic, partition), offset)
        try:
            async with asyncio.timeout(
                poll_ms / 1000 + m.clients.connection.request_timeout
            ):
                batch = await bridge.getmany(
                    timeout_ms=poll_ms, max_records=m.settings.max_poll_records
                )
        except (TimeoutError, KafkaError):
            self._bridge_generation = -1  # reassign and seek next time
            return
        if batch and not m.assignment_done.is_set():
            m.metrics.bridged += sum(len(records) for records in batch.values())
            await self._dispatch(batch, generation)

    async def _bridge_consumer(self) -> Any:
        if self._bridge is None:
            m = self._m
            consumer = m.clients.consumer(
                "actor-bridge",
                group_id=None,
                read_committed=True,
                auto_offset_reset="earliest",
                max_poll_records=m.settings.max_poll_records,
            )
            try:
                await m.clients.start(consumer, operation="start rebalance reader")
            except TransportError:
                return None
            self._bridge = consumer
            self._bridge_generation = -1
        return self._bridge

    async def _dispatch(self, batch: dict[Any, list[Any]], generation: int) -> None:
        for tp, records in batch.items():
            for record in records:
                if generation != self._m.generation:
                    return  # fetched before a rebalance: refetched after it
                runner = self._partitions.taking(tp.partition)
                if runner is None:
                    break
                await runner.dispatch(record)
