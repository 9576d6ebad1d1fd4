"""Shared plumbing of the CLI command groups.

Owns the rich consoles, client log silencing, the checkout lookup, and ``dev_broker``,
which composes the stdlib broker manager with the aiokafka readiness probe. Errors
become one-line messages and exit codes in :mod:`turnstream.cli.failures`, the same
for every command.

Must not import aiokafka.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from turnstream.devbroker import BrokerSettings, DevBroker, find_project_dir
from turnstream.kafka import broker_answers
from turnstream.observability.logs import set_verbose as observability_set_verbose

__all__ = [
    "console",
    "dev_broker",
    "err_console",
    "project_dir",
    "set_verbose",
]

PROJECT_DIR_ENV = "TURNSTREAM_PROJECT_DIR"

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


def set_verbose(verbose: bool) -> None:
    """Show client library logs (aiokafka) below WARNING only when asked for.

    aiokafka logs every refused connection and every coordinator lookup it
    retries at ERROR, which would bury the one-line message the CLI prints for an
    unreachable broker: those are demoted to INFO (shown with ``-v``), and the
    choice survives the ``configure_logging`` of the long-running commands.
    """
    observability_set_verbose(verbose)


def project_dir() -> Path:
    """The checkout root: ``$TURNSTREAM_PROJECT_DIR`` or the nearest one above cwd.

    Raises:
        ConfigError: not inside a turnstream checkout.
    """
    override = os.environ.get(PROJECT_DIR_ENV, "").strip()
    return find_project_dir(Path(override) if override else Path.cwd())


def _progress(line: str) -> None:
    console.print(f"[dim]•[/] {escape(line)}")


def dev_broker(*, quiet: bool = False) -> DevBroker:
    """The local development broker of this checkout, with the aiokafka probe.

    Args:
        quiet: suppress progress lines.

    Raises:
        ConfigError: not in a checkout, or a port variable is invalid.
    """
    settings = BrokerSettings.for_project(project_dir(), os.environ)
    progress: Callable[[str], None] = (lambda _: None) if quiet else _progress
    return DevBroker(settings, probe=broker_answers, env=os.environ, progress=progress)
