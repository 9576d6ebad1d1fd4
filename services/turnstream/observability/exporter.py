"""The loop-actor service's counters, exported in the Prometheus format.

Owns :class:`MetricsSource` and :class:`HistogramSource` (the structural shape
of the counters the service keeps, e.g. ``turnstream.kafka.actor.metrics.
ServiceMetrics``), :class:`ServiceCollector`, which reads such a source at every
scrape (nothing is copied or double-counted between scrapes), and
:func:`service_registry`, a private :class:`~prometheus_client.CollectorRegistry`
holding one collector (so several services in one process never clash on the
global registry).

Adapters layer: imports prometheus-client and the stdlib; must not import
aiokafka or any other turnstream package.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Final, Protocol

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

__all__ = [
    "PREFIX",
    "HistogramSource",
    "MetricsSource",
    "ServiceCollector",
    "service_registry",
]

PREFIX: Final = "turnstream"


class HistogramSource(Protocol):
    """A cumulative histogram of seconds."""

    @property
    def total(self) -> float:
        """The sum of all observations."""
        ...

    @property
    def count(self) -> int:
        """The number of observations."""
        ...

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, observations <= bound)`` pairs ending with ``inf``."""
        ...


class MetricsSource(Protocol):
    """The loop-actor service's counters, read at scrape time."""

    @property
    def ready(self) -> bool:
        """Partitions assigned and every owned loop restored."""
        ...

    @property
    def partitions(self) -> set[int]:
        """Commands partitions owned."""
        ...

    @property
    def live_loops(self) -> int:
        """Loops with a running actor."""
        ...

    @property
    def turns_started(self) -> int:
        """``TurnStarted`` events committed."""
        ...

    @property
    def steps_committed(self) -> int:
        """``StepDone`` events committed."""
        ...

    @property
    def terminals(self) -> Mapping[str, int]:
        """Committed terminals by type name."""
        ...

    @property
    def commits(self) -> int:
        """Transactions committed."""
        ...

    @property
    def commit_retries(self) -> int:
        """Transactions aborted and retried."""
        ...

    @property
    def commit_failures(self) -> int:
        """Commits that finally failed."""
        ...

    @property
    def offset_mispredictions(self) -> int:
        """Transactions written again: their events missed the predicted offsets."""
        ...

    @property
    def turn_duration(self) -> HistogramSource:
        """Seconds from a turn's start to its terminal."""
        ...

    @property
    def failures(self) -> Mapping[str, int]:
        """Failed turns by failure kind."""
        ...

    @property
    def rejections(self) -> Mapping[str, int]:
        """Refused inputs by reason."""
        ...

    @property
    def tokens(self) -> Mapping[str, int]:
        """Tokens of finished turns, by input / output."""
        ...

    @property
    def tool_calls(self) -> Mapping[str, int]:
        """Tool results committed, by ok / error."""
        ...

    @property
    def commit_latency(self) -> HistogramSource:
        """Seconds from an append request to its commit."""
        ...

    @property
    def commands(self) -> Mapping[str, int]:
        """Commands read, by type name."""
        ...

    @property
    def duplicates(self) -> int:
        """Redelivered commands skipped."""
        ...

    @property
    def passivated(self) -> int:
        """Idle loops let go of beyond the resident budget."""
        ...

    @property
    def dead_letters(self) -> int:
        """Undecodable commands sent to the dead-letter topic."""
        ...

    @property
    def dead_letters_truncated(self) -> int:
        """Dead letters written bounded (the whole record did not fit)."""
        ...

    @property
    def dead_letters_dropped(self) -> int:
        """Poison records given up (not even a bounded dead letter fit)."""
        ...

    @property
    def deltas_sent(self) -> int:
        """Live events handed to the deltas producer."""
        ...

    @property
    def deltas_dropped(self) -> int:
        """Live events dropped."""
        ...

    @property
    def fenced(self) -> int:
        """Partitions lost to a newer producer."""
        ...

    @property
    def restores(self) -> Mapping[str, int]:
        """Loops restored, by how."""
        ...

    @property
    def consumer_lag(self) -> Mapping[int, int]:
        """Per commands partition, end offset minus position."""
        ...

    @property
    def kafka_reachable(self) -> bool:
        """Whether the last broker check answered."""
        ...

    @property
    def kafka_outages(self) -> int:
        """Times the broker stopped answering."""
        ...

    @property
    def kafka_connect_attempts(self) -> int:
        """Broker connection attempts of this process's clients."""
        ...

    @property
    def kafka_connect_failures(self) -> int:
        """Of those, the ones that failed."""
        ...

    @property
    def rebalances(self) -> int:
        """Consumer-group rebalances taken part in."""
        ...

    @property
    def partitions_kept(self) -> int:
        """Partitions a rebalance left with this process."""
        ...

    @property
    def partitions_moved(self) -> int:
        """Partitions a rebalance moved to another process."""
        ...

    @property
    def rejoins(self) -> int:
        """Commands consumers restarted because a group join hung."""
        ...

    @property
    def bridged(self) -> int:
        """Commands read while the group rebalanced."""
        ...

    @property
    def drain_interrupted(self) -> int:
        """Turns interrupted at a planned stop's drain timeout."""
        ...


def _counter(
    name: str, documentation: str, value: float, labels: Sequence[str] = ()
) -> CounterMetricFamily:
    family = CounterMetricFamily(f"{PREFIX}_{name}", documentation, labels=labels)
    if not labels:
        family.add_metric([], value)
    return family


def _by_label(
    name: str, documentation: str, label: str, values: Mapping[str, int]
) -> CounterMetricFamily:
    family = CounterMetricFamily(f"{PREFIX}_{name}", documentation, labels=[label])
    for key, value in sorted(values.items()):
        family.add_metric([key], value)
    return family


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", documentation, value=value)


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


class ServiceCollector(Collector):
    """Reads a :class:`MetricsSource` on every scrape."""

    def __init__(self, source: MetricsSource) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        """Yield every metric family with the source's current values."""
        s = self._source
        yield _gauge("ready", "1 once partitions are assigned and restored.", s.ready)
        yield _gauge(
            "partitions_owned", "Commands partitions owned.", len(s.partitions)
        )
        yield _gauge("live_loops", "Loops with a running actor.", s.live_loops)
        yield _counter(
            "turns_started", "TurnStarted events committed.", s.turns_started
        )
        yield _counter("steps", "StepDone events committed.", s.steps_committed)
        yield _by_label(
            "turn_terminals",
            "Turn terminals committed, by kind.",
            "kind",
            s.terminals,
        )
        yield self._histogram(
            "turn_duration_seconds",
            "Seconds from TurnStarted to the turn's terminal (event time).",
            s.turn_duration,
        )
        yield _by_label(
            "turn_failures", "Failed turns, by failure kind.", "kind", s.failures
        )
        yield _by_label(
            "inputs_rejected",
            "Inputs refused (TurnRejected), by reason.",
            "reason",
            s.rejections,
        )
        yield _by_label(
            "tokens", "Tokens of finished turns, by kind.", "kind", s.tokens
        )
        yield _by_label(
            "tool_calls",
            "Tool results committed, by outcome.",
            "outcome",
            s.tool_calls,
        )
        yield _counter("commits", "Journal transactions committed.", s.commits)
        yield _counter(
            "commit_retries", "Transactions aborted and retried.", s.commit_retries
        )
        yield _counter(
            "commit_failures", "Commits that finally failed.", s.commit_failures
        )
        yield _counter(
            "offset_mispredictions",
            "Transactions written again: their events missed the offsets predicted "
            "for the state records.",
            s.offset_mispredictions,
        )
        yield self._histogram(
            "commit_latency_seconds",
            "Seconds from a journal append request to its commit (each append of a "
            "group-committed transaction is one observation, so the count is the "
            "appends, not commits_total).",
            s.commit_latency,
        )
        yield _by_label("commands", "Commands read, by type.", "type", s.commands)
        yield _counter(
            "duplicate_commands", "Redelivered commands skipped.", s.duplicates
        )
        yield _counter(
            "loops_passivated",
            "Idle loops let go of beyond the resident budget (restored on their "
            "next command).",
            s.passivated,
        )
        yield _counter(
            "dead_letters", "Undecodable commands dead-lettered.", s.dead_letters
        )
        yield _counter(
            "dead_letters_truncated",
            "Dead letters written bounded (reason, size, key, a prefix).",
            s.dead_letters_truncated,
        )
        yield _counter(
            "dead_letters_dropped",
            "Poison records given up: not even a bounded dead letter fit.",
            s.dead_letters_dropped,
        )
        yield _counter("deltas_sent", "Live events produced.", s.deltas_sent)
        yield _counter(
            "delta_drops",
            "Live events dropped (buffer full or send failed).",
            s.deltas_dropped,
        )
        yield _counter("fenced", "Partitions lost to a newer producer.", s.fenced)
        yield _by_label("restores", "Loops restored, by how.", "how", s.restores)
        yield self._lag(s.consumer_lag)
        yield _gauge(
            "kafka_reachable",
            "1 while the broker answers the actor's checks, 0 during an outage.",
            s.kafka_reachable,
        )
        yield _counter(
            "kafka_outages", "Times the broker stopped answering.", s.kafka_outages
        )
        yield _counter(
            "kafka_connects",
            "Broker connection attempts (backed off while a broker refuses them).",
            s.kafka_connect_attempts,
        )
        yield _counter(
            "kafka_connect_failures",
            "Broker connection attempts that failed.",
            s.kafka_connect_failures,
        )
        yield _counter(
            "rebalances", "Consumer-group rebalances taken part in.", s.rebalances
        )
        yield _counter(
            "partitions_kept",
            "Partitions a rebalance left here (carried on, nothing interrupted).",
            s.partitions_kept,
        )
        yield _counter(
            "partitions_moved",
            "Partitions a rebalance moved to another process.",
            s.partitions_moved,
        )
        yield _counter(
            "group_rejoins",
            "Commands consumers restarted because a group join hung.",
            s.rejoins,
        )
        yield _counter(
            "bridged_commands",
            "Commands read while the group rebalanced (running turns kept reachable).",
            s.bridged,
        )
        yield _counter(
            "drain_interrupted",
            "Turns still running at a planned stop's drain timeout (interrupted).",
            s.drain_interrupted,
        )

    @staticmethod
    def _histogram(
        name: str, documentation: str, histogram: HistogramSource
    ) -> HistogramMetricFamily:
        return HistogramMetricFamily(
            f"{PREFIX}_{name}",
            documentation,
            buckets=[(_bound(b), n) for b, n in histogram.cumulative()],
            sum_value=histogram.total,
        )

    @staticmethod
    def _lag(lag: Mapping[int, int]) -> GaugeMetricFamily:
        family = GaugeMetricFamily(
            f"{PREFIX}_consumer_lag_records",
            "Commands not yet read (records), per commands partition.",
            labels=["partition"],
        )
        for partition, value in sorted(lag.items()):
            family.add_metric([str(partition)], value)
        return family


def service_registry(
    source: MetricsSource, *, process: bool = True
) -> CollectorRegistry:
    """A fresh registry exporting ``source`` (and nothing global).

    Args:
        source: the service's counters.
        process: also export the process's CPU, memory and file descriptors.
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServiceCollector(source))
    if process:
        ProcessCollector(registry=registry)
    return registry
