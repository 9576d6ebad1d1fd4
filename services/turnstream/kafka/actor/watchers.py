"""The loop-actor service's watchers: consumer lag and broker reachability.

Owns :func:`watch_lag` (each assigned partition's lag, as a metric) and
:func:`watch_health` (an outage and its recovery logged once each, and
exposed as metrics). Both run in the service's task group until cancelled and
only read the service's commands consumer: they never fetch, seek or commit.
Part of ``turnstream.kafka`` (the only aiokafka importer).
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka.errors import KafkaError

from turnstream.kafka.actor.membership import SERVICE_LOG, Membership
from turnstream.kafka.clients import reachable

__all__ = ["watch_health", "watch_lag"]

_log = logging.getLogger(SERVICE_LOG)


async def watch_lag(membership: Membership) -> None:
    """Update each assigned partition's consumer lag every ``lag_interval``."""
    m = membership
    while True:
        await asyncio.sleep(m.settings.lag_interval)
        consumer = m.consumer
        if consumer is None:
            continue
        for tp in list(consumer.assignment()):
            high = consumer.highwater(tp)
            if high is None:
                continue
            try:
                async with asyncio.timeout(m.clients.connection.request_timeout):
                    position = await consumer.position(tp)
            except (TimeoutError, KafkaError):
                continue
            m.metrics.consumer_lag[tp.partition] = max(int(high) - int(position), 0)


async def watch_health(membership: Membership) -> None:
    """Log an outage and the recovery once each; expose them as metrics."""
    m = membership
    metrics = m.metrics
    since = 0.0
    while True:
        await asyncio.sleep(m.settings.health_interval)
        consumer = m.consumer
        if consumer is None:
            continue
        up = await reachable(consumer, seconds=m.clients.connection.request_timeout)
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
