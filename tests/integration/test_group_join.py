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

import pytest
from tests.support.eventually import assert_eventually
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    Models,
    apply_topic_set,
    collect_garbage,
    collect_garbage_late,
    service_for,
    unique_prefix,
)

from turnstream.kafka.actor.metrics import ServiceMetrics

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
