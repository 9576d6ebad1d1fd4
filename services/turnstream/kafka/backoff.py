"""Exponential backoff with jitter, and a reconnect gate for aiokafka clients.

Owns :class:`Backoff` (the delay before the next attempt: doubles per failure
up to a cap, each delay drawn from its upper half so processes that failed
together do not retry together) and :class:`ConnectGate`, which gives an
aiokafka client the reconnect backoff it lacks: aiokafka 0.14 reconnects on
every request (no ``reconnect_backoff_ms``), so while a broker is down every
retry loop of every client (fetcher, heartbeat, sender, metadata) opens a new
connection each ``retry_backoff_ms``, and a producer with a batch for a
partition whose leader is unknown asks for a metadata update in a loop with no
wait at all. Behind the gate, a client connects to a broker that just refused
it only when that broker's backoff has passed; until then the connection is
reported missing at once (what aiokafka's own code does for a failed
connect), so its loops retry without touching the network; and after a failed
metadata update the next one starts only when its own backoff has passed, so
every loop waiting on metadata waits with it.

Part of ``turnstream.kafka`` (the only aiokafka importer); must not import the
runtime or the wire codec.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka.client import ConnectionGroup

from turnstream.kafka.connection import ConnectStats

__all__ = ["Backoff", "ConnectGate", "ConnectStats"]


@dataclass(slots=True)
class Backoff:
    """The delay before the next attempt after consecutive failures.

    Attributes:
        initial: the first delay's upper bound, in seconds.
        cap: the largest delay's upper bound, in seconds.
        rng: a source of floats in ``[0, 1)`` (seeded in tests).
        failures: consecutive failures so far.
    """

    initial: float
    cap: float
    rng: Callable[[], float] = random.random
    failures: int = 0

    def next(self) -> float:
        """Count a failure; return the jittered delay before the next attempt."""
        ceiling = min(self.cap, self.initial * 2.0 ** min(self.failures, 32))
        self.failures += 1
        return ceiling / 2 + self.rng() * ceiling / 2

    def reset(self) -> None:
        """An attempt succeeded: the next failure waits ``initial`` again."""
        self.failures = 0


@dataclass(slots=True)
class _NodeState:
    backoff: Backoff
    not_before: float = 0.0


@dataclass
class ConnectGate:
    """Per-broker reconnect backoff for one aiokafka client (see the module).

    Attributes:
        initial: first backoff after a failed connect, in seconds.
        cap: longest backoff, in seconds.
        stats: where attempts and failures are counted (shared per process).
        clock: monotonic seconds.
        sleep: waits before a metadata update that is not due yet.
    """

    initial: float
    cap: float
    stats: ConnectStats = field(default_factory=ConnectStats)
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    _nodes: dict[object, _NodeState] = field(default_factory=dict, init=False)

    def install(self, client: Any) -> None:
        """Gate an ``AIOKafkaClient``'s connects and metadata updates."""
        original = client._get_conn
        conns: dict[Any, Any] = client._conns
        update = client._metadata_update
        updates = _NodeState(Backoff(self.initial, self.cap))

        async def metadata_update(cluster_metadata: Any, topics: Any) -> Any:
            wait = updates.not_before - self.clock()
            if wait > 0:
                await self.sleep(wait)
            ok = await update(cluster_metadata, topics)
            if ok:
                updates.backoff.reset()
                updates.not_before = 0.0
            else:
                updates.not_before = self.clock() + updates.backoff.next()
            return ok

        async def get_conn(
            node_id: object,
            *,
            group: ConnectionGroup = ConnectionGroup.DEFAULT,
            no_hint: bool = False,
        ) -> Any:
            existing = conns.get((node_id, group))
            if existing is not None and existing.connected():
                return existing
            state = self._nodes.get(node_id)
            if state is not None and self.clock() < state.not_before:
                return None  # as a failed connect: the caller retries later
            self.stats.attempts += 1
            conn = await original(node_id, group=group, no_hint=no_hint)
            self._record(node_id, ok=conn is not None)
            return conn

        client._get_conn = get_conn
        client._metadata_update = metadata_update

    def _record(self, node_id: object, *, ok: bool) -> None:
        if ok:
            self._nodes.pop(node_id, None)
            return
        self.stats.failures += 1
        state = self._nodes.get(node_id)
        if state is None:
            state = _NodeState(Backoff(self.initial, self.cap))
            self._nodes[node_id] = state
        state.not_before = self.clock() + state.backoff.next()
