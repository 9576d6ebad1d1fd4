"""``turnstream broker up|down|status``: the local development broker.

Owns the presentation of ``turnstream.devbroker`` on the command line: the single
node (127.0.0.1:19092) by default, a local KRaft cluster with ``--nodes 3``
(127.0.0.1:29192-29194, beside the single node). Errors exit
as every command's do (:mod:`turnstream.cli.failures`): 1 when the broker cannot be
started or stopped, 2 for bad settings. Must not import aiokafka.
"""

from __future__ import annotations

import os
from functools import partial
from typing import Annotated

import typer
from rich.markup import escape

from turnstream.cli._common import console, dev_broker, project_dir
from turnstream.cli.failures import exit_on_errors
from turnstream.cli.settings import ExitCode
from turnstream.devbroker import (
    BrokerState,
    ClusterSettings,
    ClusterStatus,
    DevCluster,
    ensure_jars,
)
from turnstream.kafka import broker_answers

__all__ = ["NODES_ENV", "app", "dev_cluster"]

NODES_ENV = "TURNSTREAM_BROKER_NODES"

app = typer.Typer(
    # Plain click help: it wraps long option and variable names instead of
    # cutting them at 80 columns, as rich panels do.
    rich_markup_mode=None,
    help="Run the local Kafka broker (KRaft, from Maven jars): one node, or a "
    "cluster with --nodes 3.",
    no_args_is_help=True,
)

NodesOption = Annotated[
    int,
    typer.Option(
        "--nodes",
        "-n",
        envvar=NODES_ENV,
        min=1,
        help="1: the single broker on 127.0.0.1:19092. 2 or more: a local cluster "
        "on 127.0.0.1:29192.. ($TURNSTREAM_CLUSTER_PORT; controllers "
        "$TURNSTREAM_CLUSTER_CONTROLLER_PORT, default the next ports), data in "
        "var/kafka-cluster.",
    ),
]

_COLOUR = {
    BrokerState.RUNNING: "green",
    BrokerState.STOPPED: "red",
    BrokerState.UNRESPONSIVE: "yellow",
    BrokerState.DEGRADED: "yellow",
}


def dev_cluster(nodes: int, *, quiet: bool = False) -> DevCluster:
    """The local ``nodes``-node cluster of this checkout, with the aiokafka probe.

    Raises:
        ConfigError: not in a checkout, or a port variable is invalid.
    """
    settings = ClusterSettings.for_project(project_dir(), os.environ, nodes=nodes)

    def progress(line: str) -> None:
        if not quiet:
            console.print(f"[dim]•[/] {escape(line)}")

    probe = partial(broker_answers, brokers=nodes)
    return DevCluster(settings, probe=probe, env=os.environ, progress=progress)


def _print_cluster(found: ClusterStatus, verb: str | None = None) -> None:
    colour = _COLOUR[found.state]
    how = f" ({verb} in {found.seconds:.1f} s)" if verb else ""
    console.print(
        f"[{colour}]{found.state.value}[/]  {len(found.nodes)}-node cluster  "
        f"bootstrap [bold]{found.bootstrap}[/]{how}"
    )
    for node_id, node in enumerate(found.nodes, 1):
        pid = "-" if node.pid is None else str(node.pid)
        console.print(
            f"  node {node_id}  [{_COLOUR[node.state]}]{node.state.value}[/]  "
            f"pid {pid}  {node.bootstrap}"
        )


@app.command()
def up(nodes: NodesOption = 1) -> None:
    """Start the broker, or reuse it if it already runs; wait until it answers."""
    if nodes > 1:
        with exit_on_errors():
            found = dev_cluster(nodes).up()
            _print_cluster(found, "started" if found.started else "reused")
        return
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
    nodes: NodesOption = 1,
) -> None:
    """Stop the broker (SIGTERM, then SIGKILL after a timeout)."""
    if nodes > 1:
        with exit_on_errors():
            stopped = dev_cluster(nodes).down(purge=purge)
            console.print(
                "[green]✓[/] cluster stopped" if stopped else "cluster was not running"
            )
        return
    with exit_on_errors():
        broker = dev_broker()
        stopped = broker.down(purge=purge)
        if stopped:
            console.print("[green]✓[/] broker stopped")
        else:
            console.print("broker was not running")


@app.command()
def status(nodes: NodesOption = 1) -> None:
    """Print running/stopped, pid and bootstrap; exit 0 only if it runs and answers."""
    if nodes > 1:
        with exit_on_errors():
            cluster = dev_cluster(nodes, quiet=True).status()
            _print_cluster(cluster)
        if cluster.state is not BrokerState.RUNNING:
            raise typer.Exit(int(ExitCode.FAILED))
        return
    with exit_on_errors():
        broker = dev_broker(quiet=True)
        found = broker.status()
        colour = _COLOUR[found.state]
        pid = "-" if found.pid is None else str(found.pid)
        console.print(
            f"[{colour}]{found.state.value}[/]  pid {pid}  bootstrap {found.bootstrap}"
            f"  data {broker.settings.state_dir}"
        )
    if found.state is not BrokerState.RUNNING:
        raise typer.Exit(int(ExitCode.FAILED))
