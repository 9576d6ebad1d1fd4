"""Example user processor: alert when a loop fails three turns in a row.

A template for writing your own processor over the journal. It shows the
three pieces every processor needs:

1. **Pure logic** -- :class:`FailureStreak`, one loop's streak, folded from
   typed events (``TurnFailed`` extends it, ``TurnDone`` resets it,
   ``TurnInterrupted`` leaves it alone). Unit-test it without faust.
2. **Idempotence** -- the state remembers the journal offset it last applied
   and ignores anything at or below it, so a redelivered record (at-least-once
   consumption, a restart before the offset commit) never counts twice. The
   state and that mark are one table value, written together.
3. **faust wiring** -- :func:`build_app`: the journal topic decoded by the
   registered ``turnstream_avro`` codec, read ``read_committed``, a table
   keyed by loop id (co-partitioned with the journal: its partition count is
   read from the journal topic when the app starts), and an output topic.
   The brokers and the journal topic come from the same settings as the
   analytics worker (``KAFKA_BOOTSTRAP_SERVERS``,
   ``TURNSTREAM_ANALYTICS_EVENTS_TOPIC``). An alert is logged (WARNING, no
   payload text) and published as a JSON record :class:`StreakAlert` keyed by
   loop id.

An alert fires once when a streak reaches the threshold; the next alert for
that loop needs a ``TurnDone`` first.

Run it::

    python -m turnstream.analytics.examples.failure_streak --alerts-topic my.alerts

May import faust (it is an analytics processor); must not import aiokafka
directly, :mod:`turnstream.runtime` or :mod:`turnstream.kafka`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import faust

from turnstream.analytics.codecs import EVENTS_CODEC, Undecodable, register_codecs
from turnstream.analytics.settings import AnalyticsSettings
from turnstream.analytics.transport import adopt_partition_count, install_faust_fixes
from turnstream.events import EnduringEvent, TurnDone, TurnFailed

__all__ = [
    "DEFAULT_THRESHOLD",
    "FailureStreak",
    "StreakAlert",
    "build_app",
    "main",
]

logger = logging.getLogger(__name__)

DEFAULT_THRESHOLD: Final = 3


@dataclass(frozen=True, slots=True)
class StreakAlert:
    """A loop failed ``failures`` turns in a row.

    Attributes:
        loop_id: the loop.
        failures: the streak length when the alert fired (the threshold).
        failure_kinds: ``TurnFailed.error.kind`` of each failed turn, in order.
        last_turn_id: the turn that completed the streak.
        at: ``created_at`` of that ``TurnFailed`` (ISO 8601), if known.
    """

    loop_id: str
    failures: int
    failure_kinds: tuple[str, ...]
    last_turn_id: str
    at: str | None

    def to_dict(self) -> dict[str, Any]:
        """The JSON record published to the alerts topic."""
        return {
            "type": "FailureStreakAlert",
            "loop_id": self.loop_id,
            "failures": self.failures,
            "failure_kinds": list(self.failure_kinds),
            "last_turn_id": self.last_turn_id,
            "at": self.at,
        }


@dataclass(slots=True)
class FailureStreak:
    """One loop's run of consecutive failed turns.

    Attributes:
        threshold: failures in a row that raise an alert.
        kinds: failure kinds of the current streak (its length is the streak).
        alerted: whether the current streak already alerted.
        offset: journal offset of the last applied record (redelivery guard).
    """

    threshold: int = DEFAULT_THRESHOLD
    kinds: list[str] = field(default_factory=list)
    alerted: bool = False
    offset: int | None = None

    @property
    def streak(self) -> int:
        """Consecutive failed turns so far."""
        return len(self.kinds)

    def observe(
        self, event: EnduringEvent, offset: int | None = None
    ) -> StreakAlert | None:
        """Fold one journal event of this loop; return an alert when one fires.

        Args:
            event: the loop's next event.
            offset: its journal offset; a record at or below the last applied
                offset is ignored (it was already counted).
        """
        if offset is not None:
            if self.offset is not None and offset <= self.offset:
                return None
            self.offset = offset
        if isinstance(event, TurnDone):
            self.kinds.clear()
            self.alerted = False
            return None
        if not isinstance(event, TurnFailed):
            return None
        self.kinds.append(event.error.kind.value)
        # Only the threshold's worth is kept: the state stays bounded.
        del self.kinds[: -self.threshold]
        if self.alerted or self.streak < self.threshold:
            return None
        self.alerted = True
        created = event.header.created_at
        return StreakAlert(
            loop_id=str(event.header.loop_id),
            failures=self.streak,
            failure_kinds=tuple(self.kinds),
            last_turn_id=str(event.header.turn_id),
            at=None if created is None else created.isoformat(),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the table value)."""
        return {
            "kinds": list(self.kinds),
            "alerted": self.alerted,
            "offset": self.offset,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, threshold: int) -> FailureStreak:
        """Inverse of :meth:`to_dict`; ``None`` gives a fresh streak."""
        if data is None:
            return cls(threshold=threshold)
        offset = data.get("offset")
        return cls(
            threshold=threshold,
            kinds=[str(k) for k in data.get("kinds", [])],
            alerted=bool(data.get("alerted", False)),
            offset=None if offset is None else int(offset),
        )


@dataclass(frozen=True, slots=True)
class StreakApp:
    """The faust app of the example and its parts (faust objects are untyped).

    Attributes:
        app: the ``faust.App``.
        agent: the detecting agent (``agent.test_context()`` in tests).
        table: the per-loop streak table.
        alerts: the alerts topic.
        events_topic: the journal topic it reads.
        partitions: the journal's partition count if given, else ``None``
            (read from the topic by :meth:`start`).
    """

    app: Any
    agent: Any
    table: Any
    alerts: Any
    events_topic: str
    partitions: int | None

    async def start(self) -> int:
        """Start the processor; returns the journal's partition count.

        Without an explicit count, the journal topic's is read from the broker
        first, so the table is co-partitioned with it whatever it is; the
        alerts topic is created if missing.
        """
        partitions = self.partitions
        if partitions is None:
            partitions = await adopt_partition_count(self.app, self.events_topic)
        # The alerts topic is created here: brokers need not auto-create topics
        # (a send to a missing one waits for its metadata until it times out).
        await self.app.producer.maybe_start()
        await self.alerts.maybe_declare()
        await self.app.start()
        return partitions

    async def stop(self) -> None:
        """Stop the processor (leaves the group, flushes the producer)."""
        await self.app.stop()


def build_app(
    *,
    app_id: str = "turnstream-failure-streak",
    bootstrap: str | None = None,
    events_topic: str | None = None,
    alerts_topic: str = "turnstream.alerts.v1",
    partitions: int | None = None,
    threshold: int = DEFAULT_THRESHOLD,
    data_dir: Path = Path("var/failure-streak"),
    publish: Callable[[StreakAlert], Awaitable[None]] | None = None,
    env: Mapping[str, str] | None = None,
) -> StreakApp:
    """Wire the failure-streak processor into a new faust app.

    Args:
        app_id: faust app id (consumer group, changelog prefix).
        bootstrap: comma-separated ``host:port`` list; by default the analytics
            worker's (``KAFKA_BOOTSTRAP_SERVERS``, else 127.0.0.1:19092).
        events_topic: the journal topic; by default the analytics worker's
            (``TURNSTREAM_ANALYTICS_EVENTS_TOPIC``, else ``turnstream.events.v1``).
        alerts_topic: where alerts are published (JSON, keyed by loop id).
        partitions: partition count of the journal (the table uses the same);
            by default :meth:`StreakApp.start` reads it from the topic.
        threshold: failed turns in a row that raise an alert.
        data_dir: faust's data directory.
        publish: how an alert leaves the processor; the default sends it to
            ``alerts_topic`` (tests pass a recording function).
        env: where the defaults are read from (the process environment).

    Raises:
        ConfigError: a setting read from ``env`` is invalid.
    """
    settings = AnalyticsSettings.from_env(os.environ if env is None else env)
    bootstrap = bootstrap or settings.bootstrap
    events_topic = events_topic or settings.events_topic
    register_codecs()  # the process-default wire codec decodes the journal
    # faust creates only the last level of its data directory, at start.
    data_dir.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        app_id,
        broker=[f"kafka://{s}" for s in bootstrap.split(",")],
        store="memory://",
        table_standby_replicas=0,
        consumer_auto_offset_reset="earliest",
        datadir=str(data_dir),
        web_enabled=False,
        autodiscover=False,
    )
    if partitions is not None:
        app.conf.topic_partitions = partitions
    # read_committed, no record lost or dropped (fresh changelog, rebalances),
    # changelog drained before commits, clean stops: transport.py lists them.
    install_faust_fixes(app)
    events = app.topic(
        events_topic,
        key_serializer="raw",
        value_serializer=EVENTS_CODEC,
        partitions=partitions,
    )
    alerts = app.topic(alerts_topic, key_serializer="raw", value_serializer="json")
    table = app.Table(
        "failure-streaks", default=None, key_type=str, partitions=partitions
    )

    async def send_alert(alert: StreakAlert) -> None:
        await alerts.send(key=alert.loop_id.encode(), value=alert.to_dict())

    emit = publish if publish is not None else send_alert

    async def detect(stream: Any) -> None:
        async for record in stream.events():
            value = record.value
            if isinstance(value, Undecodable) or not isinstance(
                value, TurnDone | TurnFailed
            ):
                continue
            key = str(value.header.loop_id)
            state = FailureStreak.from_dict(table.get(key), threshold)
            alert = state.observe(value, record.message.offset)
            table[key] = state.to_dict()  # streak and offset mark, one record
            if alert is not None:
                logger.warning(
                    "loop %s failed %d turns in a row (%s)",
                    alert.loop_id,
                    alert.failures,
                    ", ".join(alert.failure_kinds),
                )
                await emit(alert)

    agent = app.agent(events, name=f"{app_id}.detect")(detect)
    return StreakApp(
        app=app,
        agent=agent,
        table=table,
        alerts=alerts,
        events_topic=events_topic,
        partitions=partitions,
    )


async def _serve(streak: StreakApp) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await streak.start()
    try:
        await stop.wait()
    finally:
        await streak.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the example until SIGINT/SIGTERM."""
    parser = argparse.ArgumentParser(
        prog="python -m turnstream.analytics.examples.failure_streak"
    )
    parser.add_argument(
        "--bootstrap", help="brokers (default: $KAFKA_BOOTSTRAP_SERVERS)"
    )
    parser.add_argument(
        "--events-topic",
        help="journal topic (default: $TURNSTREAM_ANALYTICS_EVENTS_TOPIC)",
    )
    parser.add_argument("--alerts-topic", default="turnstream.alerts.v1")
    parser.add_argument(
        "--partitions", type=int, help="journal partitions (default: the topic's)"
    )
    parser.add_argument("--threshold", type=int, default=DEFAULT_THRESHOLD)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    streak = build_app(
        bootstrap=args.bootstrap,
        events_topic=args.events_topic,
        alerts_topic=args.alerts_topic,
        partitions=args.partitions,
        threshold=args.threshold,
    )
    asyncio.run(_serve(streak))
    return 0


if __name__ == "__main__":
    sys.exit(main())
