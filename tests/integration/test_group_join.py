"""Actors that join one group at the same moment settle on one assignment.

Three in-process services with static instance ids start together on a fresh
group, as a deployment's replicas do. They must share every commands partition
between them within a bound and stop rebalancing: a strategy list that makes a
member change its metadata in the middle of each join (aiokafka sends one
JoinGroup per configured strategy) keeps the group rebalancing forever, with no
partition ever owned.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

import pytest
from tests.support.eventually import assert_eventually
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    Models,
    apply_topic_set,
    clients_for,
    collect_garbage,
    collect_garbage_late,
    service_for,
    unique_prefix,
)

from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.clients import KafkaClients

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

PARTITIONS = 4
MEMBERS = 3


async def test_members_joining_together_share_every_partition_and_settle(
    kafka_bootstrap: str,
) -> None:
    prefix = unique_prefix("join")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=PARTITIONS)
    metrics = [ServiceMetrics() for _ in range(MEMBERS)]
    services = [
        service_for(
            kafka_bootstrap,
            topics,
            group_id=f"{prefix}actors",
            models=Models(),
            txn_prefix=prefix,
            metrics=metrics[i],
            instance_id=f"{prefix}member-{i}",
        )
        for i in range(MEMBERS)
    ]
    async with contextlib.AsyncExitStack() as stack:
        await asyncio.gather(*(stack.enter_async_context(s) for s in services))

        def shared_out() -> None:
            owned = sorted(p for m in metrics for p in m.partitions)
            assert owned == list(range(PARTITIONS)), owned
            assert all(s.ready for s in services)

        await assert_eventually(shared_out, timeout=60, message="partitions not shared")
        settled = [m.rebalances for m in metrics]
        await asyncio.sleep(3 * 1.0)  # three heartbeats: a storm would show here
        assert [m.rebalances for m in metrics] == settled
        # One rebalance per member joining, at most; a storm is dozens.
        assert max(settled) <= MEMBERS, settled


class _HeldReader:
    """A real reader consumer whose ``end_offsets`` on the loops topic waits.

    A takeover's state scan asks for the loops partition's end first, so
    holding that call holds the partition's opening where the test wants it.
    """

    def __init__(self, inner: Any, clients: _HeldClients) -> None:
        self._inner = inner
        self._clients = clients

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def end_offsets(self, partitions: list[Any]) -> Any:
        for tp in partitions:
            if tp.topic == self._clients.loops_topic:
                self._clients.waiting.add(tp.partition)
                await self._clients.release[tp.partition].wait()
        return await self._inner.end_offsets(partitions)


@dataclass(frozen=True, kw_only=True)
class _HeldClients(KafkaClients):
    """Clients whose state scans wait until the test releases their partition."""

    loops_topic: str = ""
    release: dict[int, asyncio.Event] = field(default_factory=dict, compare=False)
    waiting: set[int] = field(default_factory=set, compare=False)

    def consumer(self, role: str, *topics: str, **kwargs: Any) -> Any:
        inner = super().consumer(role, *topics, **kwargs)
        return _HeldReader(inner, self) if role == "reader" else inner


async def test_a_member_whose_partitions_move_while_it_opens_them_becomes_ready(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The first actor is still opening every partition when a second joins.

    Its kept partitions finish opening first, the moved ones after: it must
    then report ready (log line and ``/ready``) for what it kept. It used to
    wait for the moved partitions, which hand themselves over without a word,
    so it stayed "assigned, opening" for good in its log.
    """
    caplog.set_level(logging.INFO, logger="turnstream.kafka.actor.service")
    prefix = unique_prefix("move-open")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=PARTITIONS)
    held = _HeldClients(
        connection=clients_for(kafka_bootstrap).connection,
        client_id="turnstream-it",
        loops_topic=topics.loops,
        release={p: asyncio.Event() for p in range(PARTITIONS)},
    )
    first_metrics, second_metrics = ServiceMetrics(), ServiceMetrics()
    first = service_for(
        kafka_bootstrap,
        topics,
        group_id=f"{prefix}actors",
        models=Models(),
        txn_prefix=prefix,
        metrics=first_metrics,
        clients=held,
    )
    second = service_for(
        kafka_bootstrap,
        topics,
        group_id=f"{prefix}actors",
        models=Models(),
        txn_prefix=prefix,
        metrics=second_metrics,
    )
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(first)

        def all_held() -> None:
            assert held.waiting == set(range(PARTITIONS))

        await assert_eventually(all_held, timeout=60, message="opening not held")
        await stack.enter_async_context(second)

        def second_ready() -> None:
            assert second.ready
            assert second_metrics.partitions

        await assert_eventually(second_ready, timeout=60, message="second not ready")
        moved = set(second_metrics.partitions)
        kept = set(range(PARTITIONS)) - moved
        for partition in sorted(kept):
            held.release[partition].set()

        def kept_open() -> None:
            assert first_metrics.partitions == kept

        # The kept partitions finish opening first, the moved ones after.
        await assert_eventually(kept_open, timeout=30, message="kept not open")
        for partition in sorted(moved):
            held.release[partition].set()

        def first_ready() -> None:
            assert first_metrics.partitions == kept
            assert first.ready
            said = [r.getMessage() for r in caplog.records]
            ready = f"partitions ready: [{','.join(map(str, sorted(kept)))}]"
            assert ready in said, said[-5:]

        await assert_eventually(first_ready, timeout=30, message="first not ready")
