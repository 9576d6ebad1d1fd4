"""The client side of the Kafka adapters: what an application that talks to loops needs.

A table of contents:

- ``session``: :class:`KafkaSession`, the Session API over Kafka (submit,
  interrupt, gate answers, retract; live subscriptions merging the journal and
  the deltas topic; journal replay; ``submit_and_wait`` / ``submit_turn`` /
  ``follow``), built of ``sender`` (the commands producer), ``live_feed`` (the
  live readers behind its subscriptions) and ``submit_options`` (what every
  submit variant takes beside the input);
- ``cursor`` and ``attach``: :class:`Cursor` (a position in one loop's
  stream, an opaque URL-safe string), :class:`Streamed` (an event with the
  cursor after it), :class:`DeltasExpired`, and :class:`Attachment`, what
  ``KafkaSession.attach`` returns: replay from a cursor, then live;
- ``live``: :class:`CursorSubscription`, what ``subscribe_events`` returns (a
  live subscription whose events each come with the cursor after them:
  ``cursor``, ``cursor_for(loop_id)``), and the reader's positions behind it;
- ``hub``: :class:`StreamHub`, many loop streams (:class:`HubStream`) over
  one consumer per topic, each with a bounded queue (:class:`StreamDropped`
  when a slow one is dropped);
- ``journal_consumer``: :class:`JournalConsumer`, the downstream reader of
  every loop's events (a consumer group, ``read_committed``, at-least-once
  commits after the handler, rebalance-safe) and :class:`JournalRecord`;
- ``turns``: :class:`Turn` (a handle following one input to its outcome;
  ``turn.cursor`` resumes it with ``attach``), :class:`TurnOutcome`,
  :class:`TurnStatus`;
- ``inspection``: what an operator reads across partitions (every loop's
  latest state, the dead letters' headers), for ``turnstream loops`` and
  ``turnstream dlq``.

With it, from the shared modules of :mod:`turnstream.kafka`: where the brokers
are (:class:`~turnstream.kafka.connection.KafkaConnection`), how to reach them
securely (:class:`~turnstream.kafka.security.KafkaSecurity`) and which topics
to use (:class:`~turnstream.kafka.topology.TopicNames`); all four are exported
here, so a client imports from one place. Never imports the actor or admin
subpackages.
"""

from turnstream.kafka.client.attach import Attachment
from turnstream.kafka.client.cursor import AttachItem, Cursor, DeltasExpired, Streamed
from turnstream.kafka.client.hub import HubStream, StreamDropped, StreamHub
from turnstream.kafka.client.inspection import read_loop_head_state
from turnstream.kafka.client.journal_consumer import JournalConsumer, JournalRecord
from turnstream.kafka.client.live import CursorSubscription
from turnstream.kafka.client.session import KafkaSession
from turnstream.kafka.client.turns import Turn, TurnOutcome, TurnStatus
from turnstream.kafka.connection import KafkaConnection
from turnstream.kafka.security import (
    KafkaSecurity,
    SaslMechanism,
    Secret,
    SecurityProtocol,
)
from turnstream.kafka.topology import TopicNames

__all__ = [
    "AttachItem",
    "Attachment",
    "Cursor",
    "CursorSubscription",
    "DeltasExpired",
    "HubStream",
    "JournalConsumer",
    "JournalRecord",
    "KafkaConnection",
    "KafkaSecurity",
    "KafkaSession",
    "SaslMechanism",
    "Secret",
    "SecurityProtocol",
    "StreamDropped",
    "StreamHub",
    "Streamed",
    "TopicNames",
    "Turn",
    "TurnOutcome",
    "TurnStatus",
    "read_loop_head_state",
]
