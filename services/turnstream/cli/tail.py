"""``turnstream tail --loop ID``: pretty-print a loop's journal, then follow it.

Owns the ``tail`` command and :class:`JournalTail` (pure: drops live events
already printed from the replay). With ``--from-beginning`` the committed
journal is replayed first (read up to the last stable offset); the live feed
is subscribed *before* the replay starts, so nothing falls between the two, and
an event seen in both is printed once. ``--no-follow`` stops after the replay.
Ctrl-C ends a follow (exit 130). Must not import aiokafka.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import OrderedDict
from typing import Annotated, Final

import typer

from turnstream.cli._common import console, err_console
from turnstream.cli.failures import exit_on_errors
from turnstream.cli.kafka_options import TopicAffixes, kafka_options
from turnstream.cli.ordering import DEFAULT_SETTLE, LiveOrder
from turnstream.cli.render import EventRenderer
from turnstream.cli.settings import ExitCode, KafkaTarget, parse_loop_id
from turnstream.cli.watch import EventPrinter, connect_session, loop_filter, next_events
from turnstream.events import AnyEvent

__all__ = ["JournalTail", "tail"]

_REMEMBERED: Final = 4096


class JournalTail:
    """Prints each journal event once across a replay and the live feed."""

    def __init__(self) -> None:
        self._seen: OrderedDict[uuid.UUID, None] = OrderedDict()

    def first_time(self, event: AnyEvent) -> bool:
        """False for a journal event already printed (matched by event id)."""
        event_id = event.header.event_id
        if not event.is_enduring() or event_id is None:
            return True
        if event_id in self._seen:
            return False
        self._seen[event_id] = None
        while len(self._seen) > _REMEMBERED:
            self._seen.popitem(last=False)
        return True


async def _tail(
    target: KafkaTarget,
    loop_id: uuid.UUID,
    *,
    from_beginning: bool,
    follow: bool,
    deltas: bool,
) -> ExitCode:
    session = await connect_session(target, loop_id=loop_id)
    async with session:
        printer = EventPrinter(console, EventRenderer(deltas=deltas))
        journal = JournalTail()
        order = LiveOrder(settle=DEFAULT_SETTLE)
        subscription = session.subscribe_events(loop_filter(loop_id))
        try:
            if from_beginning:
                replayed = await session.replay(loop_id)
                for event in replayed:
                    if journal.first_time(event):
                        printer.show(event)
                if not replayed:
                    # Silence would look like a hang or a wrong id: say so.
                    err_console.print(
                        f"[dim]•[/] loop {loop_id}: no events in the journal yet"
                    )
            if not follow:
                return ExitCode.OK
            err_console.print(
                f"[dim]•[/] following loop {loop_id}: new events print as they "
                "arrive (Ctrl-C to stop)"
            )
            while True:
                for live in await next_events(subscription, order):
                    if journal.first_time(live):
                        printer.show(live)
        finally:
            printer.close()
            subscription.close()


@kafka_options(topics=TopicAffixes.FLAGS)
def tail(
    *,
    target: KafkaTarget,
    loop: Annotated[
        str,
        typer.Option("--loop", "-l", help="The loop id (UUID) whose events to print."),
    ],
    from_beginning: Annotated[
        bool,
        typer.Option(
            "--from-beginning",
            help="Replay the loop's whole journal first, then follow.",
        ),
    ] = False,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow/--no-follow",
            help="Keep printing new events until Ctrl-C (off: stop after the replay).",
        ),
    ] = True,
    deltas: Annotated[
        bool,
        typer.Option(
            "--deltas/--no-deltas",
            help="Show live token deltas and tool calls (never part of the journal).",
        ),
    ] = True,
) -> None:
    """Print a loop's events, one line each: replay (optional), then follow.

    Exit codes: 0 after --no-follow, 130 on Ctrl-C, 2 bad settings or missing
    topics, 3 Kafka unreachable, 4 login refused, 5 TLS failed, 6 ACL denied.
    """
    with exit_on_errors():
        loop_id = parse_loop_id(loop)
    with exit_on_errors(target.bootstrap):
        code = asyncio.run(
            _tail(
                target,
                loop_id,
                from_beginning=from_beginning,
                follow=follow,
                deltas=deltas,
            )
        )
    raise typer.Exit(int(code))
