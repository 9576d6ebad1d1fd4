"""Backoff with jitter, and the reconnect gate every aiokafka client gets."""

from __future__ import annotations

from typing import Any

from turnstream.kafka.backoff import Backoff, ConnectGate, ConnectStats
from turnstream.kafka.clients import KafkaClients
from turnstream.kafka.connection import KafkaConnection


def test_backoff_doubles_to_its_cap_within_the_upper_half() -> None:
    """Each delay lies in [ceiling/2, ceiling]; the ceiling doubles up to the cap."""
    low = Backoff(0.1, 1.0, rng=lambda: 0.0)
    high = Backoff(0.1, 1.0, rng=lambda: 0.999999)
    lows = [round(low.next(), 4) for _ in range(6)]
    highs = [round(high.next(), 4) for _ in range(6)]
    assert lows == [0.05, 0.1, 0.2, 0.4, 0.5, 0.5]
    assert highs == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    low.reset()
    assert low.next() == 0.05


class _FakeClient:
    """The attributes of an ``AIOKafkaClient`` the gate uses."""

    def __init__(self) -> None:
        self._conns: dict[Any, Any] = {}
        self.up = False
        self.calls = 0
        self.updates = 0

    async def _get_conn(self, node_id: object, **_: object) -> object | None:
        self.calls += 1
        return object() if self.up else None

    async def _metadata_update(self, cluster: object, topics: object) -> bool:
        self.updates += 1
        return self.up


async def test_connect_gate_skips_connects_until_the_backoff_passes() -> None:
    """A refused broker is tried again only after its (growing) backoff."""
    now = [0.0]
    client = _FakeClient()
    stats = ConnectStats()
    ConnectGate(1.0, 8.0, stats, clock=lambda: now[0]).install(client)
    for _ in range(100):  # a retry loop spinning while the broker is down
        assert await client._get_conn(1) is None
    assert client.calls == 1
    now[0] += 1.0  # past the first backoff (at most 1 s)
    assert await client._get_conn(1) is None
    assert client.calls == 2
    now[0] += 1.0  # the second backoff is at least 1 s: maybe not yet
    await client._get_conn(1)
    now[0] += 1.0  # ... but at most 2 s
    await client._get_conn(1)
    assert client.calls == 3
    assert (stats.attempts, stats.failures) == (3, 3)
    client.up = True
    now[0] += 4.0
    assert await client._get_conn(1) is not None
    client.up = False
    assert await client._get_conn(1) is None  # a success resets the backoff
    now[0] += 1.0
    await client._get_conn(1)
    assert client.calls == 6


async def test_every_built_client_goes_through_a_connect_gate() -> None:
    """Producers, consumers and admin clients all get the gate (pins aiokafka)."""
    clients = KafkaClients(connection=KafkaConnection(bootstrap="127.0.0.1:1"))
    producers = [
        clients.transactional_producer("t"),
        clients.idempotent_producer("p"),
        clients.lossy_producer("l"),
    ]
    consumer = clients.consumer("c", "topic")
    admin = clients.admin()
    inners = [p.client for p in producers] + [consumer._client, admin._client]
    try:
        for inner in inners:
            assert "ConnectGate" in inner._get_conn.__qualname__
    finally:
        for producer in producers:
            await producer.stop()
        await consumer.stop()
        await admin.close()


async def test_connect_gate_spaces_failed_metadata_updates() -> None:
    """After a failed metadata update the next one first waits out its backoff.

    aiokafka's producer asks for metadata in a loop with no wait of its own
    while a partition's leader is unknown; the waits here are that loop's.
    """
    now = [0.0]
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        now[0] += seconds

    client = _FakeClient()
    gate = ConnectGate(0.1, 1.0, clock=lambda: now[0], sleep=sleep)
    gate.install(client)
    for _ in range(6):
        assert await client._metadata_update(None, set()) is False
    assert client.updates == 6
    assert len(waits) == 5
    assert all(0.05 <= w <= 1.0 for w in waits)
    assert waits[-1] >= 0.5  # doubled up to the cap
    client.up = True
    assert await client._metadata_update(None, set()) is True
    waits.clear()
    assert await client._metadata_update(None, set()) is True
    assert waits == []  # a success resets it
