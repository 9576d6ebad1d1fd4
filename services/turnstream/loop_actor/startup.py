"""The loop actor's start-up, in one place: settings in, a running service out.

Owns :func:`run`, every step between parsed settings and a stopped service:
the hosted agents checked (a bad ``--agent`` is a usage error, before Kafka),
logging configured, the broker probed, the topic set applied
(``--ensure-topics``) and the settings turns rely on verified
(:func:`~turnstream.kafka.admin.topic_check.verify_topics`), ``/metrics`` and
``/ready`` served, and :func:`~turnstream.loop_actor.app.run_service` run
until SIGTERM or Ctrl-C, which drain it in order. ``turnstream actor run``
parses the settings and calls it. Must not import aiokafka.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path

from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.actor.service import LoopActorService
from turnstream.kafka.admin.probe import check_broker
from turnstream.kafka.admin.topic_check import verify_topics
from turnstream.kafka.admin.topics import apply_topics, load_topic_set, resolve_topics
from turnstream.kafka.connection import KafkaConnection
from turnstream.kafka.topology import TopicNames
from turnstream.loop_actor.agents import hosted_agents
from turnstream.loop_actor.app import run_service
from turnstream.loop_actor.metrics_http import serve_health
from turnstream.loop_actor.settings import ActorSettings
from turnstream.observability import configure_logging
from turnstream.observability.logs import parse_log_level
from turnstream.observability.signals import stop_on_signals

__all__ = ["run"]

_log = logging.getLogger("turnstream.loop_actor.startup")


def run(settings: ActorSettings, *, topic_set: Path) -> None:
    """Start the loop actor and run it until SIGTERM or Ctrl-C.

    Args:
        settings: the parsed settings.
        topic_set: the declared topic set, verified at every start (and
            applied instead when ``settings.ensure_topics`` names another).

    Raises:
        ConfigError: an agent that does not load, or topics that would lose or
            refuse data.
        TransportError: Kafka unreachable, or failing in a way the service
            cannot survive.
    """
    if settings.agents and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # a user's agent package, like uvicorn's
    hosted_agents(settings)
    configure_logging(settings.log_format, level=parse_log_level(settings.log_level))
    asyncio.run(_run(settings, topic_set))


def _connection(settings: ActorSettings) -> KafkaConnection:
    return KafkaConnection(
        bootstrap=settings.bootstrap,
        request_timeout=settings.request_timeout,
        connect_timeout=settings.request_timeout,
    )


async def _ensure_topics(settings: ActorSettings, topic_set: Path) -> None:
    """Apply ``ensure_topics`` if given; always verify the settings turns rely on."""
    desired = resolve_topics(
        load_topic_set(settings.ensure_topics or topic_set),
        partitions=settings.partitions,
        replication_factor=settings.replication_factor,
        prefix=settings.topic_prefix,
        suffix=settings.topic_suffix,
    )
    if settings.ensure_topics is not None:
        await apply_topics(
            _connection(settings),
            desired,
            security=settings.security,
            raise_on_mismatch=True,
        )
    await verify_topics(
        _connection(settings),
        desired,
        TopicNames.with_affixes(
            prefix=settings.topic_prefix, suffix=settings.topic_suffix
        ),
        security=settings.security,
    )


async def _run(settings: ActorSettings, topic_set: Path) -> None:
    await check_broker(_connection(settings), security=settings.security)
    await _ensure_topics(settings, topic_set)
    metrics = ServiceMetrics()
    services: list[LoopActorService] = []
    stopping = False

    def stop() -> None:
        nonlocal stopping
        stopping = True
        for service in services:
            service.request_shutdown()

    def on_start(service: LoopActorService) -> None:
        services.append(service)
        if stopping:
            service.request_shutdown()

    endpoint = settings.metrics
    async with serve_health(metrics, host=endpoint.host, port=endpoint.port) as server:
        _log.info(
            "loop actor starting",
            extra={
                "group_id": settings.group_id,
                "model": settings.model,
                "bootstrap": settings.bootstrap,
                "metrics_url": f"{server.url}/metrics" if server else "off",
            },
        )
        with stop_on_signals(stop):
            await run_service(settings, on_start=on_start, metrics=metrics)
