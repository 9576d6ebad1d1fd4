"""Live-only events to ``turnstream.deltas.v1``: the runtime's ``LiveHub`` on Kafka.

Owns :class:`DeltaPublisher`. ``publish`` encodes an ephemeral event and puts
it on a bounded buffer; one sender task hands the buffer to a separate
*non-transactional* ``acks=1`` producer, immediately and outside any
transaction (deltas must reach watchers while the turn streams, not when it commits).
Records go one by one into the producer's open batch, with no linger: a
watcher sees a token about when the broker could show it, and a burst that
arrives while a request is in flight still leaves in one batch (measured with
``bench/latency_bench.py``, one loop x 100 turns: chunk -> delta p50 2.8 ms
without the linger, 3.2-3.6 ms lingering 1 ms, and no CPU difference beyond the
noise in the peers bench). A batch per drained buffer is not used: aiokafka
takes a partition's next batch only once the previous one left, so small
batches would queue behind each other. A delta may still be
read before the ``TurnStarted`` it follows (another topic, and the commit's
markers land after the commit returns): the readers that need the order restore
it (``Turn`` holds a turn's early deltas, the CLI's ``LiveOrder`` too). The
record headers are built once per event type. :meth:`DeltaPublisher.settle`
waits (bounded) until a loop's deltas so far are acknowledged: the loop's
writer calls it before each commit, so a watcher sees a step's deltas before
the step's ``StepDone``, however fast the commit is. A full buffer makes
``publish`` wait (up to ``full_wait``) for the sender to catch up, so a burst
of streaming turns is slowed to what the broker takes rather than losing
tokens; only real overload (still full after the wait) or a failed send drops
an event, and every drop is counted. ``deliver`` does nothing: enduring events
reach watchers through the journal topic itself, ``read_committed``.

An ACL that denies Write on the deltas topic does not stop the service (a
documented choice): deltas are live-only, turns still run and commit, and
clients follow them on the journal. The denial is logged once, naming the
principal, the permission and the topic, and says that tokens are not
streamed; for ``recheck`` seconds after it events are dropped (counted)
without a send, then one send tries again, and a send that succeeds is
logged as streaming again.

Part of ``turnstream.kafka`` (the only aiokafka importer); imports the wire
codec; never the runtime's actor.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from aiokafka.errors import KafkaError, TopicAuthorizationFailedError
from aiokafka.partitioner import DefaultPartitioner

from turnstream.errors import ContractError
from turnstream.events import EnduringEvent, EphemeralEvent
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.clients import KafkaClients, stop_client
from turnstream.kafka.diagnose import authorization_error
from turnstream.kafka.records import loop_key
from turnstream.wire import Codec

__all__ = ["DeltaPublisher"]

_log = logging.getLogger(__name__)
_PARTITION_CACHE = 100_000  # keys remembered (~200 B each) before starting over

# key, partition (None: aiokafka chooses), value, headers, and the future
# settled once the record is acknowledged or dropped (for settle()).
_Item = tuple[bytes, int | None, bytes, list[tuple[str, bytes]], asyncio.Future[None]]


class DeltaPublisher:
    """A ``LiveHub`` that sends ephemeral events to the deltas topic.

    Args:
        clients: builds the producer.
        topic: the deltas topic.
        codec: encodes ephemeral events.
        metrics: ``deltas_sent`` and ``deltas_dropped`` are counted here.
        capacity: events buffered at most.
        send_timeout: seconds one hand-over to the producer may take.
        full_wait: seconds ``publish`` waits for room in a full buffer before
            it drops the event.
        recheck: seconds after a denied send during which events are dropped
            without trying.
    """

    def __init__(
        self,
        *,
        clients: KafkaClients,
        topic: str,
        codec: Codec,
        metrics: ServiceMetrics,
        capacity: int = 8192,
        send_timeout: float = 1.0,
        full_wait: float = 1.0,
        recheck: float = 30.0,
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._clients = clients
        self._topic = topic
        self._codec = codec
        self._metrics = metrics
        self._send_timeout = send_timeout
        self._full_wait = full_wait
        self._recheck = recheck
        # While an ACL denies the topic: when sending may be tried again.
        self._denied_until: float | None = None
        self._buffer: asyncio.Queue[_Item] = asyncio.Queue(maxsize=capacity)
        self._producer: Any = None
        # aiokafka hashes every keyed record with a pure-Python murmur2 (~8 µs);
        # a loop's deltas all go to one partition, so hash each key once.
        self._partitions: dict[bytes, tuple[int, int]] = {}
        self._partitioner = DefaultPartitioner()
        # Record headers name the event type and schema: constant per type.
        self._headers: dict[type[EphemeralEvent], list[tuple[str, bytes]]] = {}
        # Per loop: the future of its latest delta not yet acknowledged.
        self._latest: dict[UUID, asyncio.Future[None]] = {}

    async def start(self) -> None:
        """Start the producer.

        Raises:
            TransportError: the producer could not start in time.
        """
        producer = self._clients.lossy_producer("deltas")
        await self._clients.start(producer, operation="start deltas producer")
        self._producer = producer

    async def run(self) -> None:
        """The sender task: hand buffered events to the producer until cancelled."""
        try:
            while True:
                await self._send_burst(await self._buffer.get())
        finally:
            producer, self._producer = self._producer, None
            if producer is not None:
                await stop_client(producer, seconds=self._send_timeout * 5)

    async def _send_burst(self, item: _Item) -> None:
        """Hand ``item``, then every event buffered meanwhile, to the producer.

        One timer bounds the burst instead of an ``asyncio.timeout`` per
        record (a third of a hand-over's cost): it is pushed back to a full
        ``send_timeout`` whenever less than half of it is left, so every
        hand-over still gets between half and all of ``send_timeout``. A
        hand-over that fails or runs out of time drops its event; the rest
        stay buffered for the next burst.
        """
        loop = asyncio.get_running_loop()
        bound = self._send_timeout
        timer = asyncio.timeout(None)
        try:
            async with timer:
                while True:
                    now = loop.time()
                    deadline = timer.when()
                    if deadline is None or deadline - now < bound / 2:
                        timer.reschedule(now + bound)
                    key, partition, value, headers, settled = item
                    delivery = await self._producer.send(
                        self._topic,
                        value,
                        key=key,
                        partition=partition,
                        headers=headers,
                    )
                    delivery.add_done_callback(
                        functools.partial(self._delivered, settled=settled)
                    )
                    try:
                        item = self._buffer.get_nowait()
                    except asyncio.QueueEmpty:
                        return
        except (TimeoutError, KafkaError) as exc:
            self._metrics.deltas_dropped += 1
            _settle(item[4])
            if isinstance(exc, TopicAuthorizationFailedError):
                self._denied(exc)

    def _delivered(
        self, delivery: asyncio.Future[Any], *, settled: asyncio.Future[None]
    ) -> None:
        failure = None if delivery.cancelled() else delivery.exception()
        if delivery.cancelled() or failure is not None:
            self._metrics.deltas_dropped += 1
            if isinstance(failure, TopicAuthorizationFailedError):
                self._denied(failure)
        else:
            self._metrics.deltas_sent += 1
            if self._denied_until is not None:
                self._denied_until = None
                _log.info("deltas streamed again", extra={"topic": self._topic})
        _settle(settled)

    def _denied(self, exc: TopicAuthorizationFailedError) -> None:
        """Say once that tokens are not streamed; stop trying for a while."""
        first = self._denied_until is None
        self._denied_until = asyncio.get_running_loop().time() + self._recheck
        if not first:
            return
        denied = authorization_error(
            exc,
            security=self._clients.security,
            operation="stream token deltas",
            permission="Write",
            resource=self._topic,
        )
        _log.error(
            "deltas denied by an ACL: %s; token deltas are not streamed (turns "
            "still run and commit; clients follow the journal)",
            denied,
            extra={"topic": self._topic},
        )

    async def settle(self, loop_id: UUID) -> None:
        """Return once ``loop_id``'s deltas so far are acknowledged or dropped.

        Bounded by the send timeout: a commit is never held up by a slow
        deltas topic for longer than one hand-over may take.
        """
        latest = self._latest.pop(loop_id, None)
        if latest is None or latest.done():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._send_timeout):
                await asyncio.shield(latest)

    async def publish(self, event: EphemeralEvent) -> None:
        """Buffer ``event`` for sending; wait for room, drop it on real overload."""
        loop_id = event.header.loop_id
        if loop_id is None or self._producer is None or self._holding_back():
            self._metrics.deltas_dropped += 1
            return
        try:
            value = self._codec.marshal_ephemeral(event)
        except ContractError as exc:
            _log.warning("delta not encodable", extra={"exc_type": type(exc).__name__})
            self._metrics.deltas_dropped += 1
            return
        key = loop_key(loop_id)
        headers = self._headers.get(type(event))
        if headers is None:
            headers = self._headers[type(event)] = self._codec.kafka_headers(event)
        settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        item = (key, self._partition(key), value, headers, settled)
        try:
            self._buffer.put_nowait(item)
        except asyncio.QueueFull:
            try:
                async with asyncio.timeout(self._full_wait):
                    await self._buffer.put(item)
            except TimeoutError:
                self._metrics.deltas_dropped += 1
                return
        self._latest[loop_id] = settled

    def _holding_back(self) -> bool:
        """Whether a recent denial means this event is dropped untried."""
        until = self._denied_until
        return until is not None and asyncio.get_running_loop().time() < until

    def _partition(self, key: bytes) -> int | None:
        """The default partitioner's choice for ``key``, hashed once per loop.

        Remembered with the partition count it was computed for, so a topic
        that grows is re-hashed; ``None`` (aiokafka chooses) until the
        producer has the topic's metadata.
        """
        every = self._producer.client.cluster.partitions_for_topic(self._topic)
        if not every:
            return None
        cached = self._partitions.get(key)
        if cached is not None and cached[0] == len(every):
            return cached[1]
        ordered = sorted(every)
        partition = int(self._partitioner(key, ordered, ordered))
        if len(self._partitions) >= _PARTITION_CACHE:
            self._partitions.clear()
        self._partitions[key] = (len(every), partition)
        return partition

    async def deliver(self, events: Sequence[EnduringEvent]) -> None:
        """Nothing to do: the journal topic is how enduring events go live."""


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
