"""The loop-actor side of the Kafka adapters: turnstream's loops as a group member.

A table of contents, in the order a command travels:

- ``service``: :class:`LoopActorService` (consumer-group member: start, drain,
  ordered shutdown), with ``settings`` (:class:`ServiceSettings`) and its
  parts, which share one ``membership``: ``consumer_loop`` (join, fetch,
  dispatch, the rebalance bridge), ``partitions`` (rebalance callbacks,
  takeover, handover, rebuild; ``takeover_retries`` backs failed takeovers
  off), ``watchers`` (lag, broker health), ``assignment`` (the sticky
  assignor) and ``group_leave`` (a static member leaving for good);
- ``runner``: :class:`PartitionRunner`, everything done for one owned commands
  partition (dispatch to loop actors in offset order, handover), with
  ``runner_context`` (:class:`RunnerContext`, what the runners share) and
  ``live_loops`` (the partition's loop actors: created, restored,
  passivated, stopped);
- ``poison``: which records must not run (undecodable, mis-keyed,
  misrouted) and their full or bounded dead letters;
- ``writer``: :class:`PartitionWriter`, the partition's transactional producer
  and its single writer task (events + state + offsets in one transaction),
  with ``transaction`` (one transaction's body and requests),
  ``offset_prediction`` (where the next records land), ``producer_recovery``
  (the producer's start, and its recovery after a failed transaction) and
  ``writer_settings``;
- ``offsets``: :class:`CommandOffsets`, the command-offset ledger;
- ``journal``: :class:`PartitionJournal`, the runtime's ``Journal`` port for the
  loops of one partition (snapshots + journal tail);
- ``deltas``: :class:`DeltaPublisher`, the live-only ``LiveHub`` (ephemeral
  events to the deltas topic);
- ``metrics``: :class:`ServiceMetrics`, what ``/metrics`` and ``/ready`` show.

Imports the shared modules of :mod:`turnstream.kafka` (connection, security,
clients, faults, records, topology, reader), the runtime and the wire codec;
never the client or admin subpackages, never a composition root.
"""

from turnstream.kafka.actor.deltas import DeltaPublisher
from turnstream.kafka.actor.journal import PartitionJournal
from turnstream.kafka.actor.metrics import LatencyHistogram, ServiceMetrics
from turnstream.kafka.actor.offsets import CommandOffsets
from turnstream.kafka.actor.runner import PartitionRunner, RunnerContext, SetupFor
from turnstream.kafka.actor.service import LoopActorService
from turnstream.kafka.actor.settings import ServiceSettings
from turnstream.kafka.actor.writer import (
    PartitionWriter,
    WriterSettings,
    WriterState,
    transactional_id,
)

__all__ = [
    "CommandOffsets",
    "DeltaPublisher",
    "LatencyHistogram",
    "LoopActorService",
    "PartitionJournal",
    "PartitionRunner",
    "PartitionWriter",
    "RunnerContext",
    "ServiceMetrics",
    "ServiceSettings",
    "SetupFor",
    "WriterSettings",
    "WriterState",
    "transactional_id",
]
