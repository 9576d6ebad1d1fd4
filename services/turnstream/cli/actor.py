"""``turnstream actor run``: the loop-actor service, from flags and environment.

Owns the ``actor`` command group and :func:`actor_settings`, which resolves the
flags over the environment once into the deployable's
:class:`~turnstream.loop_actor.settings.ActorSettings` (Kafka security and
secrets come from the environment only, see ``python -m turnstream.loop_actor
--help``; the model's API key from ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``).
``run`` probes Kafka, optionally applies ``infra/topics.yaml``, serves
``/metrics`` and ``/ready`` on ``--metrics-port`` (loopback by default; 0 turns
it off), and runs :func:`~turnstream.loop_actor.run_service` until SIGTERM or
Ctrl-C, which stop it in order. Several processes with the same ``--group``
share the commands partitions. Must not import aiokafka.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import typer

from turnstream.cli.__main__ import stop_on_signals
from turnstream.cli.chat import BootstrapOption
from turnstream.cli.failures import exit_on_errors
from turnstream.cli.security import (
    SaslMechanismOption,
    SaslUsernameOption,
    SecurityProtocolOption,
    SslCafileOption,
    SslCertfileOption,
    SslKeyfileOption,
    security_flags,
)
from turnstream.cli.settings import (
    DEFAULT_GROUP_ID,
    DEFAULT_METRICS_PORT,
    ENV,
    ExitCode,
    KafkaTarget,
    MetricsEndpoint,
    ModelChoice,
    parse_log_format,
    parse_log_level,
)
from turnstream.cli.topics import PartitionsOption, ReplicationFactorOption
from turnstream.kafka.admin import check_broker
from turnstream.kafka.metrics import ServiceMetrics
from turnstream.kafka.security import Secret
from turnstream.kafka.service import LoopActorService
from turnstream.kafka.topics import apply_topics, load_topic_set, resolve_topics
from turnstream.loop_actor import ActorSettings, parse_settings, run_service
from turnstream.loop_actor.metrics_http import serve_health
from turnstream.observability import configure_logging

__all__ = [
    "BaseUrlOption",
    "ChunkDelayOption",
    "GroupOption",
    "LogFormatOption",
    "LogLevelOption",
    "ModelOption",
    "actor_settings",
    "app",
]

_log = logging.getLogger("turnstream.cli.actor")

app = typer.Typer(
    help="Run the loop-actor service (the process that runs turns).",
    no_args_is_help=True,
)

ModelOption = Annotated[
    str,
    typer.Option(
        "--model",
        "-m",
        envvar=ENV.MODEL,
        help="demo | openai:NAME | anthropic:NAME. The API key is read from "
        "OPENAI_API_KEY / ANTHROPIC_API_KEY (never a flag).",
    ),
]
BaseUrlOption = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        envvar=ENV.BASE_URL,
        help="Model API root, e.g. http://127.0.0.1:11434/v1 for a local "
        "OpenAI-compatible server (default: the provider's).",
        show_default=False,
    ),
]
ChunkDelayOption = Annotated[
    float,
    typer.Option(
        "--chunk-delay",
        envvar=ENV.CHUNK_DELAY,
        min=0.0,
        help="Seconds between the demo model's streamed chunks.",
    ),
]
GroupOption = Annotated[
    str,
    typer.Option(
        "--group",
        "-g",
        envvar=ENV.GROUP_ID,
        help="Consumer group; actors in one group share the commands partitions.",
    ),
]
LogFormatOption = Annotated[
    str,
    typer.Option(
        "--log-format",
        envvar=ENV.LOG_FORMAT,
        help="json (one object per line) or text. Logs go to stderr and never "
        "contain message contents.",
    ),
]
LogLevelOption = Annotated[
    str,
    typer.Option(
        "--log-level",
        envvar=ENV.LOG_LEVEL,
        help="DEBUG, INFO, WARNING or ERROR.",
    ),
]


def actor_settings(
    *,
    target: KafkaTarget,
    group: str,
    model: ModelChoice,
    tools: str,
    system_prompt: str | None,
    env: Mapping[str, str],
) -> ActorSettings:
    """The deployable's settings: the environment's, with these flags applied.

    Kafka security comes from ``target`` (flags, then ``TURNSTREAM_KAFKA_*``), so
    the actor's clients reach the same cluster the command's own checks did.

    Raises:
        ConfigError: an invalid setting (named in the message).
    """
    base = parse_settings([], {**env, "KAFKA_BOOTSTRAP_SERVERS": target.bootstrap})
    api_key = Secret(model.api_key) if model.api_key is not None else base.model_api_key
    return dataclasses.replace(
        base,
        bootstrap=target.bootstrap,
        group_id=group,
        topic_prefix=target.prefix,
        topic_suffix=target.suffix,
        model=model.spec,
        model_base_url=model.base_url,
        model_api_key=api_key,
        chunk_delay=model.chunk_delay,
        tools=tools,
        system_prompt=system_prompt
        if system_prompt is not None
        else base.system_prompt,
        request_timeout=target.connection.request_timeout,
        security=target.security,
    )


async def _ensure_topics(
    target: KafkaTarget,
    topics_file: str,
    *,
    partitions: int | None,
    replication_factor: int | None,
) -> None:
    desired = resolve_topics(
        load_topic_set(Path(topics_file)),
        partitions=partitions,
        replication_factor=replication_factor,
        prefix=target.prefix,
        suffix=target.suffix,
    )
    await apply_topics(
        target.connection, desired, security=target.security, raise_on_mismatch=True
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
    if topics_file is not None:
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
def run(
    *,
    bootstrap: BootstrapOption = None,
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
    topic_prefix: Annotated[
        str | None,
        typer.Option(
            "--topic-prefix",
            envvar=ENV.TOPIC_PREFIX,
            help="Prefix of every topic name (an isolated topic set).",
            show_default=False,
        ),
    ] = None,
    topic_suffix: Annotated[
        str | None,
        typer.Option(
            "--topic-suffix",
            envvar=ENV.TOPIC_SUFFIX,
            help="Suffix of every topic name.",
            show_default=False,
        ),
    ] = None,
    log_format: LogFormatOption = "json",
    log_level: LogLevelOption = "INFO",
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            min=0.1,
            envvar=ENV.KAFKA_TIMEOUT,
            help="Seconds allowed for each Kafka call.",
        ),
    ] = 15.0,
    security_protocol: SecurityProtocolOption = None,
    sasl_mechanism: SaslMechanismOption = None,
    sasl_username: SaslUsernameOption = None,
    ssl_cafile: SslCafileOption = None,
    ssl_certfile: SslCertfileOption = None,
    ssl_keyfile: SslKeyfileOption = None,
) -> None:
    """Run loop actors until SIGTERM or Ctrl-C (then stop in order, exit 0).

    Run several (same --group, distinct --metrics-port) to share the load. Exit
    codes: 0 clean stop, 1 failure or topics that differ from --ensure-topics, 2 bad
    settings or missing topics, 3 Kafka unreachable.
    """
    with exit_on_errors():
        fmt = parse_log_format(log_format)
        level = parse_log_level(log_level)
        target = KafkaTarget.resolve(
            bootstrap=bootstrap,
            env=os.environ,
            timeout=timeout,
            prefix=topic_prefix,
            suffix=topic_suffix,
            security=security_flags(
                security_protocol=security_protocol,
                sasl_mechanism=sasl_mechanism,
                sasl_username=sasl_username,
                ssl_cafile=ssl_cafile,
                ssl_certfile=ssl_certfile,
                ssl_keyfile=ssl_keyfile,
            ),
        )
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
            env=os.environ,
        )
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
