"""faust fixes the analytics workers need: read_committed, no lost records, clean stops.

Owns :func:`install_faust_fixes`, which puts five corrections to
faust-streaming 0.15.3 on an app (each measured against the real broker; see
the analytics README, "Known faust issues"):

* **read_committed.** The journal is written inside Kafka transactions, so a
  consumer must skip records of aborted transactions. faust chooses
  ``isolation_level="read_committed"`` only when the app is *in a
  transaction* -- ``processing_guarantee="exactly_once"`` **and**
  ``app.in_worker`` (an app started programmatically silently reads
  ``read_uncommitted`` even under ``exactly_once``). The worker consumer here
  reads committed data in both modes.
* **Seek partitions without a commit.** After a rebalance faust puts every
  partition back at its committed offset, but aiokafka only seeks when that
  offset is > 0 (see ``_FixedConsumer.seek_to_committed``).
* **Finish stopping.** A failed final commit no longer aborts the
  consumer's stop (see ``_FixedConsumer.on_stop``).
* **Drain the producer buffer before a commit** (see
  ``_FixedConsumer._commit_offsets``).
* **Keep queued records when flow resumes.** faust resumes flow twice after
  a rebalance (for table recovery, then for the streams) and every resume
  empties the agents' input queues, so a record delivered between the two
  was dropped (see :class:`_QueueKeepingFlowControl`).

One of the modules allowed to import faust; must not import aiokafka
directly, :mod:`turnstream.runtime` or :mod:`turnstream.kafka`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.transport.producer import ProducerBuffer
from mode.utils.queues import FlowControlEvent

__all__ = ["FixedTransport", "install_faust_fixes", "isolation_level"]

logger = logging.getLogger(__name__)


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


class _FixedConsumer(faust_aiokafka.Consumer):
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

    async def _commit_offsets(
        self, offsets: Mapping[Any, int], start_new_transaction: bool = True
    ) -> bool:
        # Table writes go to the changelog through faust's producer buffer, in
        # the background. Before committing an offset every changelog record
        # of the records below it must be with the Kafka client: in a
        # transaction (exactly-once) they are then part of the commit, and
        # at-least-once flushes the client before committing. faust commits
        # transactions without draining its buffer, so a crash right after a
        # commit could lose the table update of a record whose offset was
        # committed, and on stop the buffer's leftovers were sent after the
        # last transaction ended (IllegalOperation, crashed producer). Records
        # drained here that belong to offsets committed later are harmless:
        # the loop's offset mark skips them when they are read again.
        producer = self.app.producer
        buffer = getattr(producer, "buffer", None)
        if isinstance(buffer, _DrainableBuffer):
            async with asyncio.timeout(self.app.conf.broker_request_timeout):
                await buffer.drain()
        committed: bool = await super()._commit_offsets(
            offsets, start_new_transaction=start_new_transaction
        )
        return committed

    async def on_stop(self) -> None:
        # faust ends the transactions twice when an exactly-once worker stops:
        # once while revoking its partitions, and again here, where the
        # transactional producers are no longer in a transaction and aiokafka
        # raises IllegalOperation. Raised from here it aborted the consumer's
        # stop, leaving its (non-daemon) thread running: the process never
        # exited after SIGTERM. A failed final commit is safe to drop -- what it
        # would have committed is processed again after the restart (a
        # changelog write outside a committed transaction is never read back,
        # and the loops' offset marks absorb the redelivery) -- so finish
        # stopping either way.
        try:
            await super().on_stop()
        except Exception as exc:  # noqa: BLE001 - shutdown must complete
            logger.warning(
                "final offset commit on stop failed (%s: %s); records since the "
                "last commit are processed again after a restart",
                type(exc).__name__,
                exc,
            )


class _DrainableBuffer(ProducerBuffer):
    """faust's producer buffer, able to wait for what was put in it so far.

    faust's ``flush()`` returns after 0.1 s without a send even if messages
    remain, and ``size`` drops as soon as a message is taken out, before the
    client has it. Messages are handed over in order, so counting puts and
    completed hand-overs tells when everything put before a moment is with
    the client -- without waiting for what the agents keep adding meanwhile.
    """

    def __post_init__(self) -> None:
        super().__post_init__()
        self._put = 0
        self._sent = 0
        self._progress = asyncio.Event()

    def put(self, fut: Any) -> None:
        # With producer_threaded (not used here) messages bypass this queue.
        if self.app is None or not self.app.conf.producer_threaded:
            self._put += 1
        super().put(fut)

    async def _send_pending(self, fut: Any) -> None:
        await super()._send_pending(fut)
        # Only a successful hand-over counts: after a failed one, drain()
        # waits out its caller's timeout and the commit does not happen.
        self._sent += 1
        self._progress.set()

    async def drain(self) -> None:
        """Return once every message put so far was handed to the Kafka client."""
        target = self._put
        while self._sent < target:
            self._progress.clear()
            await self._progress.wait()


class _FixedProducer(faust_aiokafka.Producer):
    def __init__(self, transport: Any, loop: Any = None, **kwargs: Any) -> None:
        super().__init__(transport, loop=loop, **kwargs)
        buffer = _DrainableBuffer(loop=self.loop, beacon=self.beacon)
        buffer.app = self.app
        self.buffer = buffer


class FixedTransport(faust_aiokafka.Transport):
    """faust's aiokafka transport with the fixed worker consumer and producer."""

    Consumer = _FixedConsumer
    Producer = _FixedProducer


class _QueueKeepingFlowControl(FlowControlEvent):
    """Flow control that empties the stream queues only when flow was suspended.

    faust suspends flow and clears the agents' input queues when partitions
    are revoked, so nothing stale survives a rebalance. After the assignment
    it resumes flow once to read the changelogs and again once the stream
    partitions are resumed and seeked; :class:`FlowControlEvent` clears the
    queues on *every* resume, so a record the fetcher delivered in between
    (it runs while the second resume waits for the seek) was thrown away. It
    was never acked, yet later offsets were: faust committed past it when the
    partition had no earlier commit, and otherwise never handed it over until
    the next restart (measured: 4 of 30 restart tests under CPU load, always
    the first record of a partition). Clearing only on a suspended -> active
    change keeps what was delivered while flow was already active.
    """

    def resume(self) -> None:
        if self.is_active():
            return
        super().resume()


def install_faust_fixes(app: Any) -> None:
    """Install :class:`FixedTransport` and the queue-keeping flow control on ``app``.

    Call it right after creating the app, before any topic, agent or table
    is defined (they create the transport and their queues on first use).
    """
    app.flow_control = _QueueKeepingFlowControl()
    app.transport = FixedTransport(app.conf.broker_consumer, app)


def isolation_level(app: Any) -> str | None:
    """The isolation level of the app's running worker consumer (for checks)."""
    thread = getattr(app.consumer, "_thread", None)
    client = None if thread is None else getattr(thread, "_consumer", None)
    level = None if client is None else getattr(client, "_isolation_level", None)
    return None if level is None else str(level)
