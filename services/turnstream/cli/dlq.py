"""``turnstream dlq tail``: the newest dead letters, headers only.

Owns the ``dlq`` command group. ``tail`` reads every partition of the
dead-letter topic to its end and prints the newest ``--last`` dead letters, one
line each: when, where it sits, its kind and reason, and the topic, partition
and offset of the command it came from (the ``ts-dlq-*`` headers
:func:`~turnstream.kafka.records.dead_letter_headers` writes). Never the
payload: a dead letter is a command nobody could read, possibly with prompt
text in it. Exit codes: 0 success (also with none), 2 bad settings or a
missing topic, 3 Kafka unreachable, 4 login refused, 5 TLS failed, 6 ACL
denied. Must not import aiokafka.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.markup import escape

from turnstream.cli._common import console
from turnstream.cli.failures import exit_on_errors
from turnstream.cli.kafka_options import TopicAffixes, kafka_options
from turnstream.cli.settings import KafkaTarget
from turnstream.kafka.admin.probe import check_broker
from turnstream.kafka.client.inspection import read_dead_letter_headers
from turnstream.kafka.reader import DeadLetterEntry

__all__ = ["app", "dead_letter_line"]

app = typer.Typer(
    rich_markup_mode=None,  # plain click help: no names cut at 80 columns
    help="Read the dead-letter topic (headers only, never the payload).",
    no_args_is_help=True,
)

_SHOWN = ("kind", "reason", "topic", "partition", "offset", "truncated", "size")


def dead_letter_line(entry: DeadLetterEntry) -> str:
    """One line: time, dlq partition/offset, then kind, reason and origin. Pure."""
    at = datetime.fromtimestamp(entry.timestamp_ms / 1000, UTC)
    fields = [
        f"{name}={entry.headers[f'ts-dlq-{name}']}"
        for name in _SHOWN
        if f"ts-dlq-{name}" in entry.headers
    ]
    where = f"dlq[{entry.partition}]@{entry.offset}"
    stamp = at.isoformat(timespec="milliseconds")
    return f"{stamp}  {where}  " + "  ".join(fields)


async def _read(target: KafkaTarget) -> list[DeadLetterEntry]:
    await check_broker(target.connection, security=target.security)
    return await read_dead_letter_headers(
        target.clients("turnstream-cli"), target.topics
    )


@app.command()
@kafka_options(topics=TopicAffixes.FLAGS)
def tail(
    *,
    target: KafkaTarget,
    last: Annotated[
        int,
        typer.Option(
            "--last",
            "-n",
            min=0,
            help="How many of the newest dead letters to print (0: all).",
        ),
    ] = 20,
) -> None:
    """Print the newest dead letters' headers (kind, reason, origin), oldest first.

    Exit codes: 0 success (also with none), 2 bad settings or missing topic, 3
    Kafka unreachable, 4 login refused, 5 TLS failed, 6 ACL denied.
    """
    with exit_on_errors(target.bootstrap):
        entries = asyncio.run(_read(target))
    entries.sort(key=lambda e: (e.timestamp_ms, e.partition, e.offset))
    shown = entries[-last:] if last else entries
    for entry in shown:
        console.print(escape(dead_letter_line(entry)), soft_wrap=True)
    console.print(
        f"[dim]{len(shown)} of {len(entries)} dead letter(s) on "
        f"{escape(target.topics.dead_letters)}[/]",
        soft_wrap=True,
    )
