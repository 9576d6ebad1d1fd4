"""``turnstream gateway``: serve the HTTP/SSE gateway to the loops.

Owns the ``gateway`` command: reads the token file (``TENANT TOKEN`` lines),
checks that Kafka answers, then serves :mod:`turnstream.gateway` (starlette and
uvicorn, from the ``gateway`` extra) until SIGINT/SIGTERM. The endpoints, the
error kinds and the event-stream format are in :mod:`turnstream.gateway.app`
and docs/client.md. Must not import aiokafka, starlette or uvicorn itself.
"""

from __future__ import annotations

import asyncio
import importlib
from pathlib import Path
from typing import Annotated, Any

import typer

from turnstream.cli._common import err_console
from turnstream.cli.failures import exit_on_errors
from turnstream.cli.kafka_options import kafka_options
from turnstream.cli.settings import ExitCode, KafkaTarget
from turnstream.errors import ConfigError
from turnstream.kafka.admin.probe import check_broker

__all__ = ["gateway"]


def _gateway_module() -> Any:
    try:
        return importlib.import_module("turnstream.gateway")
    except ImportError as exc:
        raise ConfigError(
            "gateway",
            "needs the gateway extra: pip install 'turnstream[gateway]' "
            f"({exc.name} is missing)",
        ) from exc


async def _serve(
    target: KafkaTarget,
    tokens: Path,
    *,
    host: str,
    port: int,
    max_body: int,
    stream_queue: int,
    keepalive: float,
) -> None:
    module = _gateway_module()
    settings = module.GatewaySettings(
        tenants=module.Tenants.load(tokens),
        max_body_bytes=max_body,
        keepalive=keepalive,
    )
    await check_broker(target.connection, security=target.security)

    async def connect() -> Any:
        return await module.Backend.connect(
            target.clients("turnstream-gateway"),
            target.topics,
            stream_queue=stream_queue,
        )

    err_console.print(f"[dim]gateway on http://{host}:{port}[/]", highlight=False)
    await module.serve(settings, connect, host=host, port=port)


@kafka_options()
def gateway(
    *,
    target: KafkaTarget,
    tokens: Annotated[
        Path,
        typer.Option(
            "--tokens",
            envvar="TURNSTREAM_GATEWAY_TOKENS",
            help="The token file: one 'TENANT TOKEN' pair per line (16+ chars).",
        ),
    ],
    host: Annotated[
        str,
        typer.Option("--host", envvar="TURNSTREAM_GATEWAY_HOST", help="Listen here."),
    ] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option("--port", envvar="TURNSTREAM_GATEWAY_PORT", help="HTTP port."),
    ] = 8080,
    max_body: Annotated[
        int,
        typer.Option(
            "--max-body",
            envvar="TURNSTREAM_GATEWAY_MAX_BODY",
            help="The largest request body accepted, in bytes (413 above).",
        ),
    ] = 64 * 1024,
    stream_queue: Annotated[
        int,
        typer.Option(
            "--stream-queue",
            envvar="TURNSTREAM_GATEWAY_STREAM_QUEUE",
            help="Events one event stream may have waiting before it is dropped.",
        ),
    ] = 2000,
    keepalive: Annotated[
        float,
        typer.Option(
            "--keepalive",
            envvar="TURNSTREAM_GATEWAY_KEEPALIVE",
            min=0.1,
            help="Seconds of silence before an event stream sends a comment.",
        ),
    ] = 15.0,
) -> None:
    """Serve the HTTP/SSE gateway: submit, answer gates, interrupt, stream events.

    Exit codes: 0 stopped by a signal, 2 bad settings (token file, missing
    extra), 3 Kafka unreachable.
    """
    with exit_on_errors(target.bootstrap):
        asyncio.run(
            _serve(
                target,
                tokens,
                host=host,
                port=port,
                max_body=max_body,
                stream_queue=stream_queue,
                keepalive=keepalive,
            )
        )
    raise typer.Exit(int(ExitCode.OK))
