"""The composition root: settings in, a running loop-actor service out.

Owns :func:`build_service` (schemas and codec, the hosted agents and their
model clients, Kafka clients and the :class:`~turnstream.kafka.actor.service.
LoopActorService`) and :func:`run_service` (build, run until shutdown, close
what was built). The CLI's ``turnstream actor run`` and ``python -m
turnstream.loop_actor`` both call :func:`run_service`; a metrics exporter reads
``service.metrics`` (see :class:`~turnstream.kafka.actor.metrics.ServiceMetrics`).

Settings arrive as one typed object; nothing here reads the environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.actor.service import LoopActorService, ServiceSettings
from turnstream.kafka.actor.writer import WriterSettings
from turnstream.kafka.clients import KafkaClients
from turnstream.kafka.connection import KafkaConnection
from turnstream.kafka.topology import TopicNames
from turnstream.loop_actor.agents import hosted_agents
from turnstream.loop_actor.gc_policy import apply_gc_threshold
from turnstream.loop_actor.instance import claim_instance
from turnstream.loop_actor.settings import ActorSettings
from turnstream.models import model_from_spec
from turnstream.runtime.agent import Agent, AgentHost
from turnstream.runtime.model_client import ModelClient
from turnstream.runtime.tracing import TraceContexts, ratio_sampler
from turnstream.tracing import LiveTracer, otlp_sink
from turnstream.wire import Codec, SchemaSet, set_default_codec

if TYPE_CHECKING:
    from turnstream.tracing.otlp import OtlpSink

__all__ = ["COMMIT_TIMEOUT_MARGIN", "Built", "build_service", "run_service"]

_log = logging.getLogger("turnstream.loop_actor")

COMMIT_TIMEOUT_MARGIN = 15.0
"""Seconds the actor waits for a commit beyond the writer's commit deadline.

The writer always decides (committed or failed) before the actor gives up, so
an actor never mistakes a late commit for a failed one.
"""


@dataclass(frozen=True, slots=True)
class Built:
    """A service, its hosted agents and the model clients it built.

    ``models`` are closed by :func:`run_service` (an injected client is the
    caller's to close), and ``spans`` (the OTLP exporter, when tracing is on)
    flushed and closed.
    """

    service: LoopActorService
    host: AgentHost
    codec: Codec
    models: tuple[ModelClient, ...] = ()
    spans: OtlpSink | None = None


def _provider(spec: str) -> str:
    provider, sep, _ = spec.strip().partition(":")
    return provider.strip().lower() if sep else spec.strip().lower()


def build_service(
    settings: ActorSettings,
    *,
    metrics: ServiceMetrics | None = None,
    model: ModelClient | None = None,
    agents: Sequence[Agent] | None = None,
    group_instance_id: str | None = None,
) -> Built:
    """Wire the service from its settings (nothing is started).

    Args:
        settings: the deployable's settings.
        group_instance_id: the static member id (``None``: dynamic); see
            :func:`~turnstream.loop_actor.instance.claim_instance`.
        metrics: where counters go (a fresh object by default).
        model: a model client every agent uses instead of the one its
            ``model`` names (tests inject scripted models here).
        agents: the agents to host instead of those ``settings.agents`` names
            (or the built-in one).

    Raises:
        ConfigError: schemas, agents, model or tool settings are invalid.
    """
    codec = Codec(SchemaSet.load(settings.schema_dir))
    set_default_codec(codec)
    hosted = tuple(agents) if agents is not None else hosted_agents(settings)
    built_models: list[ModelClient] = []
    clients: dict[str, ModelClient] = {}

    def client_for(agent: Agent) -> ModelClient:
        if model is not None:
            return model
        if agent.client is not None:
            return agent.client  # the user's own (its owner closes it)
        if agent.model not in clients:
            key = settings.provider_keys.get(_provider(agent.model))
            key = key or settings.model_api_key
            clients[agent.model] = model_from_spec(
                agent.model,
                base_url=settings.model_base_url,
                api_key=key.reveal() if key else None,
                chunk_delay=settings.chunk_delay,
            )
            built_models.append(clients[agent.model])
        return clients[agent.model]

    host = AgentHost(
        hosted,
        client_for,
        commit_timeout=settings.commit_deadline + COMMIT_TIMEOUT_MARGIN,
    )
    kafka_clients = KafkaClients(
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
        leave_on_stop=settings.leave_on_stop,
        session_timeout_ms=settings.session_timeout_ms,
        heartbeat_interval_ms=settings.heartbeat_interval_ms,
        rebalance_timeout_ms=settings.rebalance_timeout_ms,
        drain_timeout=settings.drain_timeout,
        writer=WriterSettings(commit_deadline=settings.commit_deadline),
        max_resident_loops=settings.max_resident_loops,
    )
    tracing = settings.tracing
    traces = TraceContexts(
        ratio_sampler(tracing.sample_ratio) if tracing.enabled else None
    )
    spans = otlp_sink(tracing) if tracing.enabled else None
    service = LoopActorService(
        clients=kafka_clients,
        settings=service_settings,
        codec=codec,
        setup_for=host.setup_for,
        metrics=metrics,
        traces=traces,
        tracer=None
        if spans is None
        else LiveTracer(spans, traces, capture_content=tracing.capture_content),
    )
    return Built(
        service=service,
        host=host,
        codec=codec,
        models=tuple(built_models),
        spans=spans,
    )


@contextlib.asynccontextmanager
async def _closing(models: Sequence[ModelClient]) -> AsyncIterator[None]:
    try:
        yield
    finally:
        for model in models:
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
    thresholds = apply_gc_threshold(settings.gc_threshold)
    _log.info("gc thresholds %s", thresholds)
    claim = claim_instance(settings.instance_id, settings.group_id)
    try:
        built = build_service(
            settings, metrics=metrics, group_instance_id=claim.instance_id
        )
        for warning in built.host.warnings():
            _log.warning(warning)
        if on_start is not None:
            on_start(built.service)
        _log.info(
            "loop actor starting: group %s, agents %s, instance %s, codec %s",
            settings.group_id,
            ", ".join(f"{a.name} ({a.model_name})" for a in built.host.agents),
            claim.instance_id or "dynamic",
            built.codec.path,
        )
        tracing = settings.tracing
        if tracing.enabled:
            _log.info(
                "traces to %s, sampled at %g", tracing.traces_url, tracing.sample_ratio
            )
        # The tools' resources (MCP servers) start before the first loop and
        # close after the last one has stopped.
        try:
            async with _closing(built.models), built.host.tools_open():
                await built.service.run()
        finally:
            if built.spans is not None:
                # Off the event loop: the export is a blocking HTTP call.
                await asyncio.to_thread(built.spans.close)
    finally:
        claim.release()
    _log.info("loop actor stopped")
