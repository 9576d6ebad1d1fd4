"""``turnstream chat "text"``: submit one input over Kafka and stream its turn.

Owns :class:`TurnFollower` (pure: which events belong to the turn one command
started, and which exit code its end means) and the ``chat`` command: connect a
session client, subscribe to the loop *before* submitting (the live feed has no
replay), submit, then print the turn's events as they arrive -- token deltas
inline, tool calls, the terminal -- and exit 0 on ``TurnDone``, 1 on
``TurnFailed`` or a rejected input, 130 on ``TurnInterrupted`` (Ctrl-C sends an
``Interrupt`` first), 2 on bad settings or missing topics, 3 when Kafka does not
answer. The agent and its models are the loop actor's (``turnstream actor run
--agent``); ``--agent`` names the one a new loop is bound to, ``--model`` one of
its allowed models for this turn. Must not import aiokafka.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Final

import typer

from turnstream.cli._common import console, err_console
from turnstream.cli.failures import exit_on_errors, fail
from turnstream.cli.kafka_options import TopicAffixes, kafka_options
from turnstream.cli.ordering import DEFAULT_SETTLE, LiveOrder
from turnstream.cli.render import EventRenderer
from turnstream.cli.settings import (
    DEFAULT_GROUP_ID,
    ExitCode,
    KafkaTarget,
    parse_loop_id,
)
from turnstream.cli.watch import EventPrinter, connect_session, loop_filter, next_events
from turnstream.errors import TurnstreamError
from turnstream.events import (
    AnyEvent,
    CancelReason,
    InputCancelled,
    LoopStarted,
    TurnDone,
    TurnFailed,
    TurnFoldedInto,
    TurnInterrupted,
    TurnRejected,
    TurnStarted,
)
from turnstream.ids import LoopId
from turnstream.kafka.admin.probe import group_members
from turnstream.kafka.client.session import KafkaSession
from turnstream.kafka.errors import KafkaAuthorizationError
from turnstream.loop_actor.settings import GROUP
from turnstream.runtime.subscription import Subscription

__all__ = ["TurnChoice", "TurnFollower", "chat"]

_HINT_AFTER: Final = 10.0
_PROBE_AFTER: Final = 4.0
"""Seconds without an answer before chat asks whether any loop actor is running."""
_INTERRUPT_WAIT: Final = 10.0

DeltasOption = Annotated[
    bool,
    typer.Option(
        "--deltas/--no-deltas",
        help="Show streamed token deltas inline (off: lifecycle events only).",
    ),
]


class TurnFollower:
    """Follows the turn that one submitted command starts (or folds into).

    Args:
        command_id: the ``SubmitInput`` to follow.
    """

    def __init__(self, command_id: uuid.UUID) -> None:
        self.command_id = command_id
        self.turn_id: uuid.UUID | None = None
        self.answered = False
        self.terminal: AnyEvent | None = None

    def see(self, event: AnyEvent) -> tuple[bool, ExitCode | None]:
        """Whether to show ``event``, and the exit code if it ends the chat."""
        if event.reply_to() == self.command_id:
            self.answered = True
            return True, self._answer(event)
        if isinstance(event, LoopStarted):
            self.answered = True
            return True, None
        if self.turn_id is None or event.header.turn_id != self.turn_id:
            return False, None
        match event:
            case TurnDone():
                code: ExitCode | None = ExitCode.OK
            case TurnFailed():
                code = ExitCode.FAILED
            case TurnInterrupted():
                code = ExitCode.INTERRUPTED
            case _:
                code = None
        if code is not None:
            self.terminal = event
        return True, code

    def _answer(self, event: AnyEvent) -> ExitCode | None:
        match event:
            case TurnStarted() | TurnFoldedInto():
                self.turn_id = event.header.turn_id
                return None
            case TurnRejected():
                self.terminal = event
                return ExitCode.FAILED
            case InputCancelled():
                self.terminal = event
                if event.reason is CancelReason.TURN_INTERRUPTED:
                    return ExitCode.INTERRUPTED
                return ExitCode.FAILED
            case _:
                return None  # InputQueued: wait for the turn


@dataclass(frozen=True, slots=True)
class TurnChoice:
    """What a chat input chooses: its agent, its turn's model and output cap."""

    agent: str = ""
    model: str = ""
    max_tokens: int | None = None


class _ChatRun:
    """One chat: the subscription, the follower and the printer of one submit."""

    def __init__(
        self,
        session: KafkaSession,
        loop_id: LoopId,
        printer: EventPrinter,
        *,
        actors: Callable[[], Awaitable[int]] | None = None,
        group: str = DEFAULT_GROUP_ID,
    ) -> None:
        self._session = session
        self._loop_id = loop_id
        self._printer = printer
        self._order = LiveOrder(settle=DEFAULT_SETTLE)
        self._actors = actors
        self._group = group

    async def run(
        self,
        text: str,
        *,
        no_fold: bool,
        wait: float,
        options: TurnChoice | None = None,
    ) -> ExitCode:
        choice = options or TurnChoice()
        # Subscribe before submitting: the live feed has no replay.
        subscription = self._session.subscribe_events(loop_filter(self._loop_id))
        try:
            command_id = await self._session.submit_to_loop(
                self._loop_id,
                text,
                no_fold=no_fold,
                agent=choice.agent,
                model=choice.model,
                max_tokens=choice.max_tokens,
            )
            follower = TurnFollower(command_id)
            try:
                return await self._until_end(subscription, follower, wait)
            except asyncio.CancelledError:
                # Ctrl-C: stop the turn rather than leave it running; re-raise.
                self._printer.note("interrupting the turn …", "yellow")
                await self._interrupt(subscription, follower)
                raise
        finally:
            subscription.close()

    async def _until_end(
        self, subscription: Subscription, follower: TurnFollower, wait: float
    ) -> ExitCode:
        started = time.monotonic()
        hinted = probed = False
        while True:
            code = await self._step(subscription, follower)
            if code is not None:
                return code
            elapsed = time.monotonic() - started
            if not follower.answered and not probed and elapsed > _PROBE_AFTER:
                probed = True
                await self._check_actors()
            if not follower.answered and not hinted and elapsed > _HINT_AFTER:
                hinted = True
                self._printer.note(
                    "(no answer yet: is a loop actor running? "
                    "start one with `turnstream actor run`)"
                )
            if elapsed > wait:
                self._printer.close()
                raise fail(
                    f"no end of the turn within {wait:g} s (see --wait)",
                    ExitCode.FAILED,
                )

    async def _check_actors(self) -> None:
        """Fail at once, with what to do, if no loop actor is in the group."""
        if self._actors is None:
            return
        try:
            members = await self._actors()
        except KafkaAuthorizationError as exc:
            # The check is a courtesy: without Describe on the group chat
            # cannot tell, so it says why once and keeps waiting for the turn.
            self._printer.note(
                f"cannot tell whether a loop actor runs: {exc.reason} (see "
                "`turnstream acls`); "
                "waiting for the turn",
                "yellow",
            )
            return
        except TurnstreamError:
            return  # cannot tell: keep waiting, the hint follows
        if members == 0:
            self._printer.close()
            raise fail(
                f"no loop actor is running (consumer group {self._group!r} has no "
                "members); start one with `turnstream actor run` -- the input stays "
                "on the commands topic and runs when an actor starts",
                ExitCode.FAILED,
            )

    async def _step(
        self, subscription: Subscription, follower: TurnFollower
    ) -> ExitCode | None:
        for event in await next_events(subscription, self._order):
            show, code = follower.see(event)
            if show:
                self._printer.show(event)
            if code is not None:
                self._printer.close()
                return code
        return None

    async def _interrupt(
        self, subscription: Subscription, follower: TurnFollower
    ) -> None:
        # Best effort: the input may still be queued (an interrupt leaves it), or
        # Kafka may be gone; either way the chat ends with 130 right after.
        with contextlib.suppress(TimeoutError, TurnstreamError):
            async with asyncio.timeout(_INTERRUPT_WAIT):
                await self._session.interrupt(self._loop_id)
                while await self._step(subscription, follower) is None:
                    pass


async def _chat(
    target: KafkaTarget,
    loop: uuid.UUID | None,
    text: str,
    *,
    deltas: bool,
    no_fold: bool,
    wait: float,
    group: str,
    choice: TurnChoice,
) -> ExitCode:
    session = await connect_session(target, loop_id=loop)

    async def actors() -> int:
        return await group_members(
            target.connection,
            group,
            topic=target.topics.commands,
            security=target.security,
        )

    async with session:
        loop_id = session.active_loop
        err_console.print(
            f"[dim]loop {loop_id} (continue with --loop {loop_id})[/]",
            soft_wrap=True,
            highlight=False,
        )
        printer = EventPrinter(console, EventRenderer(deltas=deltas, full_answers=True))
        return await _ChatRun(
            session, loop_id, printer, actors=actors, group=group
        ).run(text, no_fold=no_fold, wait=wait, options=choice)


@kafka_options(topics=TopicAffixes.FLAGS)
def chat(
    text: Annotated[str, typer.Argument(help="The input to send to the loop.")],
    *,
    target: KafkaTarget,
    loop: Annotated[
        str | None,
        typer.Option(
            "--loop",
            "-l",
            help="Loop id (UUID) to continue; a new loop by default.",
            show_default=False,
        ),
    ] = None,
    deltas: DeltasOption = True,
    group: Annotated[
        str,
        typer.Option(
            "--group",
            "-g",
            envvar=GROUP.env,
            help="The loop actors' consumer group (to tell you when none runs).",
        ),
    ] = DEFAULT_GROUP_ID,
    no_fold: Annotated[
        bool,
        typer.Option(
            "--no-fold",
            help="If the loop is busy, queue this input as its own turn instead of "
            "folding it into the running one.",
        ),
    ] = False,
    wait: Annotated[
        float,
        typer.Option(
            "--wait",
            min=1.0,
            help="Seconds to wait for the turn to end before giving up (exit 1).",
        ),
    ] = 600.0,
    agent: Annotated[
        str,
        typer.Option(
            "--agent",
            help="The agent this input is for (a new loop is bound to it; by "
            "default the service's single agent).",
            show_default=False,
        ),
    ] = "",
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help="A model from the agent's allow-list for this turn (by default "
            "the agent's own); another is rejected (model_not_allowed).",
            show_default=False,
        ),
    ] = "",
    max_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-tokens",
            min=1,
            help="An output cap for this turn's model calls.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Send TEXT to a loop and stream its turn: tokens, tool calls, the end.

    The loop actor (turnstream actor run) runs the model and tools. Exit codes:
    0 done, 1 failed, 130 interrupted (Ctrl-C interrupts the turn), 2 bad
    settings or missing topics, 3 Kafka unreachable,
    4 login refused, 5 TLS failed, 6 ACL denied.
    """
    with exit_on_errors():
        loop_id = parse_loop_id(loop) if loop is not None else None
    with exit_on_errors(target.bootstrap):
        code = asyncio.run(
            _chat(
                target,
                loop_id,
                text,
                deltas=deltas,
                no_fold=no_fold,
                wait=wait,
                group=group,
                choice=TurnChoice(agent=agent, model=model, max_tokens=max_tokens),
            )
        )
    raise typer.Exit(int(code))
