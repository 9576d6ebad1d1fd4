"""``turnstream actor run``: parse the loop actor's settings, then start it.

Owns the ``actor`` command group. The options are generated from the
deployable's declarations (:data:`turnstream.loop_actor.settings.SETTINGS`);
:func:`~turnstream.loop_actor.settings.parse_settings` validates flags and
environment together, once, and :func:`turnstream.loop_actor.run` does every
start-up step. Must not import aiokafka.
"""

from __future__ import annotations

import os

import typer

from turnstream import loop_actor
from turnstream.cli.failures import exit_on_errors
from turnstream.cli.setting_options import environment_epilog, setting_options
from turnstream.cli.settings import ExitCode
from turnstream.cli.topics import default_topic_set
from turnstream.loop_actor.settings import SETTINGS, parse_settings

__all__ = ["app"]

app = typer.Typer(
    # Plain click help: it wraps long option and variable names instead of
    # cutting them at 80 columns, as rich panels do.
    rich_markup_mode=None,
    help="Run the loop-actor service (the process that runs turns).",
    no_args_is_help=True,
)


@app.command(epilog=environment_epilog(SETTINGS))
@setting_options(SETTINGS)
def run(*, flags: dict[str, object]) -> None:
    """Run loop actors until SIGTERM or Ctrl-C (then stop in order, exit 0).

    Run several (same --group, distinct --metrics-port) to share the load. Every
    start verifies the topic settings turns rely on (journal not compacted and
    kept forever, state compacted, size limits and min ISR at least those of
    infra/topics.yaml). Exit codes: 0 clean stop, 1 failure or topics that
    differ from --ensure-topics, 2 bad settings, missing topics or topic
    settings that would lose or refuse data, 3 Kafka unreachable, 4 login
    refused, 5 TLS failed, 6 ACL denied.
    """
    with exit_on_errors():
        settings = parse_settings(os.environ, flags)
    with exit_on_errors(settings.bootstrap):
        loop_actor.run(settings, topic_set=default_topic_set())
    raise typer.Exit(int(ExitCode.OK))
