"""``turnstream loops list|show|delete``: the loops on the state topic, for an operator.

Owns the ``loops`` command group. ``list`` prints one line per loop of the
compacted loops topic (loop id, agent, turns started, status -- the open turn,
idle, stopped or deleted -- and when its state was last written); ``show
LOOP_ID`` prints one loop's state as JSON with the number of messages in place
of the messages, which only ``--messages`` prints (they are conversation
content). Both read every loops partition to its end (a head plus history
records per loop, assembled by
:func:`~turnstream.kafka.client.inspection.read_loop_states`). ``delete
LOOP_ID`` sends ``DeleteLoop`` and waits for the loop-actor service's answer.
Exit codes: 0 success, 1 no such loop (``show``, ``delete``) or no answer in
time (``delete``), 2 bad settings or a missing topic, 3 Kafka unreachable, 4
login refused, 5 TLS failed, 6 ACL denied. Must not import aiokafka.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated
from uuid import UUID

import typer
from rich.markup import escape

from turnstream.cli._common import console, err_console
from turnstream.cli.failures import exit_on_errors, fail
from turnstream.cli.kafka_options import TopicAffixes, kafka_options
from turnstream.cli.settings import ExitCode, KafkaTarget, parse_loop_id
from turnstream.cli.watch import connect_session
from turnstream.events import AnyEvent, LoopDeleted, RejectReason, TurnRejected
from turnstream.ids import LoopId
from turnstream.kafka.admin.probe import check_broker
from turnstream.kafka.client.inspection import LoopStates, read_loop_states
from turnstream.state import LoopState
from turnstream.wire import default_codec

__all__ = ["app", "loop_line", "loop_summary"]

app = typer.Typer(
    rich_markup_mode=None,  # plain click help: no names cut at 80 columns
    help="Inspect the loops on the state topic (no message content by default).",
    no_args_is_help=True,
)


def loop_status(state: LoopState) -> str:
    """``open turn <id>``, ``deleted``, ``stopped`` or ``idle``. Pure."""
    if state.deleted:
        return "deleted"
    if state.open_turn is not None:
        return f"open turn {state.open_turn.turn_id}"
    return "stopped" if state.stopped else "idle"


def loop_line(state: LoopState) -> str:
    """One ``loops list`` line: id, agent, turns, status, updated_at. Pure."""
    updated = state.updated_at.isoformat() if state.updated_at else "-"
    return (
        f"{state.loop_id}  agent={state.agent_name or '-'}  "
        f"turns={state.turn_index}  {loop_status(state)}  updated_at={updated}"
    )


def loop_summary(state: LoopState, *, messages: bool) -> dict[str, object]:
    """``loops show``'s JSON: the state, messages only as a count unless asked."""
    shown = state.model_dump(mode="json")
    if not messages:
        shown["messages"] = len(state.messages)
    shown["status"] = loop_status(state)
    return shown


async def _read(target: KafkaTarget) -> LoopStates:
    await check_broker(target.connection, security=target.security)
    return await read_loop_states(
        target.clients("turnstream-cli"), default_codec(), target.topics
    )


@app.command(name="list")
@kafka_options(topics=TopicAffixes.FLAGS)
def list_loops(*, target: KafkaTarget) -> None:
    """One line per loop: id, agent, turns started, status, last state write.

    Exit codes: 0 success (also with no loops), 2 bad settings or missing topic,
    3 Kafka unreachable, 4 login refused, 5 TLS failed, 6 ACL denied.
    """
    with exit_on_errors(target.bootstrap):
        found = asyncio.run(_read(target))
    states = sorted(
        found.states.values(),
        key=lambda s: (s.updated_at is None, s.updated_at, str(s.loop_id)),
    )
    for state in states:
        console.print(escape(loop_line(state)), soft_wrap=True)
    for loop_id in sorted(found.unreadable, key=str):
        console.print(f"{loop_id}  [red]unreadable state record[/]", soft_wrap=True)
    console.print(
        f"[dim]{len(states)} loop(s) on {escape(target.topics.loops)}[/]",
        soft_wrap=True,
    )


@app.command()
@kafka_options(topics=TopicAffixes.FLAGS)
def show(
    loop: Annotated[str, typer.Argument(help="The loop id (UUID).")],
    *,
    target: KafkaTarget,
    messages: Annotated[
        bool,
        typer.Option(
            "--messages",
            help="Include the messages (conversation content; off by default).",
        ),
    ] = False,
) -> None:
    """Print one loop's state as JSON (messages as a count unless --messages).

    Exit codes: 0 success, 1 no state for that loop, 2 bad settings or missing
    topic, 3 Kafka unreachable, 4 login refused, 5 TLS failed, 6 ACL denied.
    """
    with exit_on_errors():
        loop_id = parse_loop_id(loop, setting="LOOP_ID")
    with exit_on_errors(target.bootstrap):
        found = asyncio.run(_read(target))
    state = found.states.get(loop_id)
    if state is None:
        why = "is unreadable" if loop_id in found.unreadable else "not found"
        raise fail(
            f"loop {loop_id}: state {why} on {target.topics.loops}", ExitCode.FAILED
        )
    typer.echo(json.dumps(loop_summary(state, messages=messages), indent=2))


async def _delete(target: KafkaTarget, loop_id: UUID, wait: float) -> AnyEvent | None:
    session = await connect_session(target, loop_id=loop_id)
    async with session:
        try:
            async with asyncio.timeout(wait):
                return await session.delete_loop(LoopId(loop_id))
        except TimeoutError:
            return None


@app.command()
@kafka_options(topics=TopicAffixes.FLAGS)
def delete(
    loop: Annotated[str, typer.Argument(help="The loop id (UUID).")],
    *,
    target: KafkaTarget,
    wait: Annotated[
        float,
        typer.Option(
            "--wait",
            min=1.0,
            help="Seconds to wait for the loop-actor service's answer.",
        ),
    ] = 30.0,
) -> None:
    """Delete a loop: stop it, remove its state, refuse its later input.

    The loop's running turn is interrupted and its queued input returned; its
    history records are tombstoned (compaction removes them) and its head is
    replaced by a small deleted marker, so every later input is answered
    TurnRejected{loop_deleted}. The journal keeps the loop's events until the
    events topic's retention removes them. Deleting a deleted loop succeeds
    again (it stays deleted).

    Exit codes: 0 deleted (or deleted already), 1 no such loop or no answer in
    time (is a loop actor running?), 2 bad settings or missing topic, 3 Kafka
    unreachable, 4 login refused, 5 TLS failed, 6 ACL denied.
    """
    with exit_on_errors():
        loop_id = parse_loop_id(loop, setting="LOOP_ID")
    with exit_on_errors(target.bootstrap):
        answer = asyncio.run(_delete(target, loop_id, wait))
    if isinstance(answer, LoopDeleted):
        err_console.print(f"deleted loop {loop_id}", highlight=False)
    elif isinstance(answer, TurnRejected) and (
        answer.reason is RejectReason.LOOP_DELETED
    ):
        err_console.print(f"loop {loop_id} was deleted already", highlight=False)
    elif isinstance(answer, TurnRejected):
        raise fail(
            f"loop {loop_id}: not deleted ({answer.reason.value}: {answer.detail})",
            ExitCode.FAILED,
        )
    else:
        raise fail(
            f"loop {loop_id}: no answer within {wait:g} s "
            "(is a loop actor running for this topic set?)",
            ExitCode.FAILED,
        )
    raise typer.Exit(int(ExitCode.OK))
