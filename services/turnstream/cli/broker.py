"""``turnstream broker up|down|status``: the local development broker.

Owns the presentation of ``turnstream.devbroker`` on the command line. Errors exit
as every command's do (:mod:`turnstream.cli.failures`): 1 when the broker cannot be
started or stopped, 2 for bad settings. Must not import aiokafka.
"""

from __future__ import annotations

from typing import Annotated

import typer

from turnstream.cli._common import console, dev_broker
from turnstream.cli.failures import exit_on_errors
from turnstream.cli.settings import ExitCode
from turnstream.devbroker import BrokerState, ensure_jars

__all__ = ["app"]

app = typer.Typer(
    help="Run the local single-node Kafka broker (KRaft, from Maven jars).",
    no_args_is_help=True,
)


@app.command()
def up() -> None:
    """Start the broker, or reuse it if it already runs; wait until it answers."""
    with exit_on_errors():
        broker = dev_broker()
        status = broker.up()
        verb = "started" if status.started else "reused"
        console.print(
            f"[green]✓[/] broker running at [bold]{status.bootstrap}[/] "
            f"(pid {status.pid}, {verb} in {status.seconds:.1f} s)"
        )


@app.command()
def jars() -> None:
    """Fetch the broker jars into infra/kafka/.cache/libs (skipped if complete)."""
    with exit_on_errors():
        broker = dev_broker()
        cache = ensure_jars(
            broker.settings, lambda line: console.print(f"[dim]•[/] {line}")
        )
        state = "fetched" if cache.fetched else "already cached"
        console.print(
            f"[green]✓[/] {cache.jar_count} jars {state} in {cache.libs_dir} "
            f"({cache.seconds:.1f} s)"
        )


@app.command()
def down(
    purge: Annotated[
        bool, typer.Option("--purge", help="Also delete the broker's data directory.")
    ] = False,
) -> None:
    """Stop the broker (SIGTERM, then SIGKILL after a timeout)."""
    with exit_on_errors():
        broker = dev_broker()
        stopped = broker.down(purge=purge)
        if stopped:
            console.print("[green]✓[/] broker stopped")
        else:
            console.print("broker was not running")


@app.command()
def status() -> None:
    """Print running/stopped, pid and bootstrap; exit 0 only if it runs and answers."""
    with exit_on_errors():
        broker = dev_broker(quiet=True)
        found = broker.status()
        colour = {
            BrokerState.RUNNING: "green",
            BrokerState.STOPPED: "red",
            BrokerState.UNRESPONSIVE: "yellow",
        }[found.state]
        pid = "-" if found.pid is None else str(found.pid)
        console.print(
            f"[{colour}]{found.state.value}[/]  pid {pid}  bootstrap {found.bootstrap}"
            f"  data {broker.settings.state_dir}"
        )
    if found.state is not BrokerState.RUNNING:
        raise typer.Exit(int(ExitCode.FAILED))
