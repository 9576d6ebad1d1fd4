"""``turnstream smoke``: the end-to-end check that Kafka works for turnstream.

Owns the smoke command: start (or reuse) the local broker unless an external one is
configured, apply the topic set, then write one record in a committed transaction to
a scratch topic and read it back ``read_committed``. Exit codes as every command's
(:mod:`turnstream.cli.failures`). Must not import aiokafka.
"""

from __future__ import annotations

import asyncio
import time

from rich.table import Table

from turnstream.cli._common import console, dev_broker
from turnstream.cli.failures import exit_on_errors
from turnstream.cli.kafka_options import TopicAffixes, kafka_options
from turnstream.cli.settings import KafkaTarget
from turnstream.cli.topics import (
    PartitionsOption,
    ReplicationFactorOption,
    apply_declared_topics,
)
from turnstream.kafka import transactional_round_trip

__all__ = ["smoke"]


@kafka_options(timeout=30.0, topics=TopicAffixes.NONE)
def smoke(
    *,
    target: KafkaTarget,
    partitions: PartitionsOption = None,
    replication_factor: ReplicationFactorOption = None,
) -> None:
    """Broker up, topics apply, one transactional produce + consume; print the result.

    With --bootstrap or KAFKA_BOOTSTRAP_SERVERS the local broker is left alone and
    the given cluster is used instead. Exit codes: 0 smoke OK; 1 a topic differs
    or the round trip failed; 2 bad flags; 3 Kafka unreachable,
    4 login refused, 5 TLS failed, 6 ACL denied.
    """
    started = time.monotonic()
    with exit_on_errors(target.bootstrap):
        if target.external:
            console.print(
                "[dim]•[/] using the configured cluster (local broker untouched)"
            )
        else:
            status = dev_broker().up()
            verb = "started" if status.started else "reused"
            console.print(
                f"[green]✓[/] broker {verb}: {status.bootstrap} (pid {status.pid})"
            )
        apply_declared_topics(
            target, partitions=partitions, replication_factor=replication_factor
        )
        console.print("[dim]•[/] transactional produce + read_committed consume …")
        trip = asyncio.run(
            transactional_round_trip(target.connection, security=target.security)
        )
    table = Table(title="smoke: transactional round trip", title_justify="left")
    table.add_column("field")
    table.add_column("value")
    table.add_row("bootstrap", target.bootstrap)
    table.add_row("scratch topic", f"{trip.topic} (deleted)")
    table.add_row("partition / offset", f"{trip.partition} / {trip.offset}")
    table.add_row("key", trip.key.decode())
    table.add_row("value", trip.value.decode())
    table.add_row("round trip", f"{trip.seconds * 1000:.0f} ms")
    console.print(table)
    console.print(
        f"[bold green]smoke OK[/] in {time.monotonic() - started:.1f} s: "
        "broker, topics and transactions work"
    )
