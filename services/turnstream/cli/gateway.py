"""``turnstream gateway``: parse the gateway's settings, then serve it.

Owns the ``gateway`` command. Its options are generated from the deployable's
declarations (:data:`turnstream.gateway.settings.SETTINGS` and the Kafka ones);
:func:`~turnstream.gateway.settings.parse_settings` validates them once and
:func:`turnstream.gateway.run` does the start-up (token file, Kafka check,
serving until SIGINT/SIGTERM). The endpoints, the error kinds and the
event-stream format are in :mod:`turnstream.gateway.app` and docs/client.md.
Must not import aiokafka, starlette or uvicorn itself.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from typing import Any

import typer

from turnstream.cli._common import err_console
from turnstream.cli.failures import exit_on_errors
from turnstream.cli.setting_options import environment_epilog, setting_options
from turnstream.cli.settings import ExitCode
from turnstream.errors import ConfigError
from turnstream.gateway.settings import KAFKA, SETTINGS, parse_settings

__all__ = ["gateway"]

_ALL = (*SETTINGS, *KAFKA)


def _startup() -> Any:
    try:
        return importlib.import_module("turnstream.gateway.startup")
    except ImportError as exc:
        raise ConfigError(
            "gateway",
            "needs the gateway extra: pip install 'turnstream[gateway]' "
            f"({exc.name} is missing)",
        ) from exc


def _announce(url: str) -> None:
    err_console.print(f"[dim]gateway on {url}[/]", highlight=False)


@setting_options(_ALL)
def gateway(*, flags: dict[str, object]) -> None:
    """Serve the HTTP/SSE gateway: submit, answer gates, interrupt, stream events.

    Exit codes: 0 stopped by a signal, 2 bad settings (token file, missing
    extra), 3 Kafka unreachable.
    """
    with exit_on_errors():
        config = parse_settings(os.environ, flags)
    with exit_on_errors(config.bootstrap):
        startup = _startup()
        asyncio.run(startup.run(config, announce=_announce))
    raise typer.Exit(int(ExitCode.OK))


gateway_epilog = environment_epilog(_ALL)
"""The help's closing paragraph (the command is registered in ``cli.main``)."""
