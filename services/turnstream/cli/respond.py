"""``turnstream respond GATE --loop ID``: answer an approval gate over Kafka.

Owns the ``respond`` command: a tool call whose agent's access policy says
``ask`` waits on a gate (``GateOpened`` / ``PermissionRequested`` name it, as
``turnstream chat`` and ``tail`` show); this sends ``RespondGate`` with
``approve`` (default) or ``deny`` to the loop's commands partition.

``GATE`` is the full id or a prefix of at least 8 hex digits (what ``chat`` and
``tail`` print for ``GateOpened``). Before sending, the loop's journal is read:
a gate it never opened, or one already closed (``GateResolved``), is refused
with exit 1 and nothing is sent. A gate that closes between that check and the
answer's arrival is still dropped by the loop (the answer is fire-and-forget).
Must not import aiokafka.
"""

from __future__ import annotations

import asyncio
import string
import uuid
from collections.abc import Sequence
from typing import Annotated

import typer

from turnstream.cli._common import err_console
from turnstream.cli.failures import exit_on_errors
from turnstream.cli.kafka_options import TopicAffixes, kafka_options
from turnstream.cli.settings import ExitCode, KafkaTarget, parse_loop_id
from turnstream.cli.watch import connect_session
from turnstream.errors import ConfigError, SessionError
from turnstream.events import EnduringEvent, GateOpened, GateResolved
from turnstream.ids import GateId, LoopId
from turnstream.runtime.gates import APPROVE, DENY

__all__ = ["find_gate", "respond"]


_MIN_PREFIX = 8


def _gate_text(gate: str) -> str:
    """``gate`` as lowercase hex without dashes (a full id or a prefix)."""
    text = gate.strip().lower().replace("-", "")
    if len(text) < _MIN_PREFIX or len(text) > 32 or text.strip(string.hexdigits):
        raise ConfigError(
            "GATE",
            f"{gate!r} is not a gate id (a UUID, or at least its first "
            f"{_MIN_PREFIX} hex digits)",
        )
    return text


def find_gate(
    journal: Sequence[EnduringEvent], loop_id: uuid.UUID, gate: str
) -> GateId:
    """The open gate of ``journal`` that ``gate`` (an id or a prefix) names.

    Raises:
        ConfigError: ``gate`` is not an id, or names several gates.
        SessionError: ``gate_not_found`` (the loop never opened it) or
            ``gate_closed`` (a ``GateResolved`` closed it already).
    """
    text = _gate_text(gate)
    opened = [
        e.gate_id
        for e in journal
        if isinstance(e, GateOpened) and e.gate_id.hex.startswith(text)
    ]
    if not opened:
        raise SessionError("gate_not_found", f"loop {loop_id} has no gate {gate}")
    if len(set(opened)) > 1:
        raise ConfigError("GATE", f"{gate!r} matches {len(opened)} gates; give more")
    gate_id = opened[0]
    for event in journal:
        if isinstance(event, GateResolved) and event.gate_id == gate_id:
            how = event.reason.value + (f" {event.action}" if event.action else "")
            raise SessionError(
                "gate_closed", f"gate {gate_id} is already closed ({how}); not sent"
            )
    return GateId(gate_id)


async def _respond(
    target: KafkaTarget, loop_id: uuid.UUID, gate: str, action: str
) -> GateId:
    session = await connect_session(target, loop_id=loop_id)
    async with session:
        gate_id = find_gate(await session.replay(loop_id), loop_id, gate)
        await session.respond_gate(gate_id, action, loop_id=LoopId(loop_id))
    return gate_id


@kafka_options(topics=TopicAffixes.FLAGS)
def respond(
    gate: Annotated[
        str,
        typer.Argument(
            help="The gate id (from GateOpened or PermissionRequested), or its "
            "first 8+ hex digits."
        ),
    ],
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

    Exit codes: 0 sent, 1 the loop has no such gate or it is already closed
    (nothing sent), 2 bad settings or an ambiguous id, 3 Kafka unreachable.
    """
    with exit_on_errors():
        loop_id = parse_loop_id(loop)
        _gate_text(gate)
    action = DENY if deny else APPROVE
    with exit_on_errors(target.bootstrap):
        gate_id = asyncio.run(_respond(target, loop_id, gate, action))
    err_console.print(f"[dim]sent {action} for gate {gate_id}[/]", highlight=False)
    raise typer.Exit(int(ExitCode.OK))
