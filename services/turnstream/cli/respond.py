"""``turnstream respond GATE --loop ID``: answer an approval gate over Kafka.

Owns the ``respond`` command: a tool call whose agent's access policy says
``ask`` waits on a gate (``GateOpened`` / ``PermissionRequested`` name it, as
``turnstream chat`` and ``tail`` show); this sends ``RespondGate`` with
``approve`` (default) or ``deny`` to the loop's commands partition. The answer
is fire-and-forget: the loop journals ``GateResolved`` (stale or unknown gates
are dropped silently). Must not import aiokafka.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Annotated

import typer

from turnstream.cli._common import err_console
from turnstream.cli.failures import exit_on_errors
from turnstream.cli.kafka_options import kafka_options
from turnstream.cli.settings import ExitCode, KafkaTarget, parse_loop_id
from turnstream.cli.watch import connect_session
from turnstream.errors import ConfigError
from turnstream.ids import GateId, LoopId
from turnstream.runtime.gates import APPROVE, DENY

__all__ = ["respond"]


async def _respond(
    target: KafkaTarget, loop_id: uuid.UUID, gate_id: uuid.UUID, action: str
) -> None:
    session = await connect_session(target, loop_id=loop_id)
    async with session:
        await session.respond_gate(GateId(gate_id), action, loop_id=LoopId(loop_id))


@kafka_options()
def respond(
    gate: Annotated[str, typer.Argument(help="The gate id (from GateOpened).")],
    *,
    target: KafkaTarget,
    loop: Annotated[
        str,
        typer.Option("--loop", "-l", help="The loop id (UUID) the gate belongs to."),
    ],
    deny: Annotated[
        bool, typer.Option("--deny", help="Deny the call instead of approving it.")
    ] = False,
) -> None:
    """Answer the approval gate GATE of a loop: approve (default) or --deny.

    Exit codes: 0 sent, 2 bad settings, 3 Kafka unreachable.
    """
    with exit_on_errors():
        loop_id = parse_loop_id(loop)
        try:
            gate_id = uuid.UUID(gate.strip())
        except ValueError:
            raise ConfigError("GATE", f"{gate!r} is not a gate id (a UUID)") from None
    action = DENY if deny else APPROVE
    with exit_on_errors(target.bootstrap):
        asyncio.run(_respond(target, loop_id, gate_id, action))
    err_console.print(f"[dim]sent {action} for gate {gate_id}[/]", highlight=False)
    raise typer.Exit(int(ExitCode.OK))
