"""The composition root: settings in, a running loop-actor service out.

Owns :func:`build_service` (schemas and codec, model client, tools, loop
configuration, Kafka clients and the :class:`~turnstream.kafka.actor.service.
LoopActorService`) and :func:`run_service` (build, run until shutdown, close
what was built). The CLI's ``turnstream actor run`` and ``python -m
turnstream.loop_actor`` both call :func:`run_service`; a metrics exporter reads
``service.metrics`` (see :class:`~turnstream.kafka.actor.metrics.ServiceMetrics`).

Settings arrive as one typed object; nothing here reads the environment.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from turnstream.ids import LoopId
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.actor.service import LoopActorService, ServiceSettings
from turnstream.kafka.actor.writer import WriterSettings
from turnstream.kafka.clients import KafkaClients
from turnstream.kafka.connection import KafkaConnection
from turnstream.kafka.topology import TopicNames
from turnstream.loop_actor.instance import claim_instance
from turnstream.loop_actor.settings import ActorSettings
from turnstream.loop_actor.tools import tool_set
from turnstream.models import model_from_spec
from turnstream.runtime.config import LoopConfig
from turnstream.runtime.model_client import ModelClient
from turnstream.runtime.session import LoopSetup
from turnstream.wire import Codec, SchemaSet, set_default_codec

__all__ = ["COMMIT_TIMEOUT_MARGIN", "Built", "build_service", "run_service"]

_log = logging.getLogger("turnstream.loop_actor")

COMMIT_TIMEOUT_MARGIN = 15.0
"""Seconds the actor waits for a commit beyond the writer's commit deadline.

The writer always decides (committed or failed) before the actor gives up, so
an actor never mistakes a late commit for a failed one.
"""


@dataclass(frozen=True, slots=True)
class Built:
    """A service and the model client it uses (closed by :func:`run_service`)."""

    service: LoopActorService
    model: ModelClient


def _model_name(spec: str) -> str:
    _, _, name = spec.partition(":")
    return name.strip() or spec.strip()


def build_service(
    settings: ActorSettings,
    *,
    metrics: ServiceMetrics | None = None,
    model: ModelClient | None = None,
    group_instance_id: str | None = None,
) -> Built:
    """Wire the service from its settings (nothing is started).

    Args:
        settings: the deployable's settings.
        group_instance_id: the static member id (``None``: dynamic); see
            :func:`~turnstream.loop_actor.instance.claim_instance`.
        metrics: where counters go (a fresh object by default).
        model: a model client to use instead of the one ``settings.model``
            names (tests inject scripted models here).

    Raises:
        ConfigError: schemas, model or tool settings are invalid.
    """
    codec = Codec(SchemaSet.load(settings.schema_dir))
    set_default_codec(codec)
    client = model or model_from_spec(
        settings.model,
        base_url=settings.model_base_url,
        api_key=settings.model_api_key.reveal() if settings.model_api_key else None,
        chunk_delay=settings.chunk_delay,
    )
    config = LoopConfig(
        model=_model_name(settings.model),
        system_prompt=settings.system_prompt,
        tools=tool_set(settings.tools),
        commit_timeout=settings.commit_deadline + COMMIT_TIMEOUT_MARGIN,
        agent_name="turnstream",
    )
    setup = LoopSetup(config=config, model=client)
    clients = KafkaClients(
        connection=KafkaConnection(
            bootstrap=settings.bootstrap,
            request_timeout=settings.request_timeout,
            connect_timeout=settings.request_timeout,
        ),
        security=settings.security,
        client_id="turnstream-actor",
    )
    service_settings = ServiceSettings(
        group_id=settings.group_id,
        topics=TopicNames.with_affixes(
            prefix=settings.topic_prefix, suffix=settings.topic_suffix
        ),
        txn_prefix=settings.txn_prefix,
        group_instance_id=group_instance_id,
        session_timeout_ms=settings.session_timeout_ms,
        heartbeat_interval_ms=settings.heartbeat_interval_ms,
        rebalance_timeout_ms=settings.rebalance_timeout_ms,
        drain_timeout=settings.drain_timeout,
        writer=WriterSettings(commit_deadline=settings.commit_deadline),
    )

    def setup_for(_loop_id: LoopId) -> LoopSetup:
        return setup

    service = LoopActorService(
        clients=clients,
        settings=service_settings,
        codec=codec,
        setup_for=setup_for,
        metrics=metrics,
    )
    return Built(service=service, model=client)


@contextlib.asynccontextmanager
async def _closing(model: ModelClient) -> AsyncIterator[None]:
    try:
        yield
    finally:
        close = getattr(model, "aclose", None)
        if close is not None:
            await close()


async def run_service(
    settings: ActorSettings,
    *,
    on_start: Callable[[LoopActorService], None] | None = None,
    metrics: ServiceMetrics | None = None,
) -> None:
    """Build the service and run it until shutdown is requested.

    Args:
        settings: the deployable's settings.
        on_start: called with the service before it runs (install signal
            handlers or an exporter here; ``service.request_shutdown()`` stops
            it).
        metrics: where counters go.

    Raises:
        ConfigError: invalid settings or topics.
        TransportError: Kafka failed in a way the service cannot survive.
    """
    claim = claim_instance(settings.instance_id, settings.group_id)
    try:
        built = build_service(
            settings, metrics=metrics, group_instance_id=claim.instance_id
        )
        if on_start is not None:
            on_start(built.service)
        _log.info(
            "loop actor starting: group %s, model %s, instance %s",
            settings.group_id,
            _model_name(settings.model),
            claim.instance_id or "dynamic",
        )
        async with _closing(built.model):
            await built.service.run()
    finally:
        claim.release()
    _log.info("loop actor stopped")
