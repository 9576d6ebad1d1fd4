"""The faust wiring of the analytics worker: topics, the loops table, views.

Owns :class:`AnalyticsApp`, a typed wrapper around one ``faust.App``:

* source: the journal topic (``turnstream.events.v1``), decoded by the
  registered ``turnstream_avro`` codec, read ``read_committed``;
* state: the table ``loops`` (changelog ``<app_id>-loops-changelog``), keyed by
  loop id with as many partitions as the journal, so it is co-partitioned
  with it: a record's table update goes to the changelog partition of the
  record's own partition. Each value is one loop's
  :class:`~turnstream.analytics.aggregate.LoopStats`, so its counters and its
  dedupe marks are written together in one changelog record;
* outputs: a timer publishes the merged snapshot (Avro,
  ``turnstream_analytics_avro``) to the analytics topic when it changed, and
  the web server serves ``/turnstream/stats/`` and
  ``/turnstream/stats/windows/`` as JSON.

All aggregation logic lives in the pure modules; this module only moves
records between faust and :func:`~turnstream.analytics.aggregate.fold`.
One of the modules allowed to import faust; must not import aiokafka
directly, :mod:`turnstream.runtime` or :mod:`turnstream.kafka`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta
from typing import Any, Final

import faust
from faust.web import Request, Response, View

from turnstream.analytics.aggregate import (
    FoldConfig,
    LoopStats,
    Outcome,
    Position,
    fold,
)
from turnstream.analytics.codecs import (
    EVENTS_CODEC,
    SNAPSHOT_CODEC,
    LoopStatsValue,
    Undecodable,
    register_codecs,
)
from turnstream.analytics.errors import stopped_error
from turnstream.analytics.report import build_snapshot, totals_view, windows_view
from turnstream.analytics.settings import AnalyticsSettings, Guarantee, KafkaAuth
from turnstream.analytics.transport import (
    DENIALS,
    install_faust_fixes,
    isolation_level,
)
from turnstream.events import EnduringEvent
from turnstream.wire.analytics_codec import AnalyticsCodec, AnalyticsSnapshot
from turnstream.wire.codec import Codec as WireCodec
from turnstream.wire.schemas import SchemaSet

__all__ = ["STATS_PATH", "TABLE_NAME", "WINDOWS_PATH", "AnalyticsApp"]

logger = logging.getLogger(__name__)
# Seconds a stop may take before the worker gives up on faust and exits.
_STOP_TIMEOUT_S = 20.0
# Seconds the stop after a crash (or a denial) may take.
_CRASHED_STOP_S = 1.5
# Seconds each Kafka client of the worker may take to close on the way out.
_CLIENT_STOP_S = 1.0

TABLE_NAME: Final = "loops"
STATS_PATH: Final = "/turnstream/stats/"
WINDOWS_PATH: Final = "/turnstream/stats/windows/"
OUTPUT_RETENTION: Final = timedelta(days=7)
METADATA_TIMEOUT_S: Final = 60.0
METADATA_POLL_S: Final = 0.1


def _credentials(auth: KafkaAuth) -> dict[str, Any]:
    """The ``broker_credentials`` faust needs for ``auth`` (none for plaintext).

    faust hands the credentials to every client it builds -- consumers, the
    (transactional) producers and the admin client that creates the topics.
    """
    if auth.uses_sasl:
        credentials = faust.SASLCredentials(
            username=auth.sasl_username,
            password=auth.sasl_password,
            ssl_context=auth.ssl_context,
            mechanism=auth.sasl_mechanism,
        )
        # faust infers SASL_SSL from a context; say it for SASL_PLAINTEXT too.
        credentials.protocol = faust.types.auth.AuthProtocol(auth.protocol)
        return {"broker_credentials": credentials}
    if auth.ssl_context is not None:
        return {"broker_credentials": faust.SSLCredentials(auth.ssl_context)}
    return {}


class AnalyticsApp:
    """A faust worker folding the turn journal into analytics.

    Build one per run; :meth:`start` and :meth:`stop` run it inside the
    current event loop (no ``faust.Worker``, no signal handlers), and
    :meth:`run` does both around a stop event.

    Counters of this process (not persisted): ``records`` handed to the fold,
    ``undecodable`` records skipped, ``redelivered`` records at or below a
    loop's applied offset, ``published`` snapshots.

    Args:
        settings: validated settings.
        wire: the journal codec; loaded from ``settings.schema_dir`` if ``None``.
        analytics_codec: the snapshot codec; loaded likewise if ``None``.
    """

    def __init__(
        self,
        settings: AnalyticsSettings,
        *,
        wire: WireCodec | None = None,
        analytics_codec: AnalyticsCodec | None = None,
    ) -> None:
        self.settings = settings
        self.config: FoldConfig = settings.fold_config()
        self.wire = (
            wire if wire is not None else WireCodec(SchemaSet.load(settings.schema_dir))
        )
        self.analytics_codec = (
            analytics_codec
            if analytics_codec is not None
            else AnalyticsCodec.load(settings.schema_dir)
        )
        register_codecs(self.wire, self.analytics_codec)
        self.records = 0
        self.undecodable = 0
        self.redelivered = 0
        self.published = 0
        self._version = 0
        self._published_version = 0
        self._declared = False
        # Set by start(): agent.test_context() runs the agent without a broker,
        # where there is no consumer metadata to wait for.
        self._against_broker = False
        self._cached: tuple[tuple[int, tuple[int, ...]], AnalyticsSnapshot] | None = (
            None
        )
        self._app: Any = self._build_app()

    # ------------------------------------------------------------------ wiring

    def _build_app(self) -> Any:
        s = self.settings
        app = faust.App(
            s.app_id,
            broker=[f"kafka://{server}" for server in s.bootstrap.split(",")],
            store="memory://",
            processing_guarantee=s.guarantee.value,
            topic_partitions=s.partitions,
            topic_replication_factor=s.replication_factor,
            # One worker owns every partition it is assigned; standbys would
            # put other workers' loops into the table this worker reports.
            table_standby_replicas=0,
            consumer_auto_offset_reset="earliest",
            broker_session_timeout=s.session_timeout_s,
            # Three heartbeats per session, at most faust's default 3 s apart.
            broker_heartbeat_interval=min(3.0, s.session_timeout_s / 3),
            datadir=str(s.data_dir),
            web_enabled=s.web_enabled,
            web_bind=s.web_host,
            web_host=s.web_host,
            web_port=s.web_port,
            autodiscover=False,
            **_credentials(s.auth),
        )
        if s.guarantee is Guarantee.EXACTLY_ONCE:
            # faust enables transactions (and read_committed) only "in a
            # worker"; this app is started without faust.Worker.
            app.in_worker = True
        # Always, in both modes: read_committed, no record dropped around a
        # rebalance, changelog drained before commits, clean stops
        # (transport.py lists each fix).
        install_faust_fixes(app)
        self._events = app.topic(
            s.events_topic,
            key_serializer="raw",
            value_serializer=EVENTS_CODEC,
            partitions=s.partitions,
        )
        self._output = app.topic(
            s.analytics_topic,
            key_serializer="raw",
            value_serializer=SNAPSHOT_CODEC,
            partitions=1,
            deleting=True,
            retention=OUTPUT_RETENTION,
        )
        self._loops = app.Table(
            TABLE_NAME,
            default=None,
            key_type=str,
            value_type=LoopStatsValue,
            partitions=s.partitions,
            help="turnstream analytics state per loop id",
        )
        app.agent(self._events, name=f"{s.app_id}.fold")(self._fold_stream)
        app.timer(s.publish_interval_s, name=f"{s.app_id}.publish")(self._publish_tick)
        self._add_views(app)
        return app

    def _add_views(self, app: Any) -> None:
        owner = self

        class Totals(View):
            async def get(self, request: Request) -> Response:
                return self.json(totals_view(owner.snapshot()))

        class Windows(View):
            async def get(self, request: Request) -> Response:
                return self.json(windows_view(owner.snapshot()))

        app.page(STATS_PATH)(Totals)
        app.page(WINDOWS_PATH)(Windows)

    # -------------------------------------------------------------- processing

    async def _fold_stream(self, stream: Any) -> None:
        if self._against_broker:
            await self._wait_for_changelog_metadata()
        async for event in stream.events():
            message = event.message
            self.apply(event.value, message.topic, message.partition, message.offset)

    def apply(
        self,
        value: EnduringEvent | Undecodable,
        topic: str,
        partition: int,
        offset: int,
    ) -> Outcome | None:
        """Fold one decoded record into its loop's table value.

        Must run inside the faust stream (table writes need the current event).

        Returns:
            The fold's outcome, or ``None`` for a skipped undecodable record.
        """
        self.records += 1
        if isinstance(value, Undecodable):
            self.undecodable += 1
            self._version += 1
            logger.warning(
                "skipping undecodable record %s[%d]@%d (%d bytes, %s): %s",
                topic,
                partition,
                offset,
                value.size,
                value.kind,
                value.reason,
            )
            return None
        event = value
        loop_id = event.header.loop_id
        if loop_id is None:  # unreachable: the codec validates loop_id
            self.undecodable += 1
            return None
        key = str(loop_id)
        state = self._loops.get(key)
        if not isinstance(state, LoopStats):
            state = LoopStats.new(key, self.config)
        outcome = fold(state, event, self.config, Position(partition, offset))
        if outcome is Outcome.REDELIVERED:
            self.redelivered += 1
        else:
            self._loops[key] = state  # one changelog record: counters + marks
            self._version += 1
        return outcome

    async def _wait_for_changelog_metadata(self) -> None:
        """Block the agent until the consumer knows the changelog's partitions.

        faust checks table/source co-partitioning on the first table write; if
        the consumer's metadata does not list the changelog yet (a topic
        created moments before the group join), the write raises
        ``PartitionsMismatch``, the agent crashes and faust acks -- and so
        commits -- the record it was processing: it would be lost. Waiting
        here, before the stream hands out any record, keeps every record.

        Raises:
            TimeoutError: the metadata did not arrive in time (the agent is
                restarted by faust's supervisor with no record in flight).
        """
        changelog = self._loops.changelog_topic.get_topic_name()
        consumer = self._app.consumer
        async with asyncio.timeout(METADATA_TIMEOUT_S):
            # Metadata changes have no notification hook: poll, bounded above.
            while consumer.topic_partitions(changelog) != self.settings.partitions:  # noqa: ASYNC110
                await asyncio.sleep(METADATA_POLL_S)

    async def _publish_tick(self) -> None:
        if self._version == self._published_version:
            return
        version = self._version
        await self.publish()
        self._published_version = version

    async def publish(self) -> AnalyticsSnapshot:
        """Publish the current snapshot to the analytics topic now."""
        if not self._declared:
            await self._output.maybe_declare()
            self._declared = True
        snapshot = self.snapshot()
        # Keyed by app id and partition set: with several workers each owns a
        # disjoint set, and a reader merges the newest snapshot per key.
        owned = ",".join(str(p) for p in snapshot.partitions)
        key = f"{self.settings.app_id}:{owned}".encode()
        await self._output.send(key=key, value=snapshot)
        self.published += 1
        return snapshot

    # ------------------------------------------------------------------ views

    def partitions(self) -> list[int]:
        """Journal partitions this worker currently owns."""
        actives = self._app.assignor.assigned_actives()
        return sorted(
            tp.partition for tp in actives if tp.topic == self.settings.events_topic
        )

    def states(self) -> list[LoopStats]:
        """Every loop's state held by this worker."""
        return [v for v in self._loops.values() if isinstance(v, LoopStats)]

    def snapshot(self) -> AnalyticsSnapshot:
        """The merged analytics of this worker's loops (cached until they change)."""
        partitions = self.partitions()
        key = (self._version, tuple(partitions))
        cached = self._cached
        if cached is not None and cached[0] == key:
            return cached[1]
        snapshot = build_snapshot(
            self.states(),
            self.config,
            app_id=self.settings.app_id,
            partitions=partitions,
            undecodable=self.undecodable,
        )
        self._cached = (key, snapshot)
        return snapshot

    # --------------------------------------------------------------- lifecycle

    @property
    def faust_app(self) -> Any:
        """The underlying ``faust.App`` (untyped; for tests and extensions)."""
        return self._app

    @property
    def fold_agent(self) -> Any:
        """The faust agent folding the journal (``agent.test_context()`` in tests)."""
        return self._app.agents[f"{self.settings.app_id}.fold"]

    def isolation_level(self) -> str | None:
        """The running consumer's isolation level (``read_committed`` expected)."""
        return isolation_level(self._app)

    async def start(self) -> None:
        """Start the worker; returns after table recovery, with the web server up.

        The changelog and output topics are created first, so the consumer's
        first metadata already lists them (see :meth:`_wait_for_changelog_metadata`).
        """
        self._against_broker = True
        await self._declare_topics()
        await self._app.start()

    async def _declare_topics(self) -> None:
        await self._app.producer.maybe_start()
        await self._loops.changelog_topic.maybe_declare()
        await self._output.maybe_declare()
        self._declared = True

    def _crash_reason(self) -> BaseException | None:
        """Why faust stopped: a denied send, the app's crash reason, or its consumer's.

        A denied send comes first: faust crashes on what follows it (an
        ``IllegalOperation`` of the transaction it broke), not on the denial.
        """
        denied = getattr(self._app.producer, "denied", None)
        if isinstance(denied, BaseException):
            return denied
        for service in (self._app, getattr(self._app, "_consumer", None)):
            reason = getattr(service, "crash_reason", None)
            if isinstance(reason, BaseException):
                return reason
        return None

    async def stop(self, seconds: float = _STOP_TIMEOUT_S) -> None:
        """Stop the worker (flushes the producer and leaves the group).

        Bounded: a faust stop that hangs (e.g. on a group or transaction an
        ACL denies) is given up after ``seconds``.
        """
        try:
            async with asyncio.timeout(seconds):
                await self._app.stop()
                # The producer started before the app (to declare the topics)
                # or left behind by a crash is not the app's to stop.
                await self._app.producer.stop()
        except TimeoutError:
            logger.warning(
                "the worker did not stop in time; exiting anyway",
                extra={"timeout_s": seconds},
            )
        except Exception as exc:  # noqa: BLE001 - a stop after a crash must end
            # faust's stop after a crash can fail on what crashed it.
            logger.warning(
                "the worker's stop failed; exiting anyway",
                extra={"exc_type": type(exc).__name__},
            )
        finally:
            await self._close_clients()

    async def _close_clients(self) -> None:
        """Close every Kafka client faust's producer made.

        faust closes its transactional clients only at the end of its own
        producer's stop, which a stop given up on (after a denial) never
        reaches, and never closes one whose start a stop cut short; left
        open, each is reported as an unclosed client when the process exits.
        """
        close = getattr(self._app.producer, "close_clients", None)
        if close is not None:
            await close(_CLIENT_STOP_S)

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set or the faust app stops by itself.

        ``stop`` is honoured while starting too: a start that waits forever
        (faust waits for a group or a transaction an ACL denies) is
        cancelled, so SIGTERM always ends the worker.

        Raises:
            WorkerStoppedError: faust stopped without being asked (a crash;
                :class:`WorkerDeniedError` if an ACL denied a topic).
        """
        stop_wait = asyncio.ensure_future(stop.wait())
        try:
            starting = asyncio.ensure_future(self.start())
            await asyncio.wait(
                {starting, stop_wait}, return_when=asyncio.FIRST_COMPLETED
            )
            if not starting.done():
                starting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await starting
                return
            try:
                starting.result()
            except Exception as exc:
                if type(exc).__name__ in DENIALS:  # e.g. creating its topics
                    raise stopped_error(exc) from exc
                raise
            stopped = asyncio.ensure_future(self._app.wait_until_stopped())
            denial = asyncio.ensure_future(self._app.producer.denial.wait())
            await asyncio.wait(
                {stopped, stop_wait, denial}, return_when=asyncio.FIRST_COMPLETED
            )
            for waiter in (stopped, denial):
                waiter.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await waiter
            if not stop.is_set():
                # Nobody asked: faust crashed, or a send was denied (faust
                # runs on without what the denied topic should get).
                raise stopped_error(self._crash_reason())
        finally:
            stop_wait.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stop_wait
            # After a crash nothing is left to flush that could succeed.
            await self.stop(_STOP_TIMEOUT_S if stop.is_set() else _CRASHED_STOP_S)
