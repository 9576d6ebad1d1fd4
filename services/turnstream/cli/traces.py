"""``turnstream traces export``: each turn's spans, rebuilt from the journal, over OTLP.

Owns the ``traces`` command group. ``export`` reads every committed event of
the events topic (or of ``--loop``), rebuilds each ended turn's spans with
:class:`~turnstream.tracing.JournalSpans` (the ids the actor's live tracer
uses, so the two sources name the same spans) and exports them to the OTLP
endpoint (``--endpoint`` or the tracing settings' environment). A turn whose
actor was killed mid-turn is complete once the next owner ended or resumed
and ended it. Exit codes: 0 success, 2 bad settings, a missing topic or no
endpoint, 3 Kafka unreachable, 4 login refused, 5 TLS failed, 6 ACL denied,
7 the spans could not be exported in time. Must not import aiokafka.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from typing import Annotated
from uuid import UUID

import typer

from turnstream.cli._common import console
from turnstream.cli.failures import exit_on_errors
from turnstream.cli.kafka_options import TopicAffixes, kafka_options
from turnstream.cli.settings import KafkaTarget
from turnstream.errors import ConfigError
from turnstream.kafka.admin.probe import check_broker
from turnstream.kafka.client.inspection import read_journals
from turnstream.kafka.reader import JournalEntry
from turnstream.runtime.tracing import ratio_sampler
from turnstream.tracing import JournalSpans, SpanRecord, TracingSettings, otlp_sink
from turnstream.wire import default_codec

__all__ = ["app", "rebuild"]

app = typer.Typer(
    rich_markup_mode=None,
    help="OpenTelemetry traces of turns, rebuilt from the journal.",
    no_args_is_help=True,
)

_EXPORT_FAILED = 7
_BATCH = 1024


def rebuild(
    entries: list[JournalEntry], sample_ratio: float = 1.0
) -> tuple[list[SpanRecord], int]:
    """The spans of every ended turn in ``entries``, and how many turns are open."""
    spans = JournalSpans(None if sample_ratio >= 1.0 else ratio_sampler(sample_ratio))
    records = spans.add_all((e.event, e.headers) for e in entries)
    return records, spans.open_turns


async def _read(target: KafkaTarget, loops: list[UUID] | None) -> list[JournalEntry]:
    await check_broker(target.connection, security=target.security)
    return await read_journals(
        target.clients("turnstream-cli"), default_codec(), target.topics, loops=loops
    )


@app.command()
@kafka_options(topics=TopicAffixes.FLAGS)
def export(
    *,
    target: KafkaTarget,
    loop: Annotated[
        list[UUID] | None,
        typer.Option("--loop", help="Only this loop's turns (repeatable)."),
    ] = None,
    endpoint: Annotated[
        str | None,
        typer.Option(
            "--endpoint",
            help="The OTLP/HTTP base address (default: TURNSTREAM_OTEL_ENDPOINT "
            "or OTEL_EXPORTER_OTLP_ENDPOINT).",
        ),
    ] = None,
) -> None:
    """Export each ended turn's spans (turn, steps, model requests, tool calls).

    Exit codes: 0 success, 2 bad settings or no endpoint, 3 Kafka unreachable,
    4 login refused, 5 TLS failed, 6 ACL denied, 7 export not confirmed.
    """
    with exit_on_errors(target.bootstrap):
        settings = TracingSettings.from_env(os.environ)
        if endpoint:
            settings = replace(settings, endpoint=endpoint)
        if not settings.enabled:
            raise ConfigError(
                "otel_endpoint", "no OTLP endpoint: pass --endpoint or set one"
            )
        sink = otlp_sink(settings)
        entries = asyncio.run(_read(target, loop))
    spans, still_open = rebuild(entries, settings.sample_ratio)
    flushed = True
    for index, span in enumerate(spans, 1):
        sink.emit(span)
        if index % _BATCH == 0:
            # The exporter's queue is bounded (it drops beyond it): drain it.
            flushed = sink.flush() and flushed
    flushed = sink.flush() and flushed
    sink.close()
    turns = sum(1 for s in spans if s.name == "invoke_agent")
    console.print(
        f"exported {len(spans)} span(s) of {turns} turn(s) to {settings.traces_url}"
        + (f"; {still_open} turn(s) still open" if still_open else ""),
        soft_wrap=True,
    )
    if not flushed:
        console.print("[red]the export was not confirmed in time[/]")
        raise typer.Exit(_EXPORT_FAILED)
