"""faust fixes the analytics workers need: read_committed, no lost records, clean stops.

Owns :func:`install_faust_fixes`, which puts seven corrections to
faust-streaming 0.15.3 on an app (each measured against the real broker; see
docs/analytics.md, "Known faust issues"), and :func:`adopt_partition_count`,
which reads a source topic's partition count from the broker so tables
co-partition with it:

* **read_committed.** The journal is written inside Kafka transactions, so a
  consumer must skip records of aborted transactions. faust chooses
  ``isolation_level="read_committed"`` only when the app is *in a
  transaction* -- ``processing_guarantee="exactly_once"`` **and**
  ``app.in_worker`` (an app started programmatically silently reads
  ``read_uncommitted`` even under ``exactly_once``). The worker consumer here
  reads committed data in both modes.
* **Fresh changelog, lost records.** A changelog topic created moments
  before the group join may be missing from the consumer's metadata; the first
  table write then raises ``PartitionsMismatch`` (0 partitions), the agent
  crashes and faust commits the record it held. The consumer declares every
  table's changelog before its client exists, and hands out no record while
  its metadata still lists a changelog with 0 partitions (see
  ``_FixedConsumer.on_start`` and ``_FixedConsumer.getmany``).
* **Seek partitions without a commit.** After a rebalance faust puts every
  partition back at its committed offset, but aiokafka only seeks when that
  offset is > 0 (see ``_FixedConsumer.seek_to_committed``).
* **Finish stopping.** A failed final commit no longer aborts the
  consumer's stop (see ``_FixedConsumer.on_stop``).
* **Drain the producer buffer before a commit** (see
  ``_FixedConsumer._commit_offsets``).
* **Close every Kafka client.** A transactional client whose start a stop cut
  short is in no faust table, and the table itself is shared by the class;
  the producer keeps each client it makes and the worker's stop closes them
  all (see ``_FixedProducer.close_clients``).
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
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Final

from faust.exceptions import NotReady
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.transport.producer import ProducerBuffer
from mode.threads import WorkerThread
from mode.utils.queues import FlowControlEvent

from turnstream.errors import ConfigError

__all__ = [
    "DENIALS",
    "FixedTransport",
    "adopt_partition_count",
    "install_faust_fixes",
    "isolation_level",
]

logger = logging.getLogger(__name__)

DENIALS: Final = frozenset(
    {
        "TopicAuthorizationFailedError",
        "GroupAuthorizationFailedError",
        "TransactionalIdAuthorizationFailed",
    }
)
"""aiokafka's ACL refusals, by class name (this package must not import aiokafka)."""

# How often a held fetch looks at the consumer's metadata again.
_METADATA_POLL_S: Final = 0.05
# How long reading a topic's partition count may take.
_PARTITIONS_TIMEOUT_S: Final = 20.0


def _changelog_topics(app: Any) -> list[Any]:
    return [table.changelog_topic for table in app.tables.values()]


async def _despite_failure(
    step: Awaitable[None], what: str, *, with_message: bool = False
) -> None:
    """Await a commit on the way to a stop; its failure is logged, not raised.

    The stop must complete, and a lost final commit is safe: what it covered is
    processed again after a restart.
    """
    try:
        await step
    except Exception as exc:  # noqa: BLE001 - shutdown must complete
        reason = f"{type(exc).__name__}: {exc}" if with_message else type(exc).__name__
        logger.warning(
            "%s failed (%s); records since the last commit are processed again "
            "after a restart",
            what,
            reason,
        )


class _DaemonWorkerThread(WorkerThread):
    """mode's service thread, as a daemon thread.

    A consumer thread whose stop did not finish (a stop after a crash is
    bounded, see ``AnalyticsApp.stop``) kept the process alive after the
    worker had exited with its error: the interpreter waits for non-daemon
    threads. A clean stop joins the thread as before.
    """

    def __init__(self, service: Any, **kwargs: Any) -> None:
        super().__init__(service, **kwargs)
        self.daemon = True


class _ReadCommittedConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    Worker = _DaemonWorkerThread

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
    # Set once the metadata listed every changelog (see getmany).
    _changelogs_listed = False

    def _new_consumer_thread(self) -> Any:
        return _ReadCommittedConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def on_start(self) -> None:
        # faust declares a table's changelog when the table starts, after the
        # consumer joined its group, so the consumer's first metadata may not
        # list it. Declared here, before the Kafka client is created, it does.
        changelogs = _changelog_topics(self.app)
        if changelogs:
            await self.app.producer.maybe_start()
            for topic in changelogs:
                await topic.maybe_declare()
        await super().on_start()

    async def getmany(
        self,
        timeout: float,  # noqa: ASYNC109 - faust's signature
    ) -> AsyncIterator[tuple[Any, Any]]:
        # faust checks a table's co-partitioning on its first write, against
        # this consumer's metadata. A changelog listed there with 0 partitions
        # (subscribed, not yet in the metadata) fails the check: the agent
        # crashes and faust acks -- and commits -- the record it was
        # processing, which is then lost. No record leaves before every
        # changelog is known; the fetcher calls again after ``timeout``.
        if not self._changelogs_listed:
            if not await self._wait_for_changelogs(timeout):
                return
            self._changelogs_listed = True
        async for item in super().getmany(timeout):
            yield item

    async def _wait_for_changelogs(self, seconds: float) -> bool:
        """Whether, within ``seconds``, no changelog is listed with 0 partitions."""
        names = [topic.get_topic_name() for topic in _changelog_topics(self.app)]
        deadline = time.monotonic() + seconds
        while True:
            unknown = [name for name in names if self.topic_partitions(name) == 0]
            if not unknown:
                return True
            if time.monotonic() >= deadline:
                logger.info(
                    "holding records until the consumer's metadata lists %s",
                    ", ".join(unknown),
                )
                return False
            await asyncio.sleep(_METADATA_POLL_S)

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

    async def wait_empty(self) -> None:
        # The app's stop first commits what was processed. After a denied
        # changelog write the transaction is broken and that commit raises
        # IllegalOperation, which ended the app's stop before the consumer's:
        # its thread kept the process alive. Finish the stop either way.
        await _despite_failure(super().wait_empty(), "commit before stopping")

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
        await _despite_failure(
            super().on_stop(), "final offset commit on stop", with_message=True
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


# aiokafka's producer class, reached through faust's driver (only kafka/
# imports aiokafka).
_KafkaProducer: Any = faust_aiokafka.aiokafka.AIOKafkaProducer  # type: ignore[attr-defined]


class _DenialNotingClient(_KafkaProducer):  # type: ignore[misc]
    """aiokafka's producer, reporting what its transactions are refused.

    A topic the ACL refuses to a transaction (AddPartitionsToTxn) fails the
    transaction, not the send: the send's delivery never completes and only
    the commit would raise the refusal (faust only logs it). Whatever touches
    the broken transaction first -- often a changelog send, which aiokafka
    refuses with ``IllegalOperation`` -- crashes the worker, so the refusal
    is reported the moment the transaction fails, from aiokafka's
    transaction waiter, as well as from the calls that raise it.
    """

    on_refusal: Callable[[BaseException], None] | None = None

    def _watch_transaction(self) -> None:
        # aiokafka sets the waiter's exception when it fails the transaction
        # (error_transaction, fatal_error); no public hook tells us sooner.
        waiter = getattr(self._txn_manager, "_transaction_waiter", None)
        if isinstance(waiter, asyncio.Future):
            waiter.add_done_callback(self._transaction_ended)

    def _transaction_ended(self, waiter: asyncio.Future[Any]) -> None:
        if waiter.cancelled():
            return
        exc = waiter.exception()  # observed here: asyncio logs no orphan
        if exc is not None and self.on_refusal is not None:
            self.on_refusal(exc)

    async def _noting(self, call: Awaitable[Any]) -> Any:
        try:
            return await call
        except Exception as exc:
            if self.on_refusal is not None:
                self.on_refusal(exc)
            raise

    async def begin_transaction(self) -> None:
        await self._noting(super().begin_transaction())
        self._watch_transaction()

    async def commit_transaction(self) -> None:
        await self._noting(super().commit_transaction())

    async def abort_transaction(self) -> None:
        await self._noting(super().abort_transaction())

    async def send_offsets_to_transaction(self, offsets: Any, group_id: str) -> None:
        await self._noting(super().send_offsets_to_transaction(offsets, group_id))


class _FixedProducer(faust_aiokafka.Producer):
    """faust's producer with the drainable buffer, and that notices a denied send.

    faust does not look at a send's failure: a snapshot the analytics topic
    refuses is dropped silently (the worker runs on, publishing nothing), and
    a refused changelog write surfaces later as an unrelated
    ``IllegalOperation``. :attr:`denied` keeps the first ACL refusal of any
    send and :attr:`denial` is set, so the app stops naming it.
    """

    def __init__(self, transport: Any, loop: Any = None, **kwargs: Any) -> None:
        super().__init__(transport, loop=loop, **kwargs)
        buffer = _DrainableBuffer(loop=self.loop, beacon=self.beacon)
        buffer.app = self.app
        self.buffer = buffer
        self.denied: BaseException | None = None
        self.denial = asyncio.Event()
        # faust declares these on the class: every producer of the process
        # would share (and stop) the others' transactional clients.
        self._transaction_producers = {}
        self._trn_locks = {}
        # Every Kafka client made, registered with faust or not: a
        # transactional client whose start a stop cut short is in no
        # faust table, and was reported unclosed when the process exited.
        self._clients: list[Any] = []
        self._clients_closed = False

    async def on_start(self) -> None:
        self._clients_closed = False  # a restarted worker makes clients again
        await super().on_start()

    def _new_producer(self, transactional_id: str | None = None) -> Any:
        if self._clients_closed:
            raise NotReady("the worker is stopping: no new Kafka client")
        self._clients = [
            c for c in self._clients if getattr(c, "_closed", None) is not True
        ]
        client = super()._new_producer(transactional_id=transactional_id)
        client.on_refusal = self._note
        self._clients.append(client)
        return client

    @property
    def _producer_type(self) -> type[Any]:
        return _DenialNotingClient

    async def close_clients(self, seconds_each: float) -> None:
        """Close every Kafka client this producer made; none is made after.

        Bounded per client: a client the broker no longer answers is given up
        on after ``seconds_each``.
        """
        self._clients_closed = True
        clients, self._clients = self._clients, []
        self._transaction_producers.clear()
        for client in clients:
            try:
                async with asyncio.timeout(seconds_each):
                    await client.stop()
            except Exception:  # noqa: BLE001 - best effort while exiting
                logger.info("a Kafka client of the worker did not close cleanly")

    async def send(self, *args: Any, **kwargs: Any) -> Any:
        try:
            delivery = await super().send(*args, **kwargs)
        except Exception as exc:
            # A topic the ACL hides fails already while waiting for its
            # metadata; faust wraps that into ProducerSendError.
            self._note(exc.__cause__ or exc.__context__ or exc)
            raise
        if isinstance(delivery, asyncio.Future):
            delivery.add_done_callback(self._delivered)
        return delivery

    def _delivered(self, delivery: asyncio.Future[Any]) -> None:
        if delivery.cancelled():
            return
        exc = delivery.exception()  # observed here: asyncio logs no orphan
        if exc is not None:
            self._note(exc)

    def _note(self, exc: BaseException) -> None:
        if type(exc).__name__ in DENIALS and self.denied is None:
            self.denied = exc
            self.denial.set()


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
    Every fix of the module docstring then applies, in both processing
    guarantees.
    """
    app.flow_control = _QueueKeepingFlowControl()
    app.transport = FixedTransport(app.conf.broker_consumer, app)


async def adopt_partition_count(app: Any, topic: str) -> int:
    """Make ``topic``'s partition count the default of ``app``'s topics and tables.

    Tables must have their source topic's partition count (faust refuses a
    mismatch); one defined without ``partitions=`` takes
    ``app.conf.topic_partitions``, which this sets from the broker's metadata.
    Call it before ``app.start()``; it starts the app's producer.

    Returns:
        The partition count.

    Raises:
        ConfigError: the topic does not exist or its metadata did not arrive.
    """
    await app.producer.maybe_start()
    # faust exposes no metadata call; its aiokafka producer has one.
    client = app.producer._ensure_producer()
    try:
        async with asyncio.timeout(_PARTITIONS_TIMEOUT_S):
            partitions = await client.partitions_for(topic)
    except Exception as exc:  # aiokafka's errors are not importable here
        raise ConfigError(
            "events topic", f"no partition count for {topic}: {type(exc).__name__}"
        ) from exc
    count = len(partitions)
    app.conf.topic_partitions = count
    return count


def isolation_level(app: Any) -> str | None:
    """The isolation level of the app's running worker consumer (for checks)."""
    thread = getattr(app.consumer, "_thread", None)
    client = None if thread is None else getattr(thread, "_consumer", None)
    level = None if client is None else getattr(client, "_isolation_level", None)
    return None if level is None else str(level)
