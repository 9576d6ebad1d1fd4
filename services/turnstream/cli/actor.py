"""``turnstream actor run``: the loop-actor service, from flags and environment.

Owns the ``actor`` command group and :func:`actor_settings`, which resolves the
flags over the environment once into the deployable's
:class:`~turnstream.loop_actor.settings.ActorSettings` (Kafka security and
secrets come from the environment only, see ``python -m turnstream.loop_actor
--help``; the model's API key from ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``).
``run`` loads the agents to host (``--agent package.module:attribute``, from the
current directory; the built-in ``turnstream`` agent without it), probes Kafka,
optionally applies ``infra/topics.yaml``, verifies the topic settings turns
rely on (:func:`~turnstream.kafka.admin.topic_check.verify_topics`), serves
``/metrics`` and ``/ready`` on ``--metrics-port`` (loopback by default; 0 turns
it off), and runs :func:`~turnstream.loop_actor.run_service` until SIGTERM or
Ctrl-C, which stop it in order. Several processes with the same ``--group``
share the commands partitions. Must not import aiokafka.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from turnstream.cli.failures import exit_on_errors
from turnstream.cli.kafka_options import TopicAffixes, kafka_options
from turnstream.cli.options import (
    BaseUrlOption,
    ChunkDelayOption,
    GroupOption,
    LogFormatOption,
    LogLevelOption,
    ModelOption,
)
from turnstream.cli.settings import (
    DEFAULT_GROUP_ID,
    DEFAULT_METRICS_PORT,
    ENV,
    ExitCode,
    KafkaTarget,
    MetricsEndpoint,
    ModelChoice,
    actor_settings,
    parse_log_format,
    parse_log_level,
)
from turnstream.cli.signals import stop_on_signals
from turnstream.cli.topics import (
    PartitionsOption,
    ReplicationFactorOption,
    default_topic_set,
)
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.actor.service import LoopActorService
from turnstream.kafka.admin.probe import check_broker
from turnstream.kafka.admin.topic_check import verify_topics
from turnstream.kafka.admin.topics import apply_topics, load_topic_set, resolve_topics
from turnstream.kafka.topology import TopicNames
from turnstream.loop_actor import ActorSettings, run_service
from turnstream.loop_actor.agents import hosted_agents
from turnstream.loop_actor.metrics_http import serve_health
from turnstream.loop_actor.settings import ENV as ACTOR_ENV
from turnstream.observability import configure_logging

__all__ = ["app"]

_log = logging.getLogger("turnstream.cli.actor")


def _tuning(flag: str, setting: str, text: str) -> Any:
    return typer.Option(
        flag,
        envvar=ACTOR_ENV[setting],
        help=text,
        show_default=False,
        rich_help_panel="Service tuning",
    )


app = typer.Typer(
    # Plain click help: it wraps long option and variable names instead of
    # cutting them at 80 columns, as rich panels do.
    rich_markup_mode=None,
    help="Run the loop-actor service (the process that runs turns).",
    no_args_is_help=True,
)


async def _ensure_topics(
    target: KafkaTarget,
    topics_file: str | None,
    *,
    partitions: int | None,
    replication_factor: int | None,
) -> None:
    """Apply ``topics_file`` if given; always verify the settings turns rely on."""
    desired = resolve_topics(
        load_topic_set(Path(topics_file) if topics_file else default_topic_set()),
        partitions=partitions,
        replication_factor=replication_factor,
        prefix=target.prefix,
        suffix=target.suffix,
    )
    if topics_file is not None:
        await apply_topics(
            target.connection,
            desired,
            security=target.security,
            raise_on_mismatch=True,
        )
    await verify_topics(
        target.connection,
        desired,
        TopicNames.with_affixes(prefix=target.prefix, suffix=target.suffix),
        security=target.security,
    )


async def _run(
    settings: ActorSettings,
    target: KafkaTarget,
    endpoint: MetricsEndpoint,
    topics_file: str | None,
    *,
    partitions: int | None = None,
    replication_factor: int | None = None,
) -> None:
    await check_broker(target.connection, security=target.security)
    await _ensure_topics(
        target,
        topics_file,
        partitions=partitions,
        replication_factor=replication_factor,
    )
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


@app.command()
@kafka_options(timeout=15.0, topics=TopicAffixes.FLAGS)
def run(
    *,
    target: KafkaTarget,
    group: GroupOption = DEFAULT_GROUP_ID,
    model: ModelOption = "demo",
    base_url: BaseUrlOption = None,
    chunk_delay: ChunkDelayOption = 0.0,
    tools: Annotated[
        str,
        typer.Option(
            "--tools",
            envvar=ENV.TOOLS,
            help="Tool set offered to the model: demo (add, word_count) or none.",
        ),
    ] = "demo",
    system_prompt: Annotated[
        str | None,
        typer.Option(
            "--system-prompt",
            envvar=ENV.SYSTEM_PROMPT,
            help="System prompt sent with every model request.",
            show_default=False,
        ),
    ] = None,
    agent: Annotated[
        list[str] | None,
        typer.Option(
            "--agent",
            help="An agent to host, as package.module:attribute (an Agent, or a "
            "function returning one), importable from the current directory; "
            f"repeat it to host several (or set {ENV.AGENTS}, comma-separated). "
            "Without it the service hosts the built-in agent 'turnstream' made of "
            "--model, --tools and --system-prompt.",
            show_default=False,
        ),
    ] = None,
    metrics_port: Annotated[
        int,
        typer.Option(
            "--metrics-port",
            envvar=ENV.METRICS_PORT,
            min=0,
            max=65535,
            help="Port of /metrics (Prometheus) and /ready; 0 turns them off. Give "
            "each actor on one host its own port.",
        ),
    ] = DEFAULT_METRICS_PORT,
    metrics_host: Annotated[
        str,
        typer.Option(
            "--metrics-host",
            envvar=ENV.METRICS_HOST,
            help="Address /metrics and /ready bind to (0.0.0.0 to expose them).",
        ),
    ] = "127.0.0.1",
    topics_file: Annotated[
        str | None,
        typer.Option(
            "--ensure-topics",
            help="Apply this topic set (e.g. infra/topics.yaml) before starting; "
            "exits 1 if an existing topic differs from it.",
            show_default=False,
        ),
    ] = None,
    partitions: PartitionsOption = None,
    replication_factor: ReplicationFactorOption = None,
    log_format: LogFormatOption = "json",
    log_level: LogLevelOption = "INFO",
    txn_prefix: Annotated[
        str | None, _tuning("--txn-prefix", "txn_prefix", "Transactional-id prefix.")
    ] = None,
    session_timeout_ms: Annotated[
        str | None,
        _tuning(
            "--session-timeout-ms",
            "session_timeout_ms",
            "Consumer-group session timeout in ms (>= 6000, default 8000): how "
            "long a crashed actor's partitions wait before another actor takes "
            "them, unless its replacement (same instance id) comes first.",
        ),
    ] = None,
    heartbeat_interval_ms: Annotated[
        str | None,
        _tuning(
            "--heartbeat-interval-ms",
            "heartbeat_interval_ms",
            "Consumer heartbeat in ms (default 1000; at most a third of the "
            "session timeout).",
        ),
    ] = None,
    rebalance_timeout_ms: Annotated[
        str | None,
        _tuning(
            "--rebalance-timeout-ms",
            "rebalance_timeout_ms",
            "How long a rebalance waits for members to rejoin, in ms (default 10000).",
        ),
    ] = None,
    drain_timeout: Annotated[
        str | None,
        _tuning(
            "--drain-timeout",
            "drain_timeout",
            "Seconds running turns may take to finish on SIGTERM before they are "
            "interrupted and the partitions handed over (default 30).",
        ),
    ] = None,
    instance_id: Annotated[
        str | None,
        _tuning(
            "--instance-id",
            "instance_id",
            "Static group membership: auto (default: <host>-<slot>, the lowest "
            "free local slot, so a restarted actor takes its partitions back "
            "without a rebalance), none (dynamic), or an explicit unique id.",
        ),
    ] = None,
    leave_on_stop: Annotated[
        bool,
        typer.Option(
            "--leave-on-stop",
            envvar=ACTOR_ENV["leave_on_stop"],
            help="This instance is going away for good (a scale-in, not a restart "
            "in place): on SIGTERM it leaves the group once its partitions are "
            "handed over, so the other actors take them at once instead of "
            "after the session timeout.",
            show_default=False,
            rich_help_panel="Service tuning",
        ),
    ] = False,
    commit_deadline: Annotated[
        str | None,
        _tuning(
            "--commit-deadline",
            "commit_deadline",
            "Seconds one commit may retry before it fails (default 30).",
        ),
    ] = None,
    gc_threshold: Annotated[
        str | None,
        _tuning(
            "--gc-threshold",
            "gc_threshold",
            "The garbage collector's first-generation threshold for this "
            "process (default 10000; 0 keeps CPython's 700).",
        ),
    ] = None,
    max_resident_loops: Annotated[
        str | None,
        _tuning(
            "--max-resident-loops",
            "max_resident_loops",
            "Loops kept live in memory; beyond it the least recently used idle "
            "ones are passivated and restored on their next command "
            "(default 10000).",
        ),
    ] = None,
    schema_dir: Annotated[
        str | None,
        _tuning("--schema-dir", "schema_dir", "Avro schema directory."),
    ] = None,
) -> None:
    """Run loop actors until SIGTERM or Ctrl-C (then stop in order, exit 0).

    Run several (same --group, distinct --metrics-port) to share the load. Every
    start verifies the topic settings turns rely on (journal not compacted and
    kept forever, state compacted, size limits and min ISR at least those of
    infra/topics.yaml). Exit codes: 0 clean stop, 1 failure or topics that
    differ from --ensure-topics, 2 bad settings, missing topics or topic
    settings that would lose or refuse data, 3 Kafka unreachable, 4 login
    refused, 5 TLS failed, 6 ACL denied.
    """
    with exit_on_errors():
        fmt = parse_log_format(log_format)
        level = parse_log_level(log_level)
        choice = ModelChoice.parse(
            model, base_url=base_url, env=os.environ, chunk_delay=chunk_delay
        )
        endpoint = MetricsEndpoint(host=metrics_host, port=metrics_port)
        settings = actor_settings(
            target=target,
            group=group,
            model=choice,
            tools=tools,
            system_prompt=system_prompt,
            agents=agent or (),
            env=os.environ,
            tuning={
                "txn_prefix": txn_prefix,
                "session_timeout_ms": session_timeout_ms,
                "heartbeat_interval_ms": heartbeat_interval_ms,
                "rebalance_timeout_ms": rebalance_timeout_ms,
                "drain_timeout": drain_timeout,
                "instance_id": instance_id,
                "leave_on_stop": "true" if leave_on_stop else None,
                "commit_deadline": commit_deadline,
                "gc_threshold": gc_threshold,
                "max_resident_loops": max_resident_loops,
                "schema_dir": schema_dir,
            },
        )
        if settings.agents and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # a user's agent package, like uvicorn's
        hosted_agents(settings)  # a bad --agent is a usage error, before Kafka
    configure_logging(fmt, level=level)
    with exit_on_errors(target.bootstrap):
        asyncio.run(
            _run(
                settings,
                target,
                endpoint,
                topics_file,
                partitions=partitions,
                replication_factor=replication_factor,
            )
        )
    raise typer.Exit(int(ExitCode.OK))
