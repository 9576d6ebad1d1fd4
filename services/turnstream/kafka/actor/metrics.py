"""Counters and a readiness flag for the loop-actor service.

Owns :class:`ServiceMetrics` and :class:`LatencyHistogram`: plain attributes
and dictionaries that the service updates from its own tasks (single event
loop, so no locks) and that an exporter (e.g. a Prometheus endpoint in the
CLI) reads. Nothing here does I/O. Pure: stdlib and value types only; must not
import aiokafka, the runtime or the wire codec.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from turnstream.content import ToolResultMessage
from turnstream.events import (
    EnduringEvent,
    StepDone,
    TurnDone,
    TurnFailed,
    TurnInterrupted,
    TurnRejected,
    TurnStarted,
)
from turnstream.kafka.connection import ConnectStats

__all__ = [
    "DEFAULT_LATENCY_BUCKETS",
    "TURN_DURATION_BUCKETS",
    "LatencyHistogram",
    "ServiceMetrics",
]

DEFAULT_LATENCY_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Upper bounds in seconds (Prometheus' default buckets)."""

TURN_DURATION_BUCKETS: tuple[float, ...] = (
    *DEFAULT_LATENCY_BUCKETS[DEFAULT_LATENCY_BUCKETS.index(0.05) :],
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)
"""Upper bounds in seconds for a whole turn (model calls and tools included):
Prometheus' default buckets from 50 ms on, then up to ten minutes."""

_OPEN_TURNS_KEPT = 100_000  # start times of turns still open, before starting over


@dataclass
class LatencyHistogram:
    """A cumulative histogram of durations (seconds), Prometheus-shaped.

    Attributes:
        buckets: upper bounds, increasing; an implicit ``+Inf`` follows.
        counts: observations per bucket (non-cumulative; the last is ``+Inf``).
        total: the sum of all observations.
        count: the number of observations.
    """

    buckets: Sequence[float] = DEFAULT_LATENCY_BUCKETS
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if list(self.buckets) != sorted(self.buckets):
            raise ValueError("buckets must increase")
        self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, seconds: float) -> None:
        """Record one duration."""
        self.counts[bisect.bisect_left(self.buckets, seconds)] += 1
        self.total += seconds
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, observations <= bound)`` pairs, ending with ``inf``."""
        running = 0
        pairs: list[tuple[float, int]] = []
        for bound, count in zip(
            [*self.buckets, float("inf")], self.counts, strict=True
        ):
            running += count
            pairs.append((bound, running))
        return pairs

    def quantile(self, q: float) -> float:
        """An upper-bound estimate of the ``q`` quantile (0 without data)."""
        if not self.count:
            return 0.0
        rank = q * self.count
        for bound, seen in self.cumulative():
            if seen >= rank:
                return bound
        return float("inf")


@dataclass
class ServiceMetrics:
    """What the loop-actor service exposes for health checks and dashboards.

    Attributes:
        ready: the consumer joined its group and every assigned partition is
            restored (readiness probe).
        partitions: commands partitions currently owned.
        live_loops: loops with a running actor.
        turns_started: ``TurnStarted`` events committed.
        steps_committed: ``StepDone`` events committed.
        terminals: committed terminals by type name.
        turn_duration: seconds from a turn's ``TurnStarted`` to its terminal
            (event timestamps; turns started by this process).
        failures: ``TurnFailed`` by failure kind.
        rejections: ``TurnRejected`` by reason.
        tokens: tokens of finished turns (``TurnDone`` usage), by ``input`` /
            ``output``.
        tool_calls: tool results committed (``StepDone``), by ``ok`` /
            ``error``.
        commits: transactions committed.
        commit_retries: transactions aborted and retried (transient errors).
        commit_failures: commits that finally failed.
        offset_mispredictions: transactions written again because their events
            did not land on the offsets predicted for the state records
            (something else wrote to the events partition).
        commit_latency: seconds from an append request to its commit.
        group_sizes: appends per transaction (group commit), by size.
        commands: commands read, by type name.
        duplicates: redelivered commands skipped by command id.
        passivated: idle loops let go of beyond the resident budget (their
            actor stopped, their state kept encoded until their next command).
        dead_letters: undecodable commands sent to the dead-letter topic.
        dead_letters_truncated: of those, written as bounded dead letters
            (the whole record did not fit the dead-letter topic).
        dead_letters_dropped: poison records not even a bounded dead letter
            could be written for (their offsets were given up).
        deltas_sent: live events handed to the deltas producer.
        deltas_dropped: live events dropped (buffer full or send failed).
        fenced: partitions lost to a newer producer.
        restores: loops restored, by ``"snapshot"``, ``"replay"`` or ``"new"``.
        consumer_lag: per commands partition, end offset minus position.
        kafka_reachable: whether the last broker check answered.
        kafka_outages: times the broker stopped answering.
        kafka_connects: connection attempts of this process's Kafka clients
            and the refused ones (their reconnect backoff bounds the rate
            while a broker is down).
        rebalances: consumer-group rebalances this process took part in.
        partitions_kept: partitions assigned again to this process by a
            rebalance, carried on without a restore.
        partitions_moved: partitions a rebalance moved to another process.
        rejoins: commands consumers restarted because a group join hung.
        bridged: commands read while the group rebalanced (by the group-less
            reader that keeps running turns reachable).
        drain_interrupted: turns still running when a planned stop's drain
            timeout ran out (they were interrupted; a continuing agent's were
            handed over open, their running step dropped).
    """

    ready: bool = False
    partitions: set[int] = field(default_factory=set)
    live_loops: int = 0
    turns_started: int = 0
    steps_committed: int = 0
    terminals: Counter[str] = field(default_factory=Counter)
    turn_duration: LatencyHistogram = field(
        default_factory=lambda: LatencyHistogram(TURN_DURATION_BUCKETS)
    )
    failures: Counter[str] = field(default_factory=Counter)
    rejections: Counter[str] = field(default_factory=Counter)
    tokens: Counter[str] = field(default_factory=Counter)
    tool_calls: Counter[str] = field(default_factory=Counter)
    _turn_starts: dict[object, float] = field(default_factory=dict, repr=False)
    commits: int = 0
    commit_retries: int = 0
    commit_failures: int = 0
    offset_mispredictions: int = 0
    commit_latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    group_sizes: Counter[int] = field(default_factory=Counter)
    commands: Counter[str] = field(default_factory=Counter)
    duplicates: int = 0
    passivated: int = 0
    dead_letters: int = 0
    dead_letters_truncated: int = 0
    dead_letters_dropped: int = 0
    deltas_sent: int = 0
    deltas_dropped: int = 0
    fenced: int = 0
    restores: Counter[str] = field(default_factory=Counter)
    consumer_lag: dict[int, int] = field(default_factory=dict)
    kafka_reachable: bool = True
    kafka_outages: int = 0
    kafka_connects: ConnectStats = field(default_factory=ConnectStats)
    rebalances: int = 0
    partitions_kept: int = 0
    partitions_moved: int = 0
    bridged: int = 0
    rejoins: int = 0
    drain_interrupted: int = 0

    @property
    def kafka_connect_attempts(self) -> int:
        """Broker connection attempts of this process's clients."""
        return self.kafka_connects.attempts

    @property
    def kafka_connect_failures(self) -> int:
        """Of those, the ones that failed."""
        return self.kafka_connects.failures

    def committed(self, events: Iterable[EnduringEvent]) -> None:
        """Count the turn-level events of one committed append."""
        for event in events:
            match event:
                case TurnStarted():
                    self.turns_started += 1
                    self._started(event)
                case StepDone():
                    self.steps_committed += 1
                    for message in event.messages[1:]:
                        if isinstance(message, ToolResultMessage):
                            self.tool_calls["error" if message.is_error else "ok"] += 1
                case TurnDone() | TurnFailed() | TurnInterrupted():
                    self.terminals[event.type_name] += 1
                    self._ended(event)
                    if isinstance(event, TurnDone):
                        self.tokens["input"] += event.usage.input_tokens
                        self.tokens["output"] += event.usage.output_tokens
                    elif isinstance(event, TurnFailed):
                        self.failures[event.error.kind.value] += 1
                case TurnRejected():
                    self.rejections[event.reason.value] += 1
                case _:
                    pass

    def _started(self, event: TurnStarted) -> None:
        at = event.header.created_at
        if at is None or event.header.turn_id is None:
            return
        if len(self._turn_starts) >= _OPEN_TURNS_KEPT:
            self._turn_starts.clear()
        self._turn_starts[event.header.turn_id] = at.timestamp()

    def _ended(self, event: TurnDone | TurnFailed | TurnInterrupted) -> None:
        started = self._turn_starts.pop(event.header.turn_id, None)
        at = event.header.created_at
        if started is not None and at is not None:
            self.turn_duration.observe(max(at.timestamp() - started, 0.0))

    @property
    def total_lag(self) -> int:
        """Consumer lag summed over the owned partitions."""
        return sum(self.consumer_lag.values())
