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
- ``server``: :func:`serve` and :func:`start_server` (uvicorn).

Needs the ``gateway`` extra (``pip install 'turnstream[gateway]'``): starlette
and uvicorn, imported only here. Never imports aiokafka (the Kafka clients
come from :mod:`turnstream.kafka.client`).
"""

from turnstream.gateway.app import GatewaySettings, create_app
from turnstream.gateway.backend import Backend, LoopDirectory
from turnstream.gateway.server import serve, start_server
from turnstream.gateway.tenants import Tenant, Tenants

__all__ = [
    "Backend",
    "GatewaySettings",
    "LoopDirectory",
    "Tenant",
    "Tenants",
    "create_app",
    "serve",
    "start_server",
]
