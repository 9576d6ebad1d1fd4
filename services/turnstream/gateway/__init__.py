"""``turnstream gateway``: an HTTP and Server-Sent Events door to the loops.

A composition root beside the loop actor: browsers and other HTTP clients
submit input, answer gates, interrupt, read a loop's state and stream its
events and tokens, without speaking Kafka or Avro. Table of contents:

- ``app``: :func:`create_app` (the Starlette app, its endpoints and error
  kinds in the module docstring) and :class:`GatewaySettings`;
- ``backend``: :class:`Backend`, the Kafka side (one sending session, one
  stream hub for all streams, the loop-ownership directory);
- ``tenants``: :class:`Tenants` and :class:`Tenant`, bearer tokens scoped to
  a tenant's loops;
- ``server``: :func:`serve` and :func:`start_server` (uvicorn);
- ``settings``: :data:`SETTINGS` (declared once; the CLI's options and the
  settings reference come from it), :class:`GatewayConfig`, :func:`parse_settings`;
- ``startup``: :func:`run`, the whole start-up of ``turnstream gateway``.

Needs the ``gateway`` extra (``pip install 'turnstream[gateway]'``): starlette
and uvicorn, imported only here, and only when a name that needs them is
first used (``settings`` does not), so the CLI lists the gateway's options
without the extra. Never imports aiokafka (the Kafka clients come from
:mod:`turnstream.kafka.client`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from turnstream.gateway.app import GatewaySettings, create_app
    from turnstream.gateway.backend import Backend, LoopDirectory
    from turnstream.gateway.server import serve, start_server
    from turnstream.gateway.startup import run
    from turnstream.gateway.tenants import Tenant, Tenants

_HOMES = {
    "GatewaySettings": "app",
    "create_app": "app",
    "Backend": "backend",
    "LoopDirectory": "backend",
    "serve": "server",
    "start_server": "server",
    "run": "startup",
    "Tenant": "tenants",
    "Tenants": "tenants",
}

__all__ = [
    "Backend",
    "GatewaySettings",
    "LoopDirectory",
    "Tenant",
    "Tenants",
    "create_app",
    "run",
    "serve",
    "start_server",
]


def __getattr__(name: str) -> Any:
    # starlette and uvicorn load with the first name that needs them.
    if name in _HOMES:
        module = importlib.import_module(f"turnstream.gateway.{_HOMES[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
