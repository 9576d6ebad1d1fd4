"""A faust Kafka transport whose worker consumer always reads ``read_committed``.

Owns :func:`use_read_committed`. The journal is written inside Kafka
transactions, so a consumer must skip records of aborted transactions.
faust 0.15.3 chooses ``isolation_level="read_committed"`` only when the app
is *in a transaction* -- ``processing_guarantee="exactly_once"`` **and**
``app.in_worker`` (set by ``faust.Worker``; an app started programmatically
is not "in a worker" and silently reads ``read_uncommitted`` even under
``exactly_once``). This transport makes the at-least-once worker consumer
read committed data too, without touching faust's commit path, and makes the
post-rebalance seek cover partitions that have no committed offset yet (see
``_ReadCommittedConsumer.seek_to_committed``).

One of the modules allowed to import faust; must not import aiokafka
directly, :mod:`turnstream.runtime` or :mod:`turnstream.kafka`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka

__all__ = ["ReadCommittedTransport", "use_read_committed"]


class _ReadCommittedConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        # faust derives the isolation level from ``consumer.in_transaction``
        # and reads that flag nowhere else while building the client; it is
        # flipped only for this call so commits keep the at-least-once path.
        consumer = self.consumer
        saved = consumer.in_transaction
        consumer.in_transaction = True
        try:
            return super()._create_worker_consumer(transport)
        finally:
            consumer.in_transaction = saved


class _ReadCommittedConsumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> Any:
        return _ReadCommittedConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def seek_to_committed(self) -> Mapping[Any, int]:
        # After a rebalance faust recovers the tables, resumes the stream
        # partitions and then calls this to put every partition back at its
        # committed offset. aiokafka's seek_to_committed only seeks when the
        # committed offset is > 0, so a partition with no commit yet (or a
        # commit of 0) keeps the position a fetch made while it was paused,
        # and the records faust dropped from that fetch are skipped for good
        # (observed: a whole partition, or single records, never delivered).
        # Seek those partitions explicitly to 0; with auto_offset_reset
        # "earliest" that is where they would start (an out-of-range 0 resets
        # to the log start).
        committed: Mapping[Any, int] = await super().seek_to_committed()
        if self.app.conf.consumer_auto_offset_reset == "earliest":
            uncommitted = {tp: 0 for tp, offset in committed.items() if not offset}
            if uncommitted:
                await self._thread.seek_wait(uncommitted)
        return committed


class ReadCommittedTransport(faust_aiokafka.Transport):
    """faust's aiokafka transport with a ``read_committed`` worker consumer."""

    Consumer = _ReadCommittedConsumer


def use_read_committed(app: Any) -> None:
    """Install :class:`ReadCommittedTransport` on a faust app.

    Call it right after creating the app, before any topic, agent or table
    is defined (they create the transport on first use).
    """
    app.transport = ReadCommittedTransport(app.conf.broker_consumer, app)


def isolation_level(app: Any) -> str | None:
    """The isolation level of the app's running worker consumer (for checks)."""
    thread = getattr(app.consumer, "_thread", None)
    client = None if thread is None else getattr(thread, "_consumer", None)
    level = None if client is None else getattr(client, "_isolation_level", None)
    return None if level is None else str(level)
