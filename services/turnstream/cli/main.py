"""The ``turnstream`` console script: builds the typer app from its command groups.

Each command group lives in its own module of ``turnstream.cli`` and is registered
here, so adding one (``actor``, ``chat``, ``tail`` …) means one module plus one line
below. Must not import aiokafka.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from turnstream import __version__, resources
from turnstream.cli import (
    acls,
    actor,
    analytics,
    broker,
    chat,
    demo,
    dlq,
    gateway,
    loops,
    respond,
    smoke,
    tail,
    topics,
    traces,
)
from turnstream.cli._common import set_verbose
from turnstream.config import SCHEMA_DIR, lookup

__all__ = ["app", "main"]

app = typer.Typer(
    # Plain click help: it wraps long option and variable names instead of
    # cutting them at 80 columns, as rich panels do.
    rich_markup_mode=None,
    name="turnstream",
    help="turnstream: a Kafka-native runtime for LLM agent turns.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"turnstream {__version__}")
        raise typer.Exit


@app.callback()
def _root(
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show client library logs.")
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the installed version and exit.",
        ),
    ] = False,
) -> None:
    set_verbose(verbose)
    # The schemas every command's codec reads unless a setting names others.
    chosen = lookup(SCHEMA_DIR, {}, os.environ)
    resources.use_schema_dir(None if chosen is None else str(chosen))


app.add_typer(broker.app, name="broker")
app.add_typer(topics.app, name="topics")
app.command(name="smoke")(smoke.smoke)
app.add_typer(actor.app, name="actor")
app.add_typer(analytics.app, name="analytics")
app.command(name="chat")(chat.chat)
app.command(name="respond")(respond.respond)
app.command(name="tail")(tail.tail)
app.command(name="demo")(demo.demo)
app.command(name="acls")(acls.acls)
app.add_typer(loops.app, name="loops")
app.add_typer(dlq.app, name="dlq")
app.add_typer(traces.app, name="traces")
app.command(name="gateway", epilog=gateway.gateway_epilog)(gateway.gateway)


def main() -> None:
    """Run the CLI (the ``turnstream`` console script)."""
    app()


if __name__ == "__main__":
    main()
