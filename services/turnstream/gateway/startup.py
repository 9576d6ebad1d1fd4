"""The gateway's start-up, in one place: settings in, a serving gateway out.

Owns :func:`run`: read the token file, check that Kafka answers, connect the
backend and serve HTTP until SIGINT or SIGTERM (uvicorn's handlers stop it in
order). ``turnstream gateway`` parses the settings and calls it. Imports
starlette and uvicorn (the ``gateway`` extra) through the app and the server.
"""

from __future__ import annotations

from collections.abc import Callable

from turnstream.gateway.app import GatewaySettings
from turnstream.gateway.backend import Backend
from turnstream.gateway.server import serve
from turnstream.gateway.settings import GatewayConfig
from turnstream.gateway.tenants import Tenants
from turnstream.kafka.admin.probe import check_broker

__all__ = ["run"]


async def run(
    config: GatewayConfig, *, announce: Callable[[str], None] | None = None
) -> None:
    """Serve the gateway until SIGINT or SIGTERM.

    ``announce`` is told the gateway's address once Kafka answered.

    Raises:
        ConfigError: the token file cannot be read or is malformed.
        TransportError: Kafka does not answer.
    """
    settings = GatewaySettings(
        tenants=Tenants.load(config.tokens),
        max_body_bytes=config.max_body,
        keepalive=config.keepalive,
    )
    await check_broker(config.connection, security=config.security)

    async def connect() -> Backend:
        return await Backend.connect(
            config.clients(), config.topics, stream_queue=config.stream_queue
        )

    if announce is not None:
        announce(f"http://{config.host}:{config.port}")
    await serve(settings, connect, host=config.host, port=config.port)
