"""Building and starting aiokafka clients from one settings object.

Owns :class:`KafkaClients`: the bootstrap servers, timeouts and security
settings every producer, consumer and admin client of a process is built from
and started with (so TLS and SASL reach *every* client), plus :func:`start_client`
and :func:`stop_client`, which bound a client's start and stop with timeouts and
turn failures into :class:`turnstream.errors.TransportError`.

Part of ``turnstream.kafka`` (the only aiokafka importer); must not import the
runtime or the wire codec.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from turnstream.errors import TransportError
from turnstream.kafka.backoff import ConnectGate
from turnstream.kafka.connection import ConnectStats, KafkaConnection
from turnstream.kafka.faults import transport_error
from turnstream.kafka.security import KafkaSecurity

__all__ = [
    "DEFAULT_MAX_REQUEST_BYTES",
    "KafkaClients",
    "reachable",
    "start_client",
    "started_admin",
    "stop_client",
]

DEFAULT_MAX_REQUEST_BYTES: Final = 8 * 1024 * 1024 + 64 * 1024
"""Producer ``max_request_size``: one codec frame (8 MiB) plus batch overhead.

The broker's own limit is the topic's ``max.message.bytes`` (1 MiB by default):
raise it on ``turnstream.loops.v1`` (and ``turnstream.events.v1``) to the same
value for loops with long histories.
"""


@dataclass(frozen=True, kw_only=True)
class KafkaClients:
    """Where Kafka is and how to reach it, for every client of a process.

    Attributes:
        connection: bootstrap servers and per-call timeouts.
        security: protocol, SASL and TLS settings (passed to every client).
        client_id: prefix of every client's id (shown in broker logs).
        max_request_bytes: producers' ``max_request_size``.
        reconnect_backoff: seconds before the first reconnect to a broker that
            refused a connection (each client, each broker).
        reconnect_backoff_max: the longest wait between reconnects; doubled
            per failure with jitter up to this, so a down broker sees a few
            attempts a second per process, not one per request.
        connect_stats: connection attempts and failures of every client built
            here (one object shared by the process's clients).
    """

    connection: KafkaConnection
    security: KafkaSecurity = field(default_factory=KafkaSecurity)
    client_id: str = "turnstream"
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    reconnect_backoff: float = 0.1
    reconnect_backoff_max: float = 5.0
    connect_stats: ConnectStats = field(default_factory=ConnectStats, compare=False)

    @property
    def bootstrap(self) -> str:
        """The bootstrap servers."""
        return self.connection.bootstrap

    @cached_property
    def _common(self) -> dict[str, object]:
        # Built once: the TLS context loads its files here (ConfigError if not).
        return {
            "bootstrap_servers": self.connection.bootstrap,
            "request_timeout_ms": self.connection.request_timeout_ms,
            **self.security.client_kwargs(),
        }

    def common(self, role: str) -> dict[str, Any]:
        """Keyword arguments shared by every client, with a client id for ``role``."""
        return {**self._common, "client_id": f"{self.client_id}-{role}"}

    def _gated(self, inner: Any) -> None:
        ConnectGate(
            self.reconnect_backoff, self.reconnect_backoff_max, self.connect_stats
        ).install(inner)

    def transactional_producer(
        self, transactional_id: str, *, transaction_timeout_ms: int = 60_000
    ) -> AIOKafkaProducer:
        """A transactional (hence idempotent, ``acks=all``) producer."""
        producer = AIOKafkaProducer(
            **self.common("txn"),
            transactional_id=transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
            max_request_size=self.max_request_bytes,
            linger_ms=0,
        )
        self._gated(producer.client)
        return producer

    def idempotent_producer(self, role: str) -> AIOKafkaProducer:
        """An idempotent ``acks=all`` producer (commands: no duplicates, no loss)."""
        producer = AIOKafkaProducer(
            **self.common(role),
            enable_idempotence=True,
            acks="all",
            max_request_size=self.max_request_bytes,
        )
        self._gated(producer.client)
        return producer

    def lossy_producer(self, role: str, *, linger_ms: int = 0) -> AIOKafkaProducer:
        """A fast ``acks=1`` producer for live-only records (deltas)."""
        producer = AIOKafkaProducer(
            **self.common(role),
            acks=1,
            linger_ms=linger_ms,
            max_request_size=self.max_request_bytes,
        )
        self._gated(producer.client)
        return producer

    def consumer(
        self,
        role: str,
        *topics: str,
        group_id: str | None = None,
        read_committed: bool = True,
        **extra: Any,
    ) -> AIOKafkaConsumer:
        """A consumer; without ``group_id`` it is assigned partitions by hand.

        ``extra`` may override any common setting (e.g. ``request_timeout_ms``).
        """
        kwargs: dict[str, Any] = {
            **self.common(role),
            "group_id": group_id,
            "enable_auto_commit": False,
            "isolation_level": (
                "read_committed" if read_committed else "read_uncommitted"
            ),
            **extra,
        }
        consumer = AIOKafkaConsumer(*topics, **kwargs)
        self._gated(consumer._client)
        return consumer

    def admin(self) -> AIOKafkaAdminClient:
        """An admin client (start it with :meth:`start`)."""
        admin = AIOKafkaAdminClient(**self.common("admin"))
        self._gated(admin._client)
        return admin

    async def start(
        self, client: Any, *, operation: str, seconds: float | None = None
    ) -> None:
        """:func:`start_client` with these settings' security and connect timeout.

        Args:
            client: a consumer, producer or admin client of these settings.
            operation: names the start in the error.
            seconds: the time limit (default: the connect timeout).

        Raises:
            KafkaAuthorizationError | TransportError: as :func:`start_client`.
        """
        await start_client(
            client,
            seconds=self.connection.connect_timeout if seconds is None else seconds,
            operation=operation,
            security=self.security,
        )


async def start_client(
    client: Any,
    *,
    seconds: float,
    operation: str,
    security: KafkaSecurity | None = None,
) -> None:
    """Start an aiokafka client under a timeout; on failure close it again.

    Args:
        client: an aiokafka consumer, producer or admin client.
        seconds: the time limit.
        operation: names the start in the error.
        security: the client's settings, so a denial names its principal.

    Raises:
        KafkaAuthorizationError: an ACL denies what the start needs (e.g.
            the transactional id).
        TransportError: the start failed or timed out.
    """
    try:
        async with asyncio.timeout(seconds):
            await client.start()
    except (TimeoutError, KafkaError, OSError) as exc:
        await stop_client(client, seconds=seconds)
        raise transport_error(operation, exc, security=security) from exc
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise
        # One of the client's own tasks was cancelled under it (as in
        # ``stop_client``): a failed start, retried like a transient one.
        await stop_client(client, seconds=seconds)
        raise TransportError(operation, "cancelled inside", retriable=True) from exc


@contextlib.asynccontextmanager
async def started_admin(clients: KafkaClients, *, seconds: float) -> AsyncIterator[Any]:
    """A started admin client of ``clients``, stopped on exit.

    Raises:
        KafkaAuthorizationError | TransportError: as :func:`start_client`.
    """
    admin = clients.admin()
    await clients.start(admin, operation="start admin client", seconds=seconds)
    try:
        yield admin
    finally:
        await stop_client(admin, seconds=seconds)


async def reachable(client: Any, *, seconds: float) -> bool:
    """Whether a started client can refresh its metadata from a broker now.

    Asks the client's own connections (no new client, no log noise of its
    own); any failure or timeout counts as unreachable.
    """
    inner = getattr(client, "_client", None)
    if inner is None:
        return False
    try:
        async with asyncio.timeout(seconds):
            return bool(await inner.force_metadata_update())
    except (TimeoutError, KafkaError, OSError):
        return False


async def stop_client(client: Any, *, seconds: float) -> None:
    """Stop or close an aiokafka client, bounded; a failure to stop is ignored.

    Stopping is best effort (the process or partition is going away); a
    cancellation of the calling task still propagates. A ``CancelledError``
    that is not one (aiokafka's consumer cancels its pending fetches and
    awaits them unguarded, so one escapes ``stop`` while a fetch is backing
    off, as during a broker outage) counts as a failed stop: the client's
    connections are closed and the caller carries on.
    """
    closer = getattr(client, "stop", None) or client.close
    try:
        async with asyncio.timeout(seconds):
            await closer()
    except (TimeoutError, KafkaError, OSError, TransportError):
        return
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise
        await _close_connections(client)


async def _close_connections(client: Any) -> None:
    """Close what a consumer's interrupted ``stop`` left open (bounded)."""
    inner = getattr(client, "_client", None) or getattr(client, "client", None)
    if inner is None:
        return
    with contextlib.suppress(TimeoutError, KafkaError, OSError):
        async with asyncio.timeout(1.0):
            await inner.close()
