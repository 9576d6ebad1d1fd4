"""The live loops of one commands partition: their actors' lives.

Owns :class:`LiveLoops`: the partition's loop actors, most recently used last.
A command's loop gets its actor here -- the live one, or one restored from the
partition's journal, or a new one (only an input creates a loop) -- and a loop
that only refuses input (its agent not hosted here, or a model the agent does
not allow) is stopped before a new input, so a refusal binds nothing. Beyond
the partition's share of the resident budget, the least recently used
*parked* loops (idle, nothing queued, latest state written) are passivated
once a second: their actors stop quietly and only their encoded state stays
in the journal's state index. Stopping an actor for a handover is here too;
when to stop them all is the runner's
(:mod:`~turnstream.kafka.actor.runner`).

Part of ``turnstream.kafka``; imports the runtime's actor and restore.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict, TypeGuard
from uuid import UUID

from turnstream.commands import AnyCommand, DeleteLoop, Interrupt, Shutdown, SubmitInput
from turnstream.errors import TransportError
from turnstream.events import Agency
from turnstream.ids import CommandId, LoopId, SessionId
from turnstream.kafka.actor.journal import PartitionJournal
from turnstream.kafka.actor.runner_context import RunnerContext
from turnstream.runtime.actor import LoopActor, LoopStatus
from turnstream.runtime.config import LoopConfig, RestorePolicy
from turnstream.runtime.errors import RestoreError
from turnstream.runtime.hooks import HookRunner, Tracer
from turnstream.runtime.model_client import ModelClient
from turnstream.runtime.ports import AccessPolicy, Clock, IdSource, Journal, LiveHub
from turnstream.runtime.restore import restore_loop
from turnstream.runtime.session import LoopSetup
from turnstream.state import LoopState

__all__ = ["LiveEntry", "LiveLoops"]

# The runner's log lines keep the runner's logger (operators filter on it).
_log = logging.getLogger("turnstream.kafka.actor.runner")

_PASSIVATE_SCAN = 16
"""Busy loops a passivation pass looks past, at most, for parked ones."""
_SWEEP_INTERVAL = 1.0
"""Seconds between two passivation passes of a partition."""


@dataclass(slots=True)
class LiveEntry:
    """One live loop: its actor and the task running it."""

    actor: LoopActor
    task: asyncio.Task[None]
    # Set while the loop is being passivated; done once it is (or was not).
    leaving: asyncio.Event | None = None
    refusing: bool = False  # never announced: it only refuses, and binds nothing


class _ActorPorts(TypedDict):
    """The arguments every actor of a partition is built with."""

    config: LoopConfig
    model: ModelClient
    journal: Journal
    hub: LiveHub
    clock: Clock
    ids: IdSource
    hooks: HookRunner | None
    access_policy: AccessPolicy | None


def _traced(hooks: HookRunner | None, tracer: Tracer | None) -> HookRunner | None:
    """The loop's hooks, with the service's tracer recording its operations."""
    if tracer is None:
        return hooks
    return (hooks or HookRunner()).traced(tracer)


def answers(command: AnyCommand) -> TypeGuard[Interrupt]:
    """Whether the command is answered even when its loop has no turn running.

    A named interrupt is: its sender waits for the turn it named to end
    interrupted, or for ``TurnRejected`` saying it had ended.
    """
    return isinstance(command, Interrupt) and command.turn_id is not None


def _may_bind(command: AnyCommand, setup: LoopSetup) -> bool:
    """Whether ``command`` may bind a loop that is not bound yet to ``setup``'s agent.

    An input refused for its model (``model_not_allowed``) binds nothing, as an
    input for an agent not hosted here binds nothing: the loop stays unbound
    and its next input is resolved afresh.
    """
    if not isinstance(command, SubmitInput) or not command.model:
        return True
    return command.model in setup.config.allowed_models()


class LiveLoops:
    """The loop actors of one partition, most recently used last.

    Args:
        partition: the partition number (for the log).
        ctx: what the runners of the service share.
        journal: the partition's journal (once the runner is open).
        closed: whether the runner stopped taking commands (closing, or its
            writer broke): no actor is started or passivated then.
    """

    def __init__(
        self,
        partition: int,
        ctx: RunnerContext,
        *,
        journal: Callable[[], PartitionJournal],
        closed: Callable[[], bool],
    ) -> None:
        self.partition = partition
        self._ctx = ctx
        self._journal = journal
        self._closed = closed
        self._live: dict[UUID, LiveEntry] = {}

    def entries(self) -> list[LiveEntry]:
        """Every live loop, least recently used first."""
        return list(self._live.values())

    def clear(self) -> None:
        """Forget every live loop (their tasks are done or cancelled)."""
        self._live.clear()

    def suspend_turns(self) -> None:
        """Let each running turn finish only its current step (a drain)."""
        for entry in self._live.values():
            if not entry.task.done():
                entry.actor.suspend_turn()

    def restore_policy(self, loop_id: LoopId) -> Callable[[str], RestorePolicy]:
        """The restore policy of the agent a restored loop is bound to."""

        def policy(agent: str) -> RestorePolicy:
            return self._ctx.setup_for(loop_id, agent).config.restore

        return policy

    def start_resumed(self, state: LoopState) -> None:
        """Start the actor of a loop whose restore resumed its open turn."""
        ctx = self._ctx
        loop_id = LoopId(state.loop_id)
        setup = ctx.setup_for(loop_id, state.agent_name)
        actor = self._from_state(state, setup, self._journal())
        task = ctx.spawn(self._run_actor(actor), f"loop-{loop_id}")
        self._live[loop_id] = LiveEntry(actor, task)

    def _from_state(
        self,
        state: LoopState,
        setup: LoopSetup,
        journal: PartitionJournal,
        *,
        announce: bool = False,
    ) -> LoopActor:
        """The actor of a restored loop, run with ``setup``."""
        return LoopActor.from_state(
            state, **self._ports(setup, journal), announce=announce
        )

    def _ports(self, setup: LoopSetup, journal: PartitionJournal) -> _ActorPorts:
        """What an actor of this partition runs with, by ``setup``."""
        ctx = self._ctx
        return _ActorPorts(
            config=setup.config,
            model=setup.model,
            journal=journal,
            hub=ctx.hub,
            clock=ctx.clock,
            ids=ctx.ids,
            hooks=_traced(setup.hooks, ctx.tracer),
            access_policy=setup.access_policy,
        )

    async def sweep(self) -> None:
        """Every second, passivate what is over the resident budget."""
        while not self._closed():
            await asyncio.sleep(_SWEEP_INTERVAL)
            try:
                await self._passivate()
            except Exception:  # noqa: BLE001 - a defect here must not stop the service
                _log.exception(
                    "passivation failed", extra={"partition": self.partition}
                )

    async def _passivate(self) -> None:
        """Stop the least recently used parked loops beyond the budget.

        A loop with a turn running or anything queued is skipped (it counts
        as used). A command that arrives for a loop being passivated waits
        until it is (:meth:`actor_for`), then restores it.
        """
        excess = len(self._live) - self._ctx.resident_budget()
        if excess <= 0:
            return
        journal = self._journal()
        oldest = list(itertools.islice(self._live.items(), excess + _PASSIVATE_SCAN))
        for loop_id, entry in oldest:
            if excess <= 0 or self._closed():
                return
            done = entry.task.done()  # stopped already (a client's Shutdown)
            if entry.leaving is not None or not (
                (done or entry.actor.parked) and journal.parkable(loop_id)
            ):
                continue
            entry.leaving = asyncio.Event()
            try:
                if not done:
                    await self.stop_actor(entry)
                if (
                    entry.task.done()
                    and self._live.get(loop_id) is entry
                    and journal.park(loop_id)
                ):
                    del self._live[loop_id]
                    self._ctx.metrics.passivated += 1
                    excess -= 1
            finally:
                entry.leaving.set()

    async def actor_for(self, command: AnyCommand) -> LoopActor | None:
        """The live actor of the command's loop, restored or created if needed.

        Raises:
            TransportError: Kafka could not be read (transient).
            TurnstreamError: the loop cannot be restored (permanent).
        """
        loop_id = LoopId(command.loop_id)
        live = self._live.get(loop_id)
        if live is not None and live.leaving is not None:
            await live.leaving.wait()  # passivated (or not) before it goes on
            live = self._live.get(loop_id)
        if live is not None and isinstance(command, SubmitInput):
            await self._retire_refusing(live)
        if live is not None and live.actor.status is not LoopStatus.STOPPED:
            self._live[loop_id] = self._live.pop(loop_id)  # most recently used
            return live.actor
        if live is not None:
            del self._live[loop_id]
        journal = self._journal()
        # Only an input (re)starts a loop -- and a Shutdown or DeleteLoop of a
        # known one, so that its LoopStopped or LoopDeleted is recorded
        # whichever process restores it, and an interrupt naming a turn, so
        # that it is answered (that turn is not running here: turn_ended).
        known = journal.known(loop_id)
        stop = isinstance(command, Shutdown | DeleteLoop) and known
        if not (
            isinstance(command, SubmitInput) or stop or (answers(command) and known)
        ):
            return None
        ctx = self._ctx
        asked = command.agent if isinstance(command, SubmitInput) else ""
        setup = ctx.setup_for(loop_id, asked)
        binds = _may_bind(command, setup)
        refusing = not binds
        try:
            if journal.known(loop_id):
                state = await restore_loop(
                    journal,
                    loop_id,
                    clock=ctx.clock,
                    ids=ctx.ids,
                    commit_timeout=setup.config.commit_timeout,
                    policy=self.restore_policy(loop_id),
                )
                # The loop keeps the agent it is bound to; a loop that only
                # ever refused input (never announced) is bound by this one.
                announced = bool(state.model)
                refusing = not announced and not binds
                if announced:
                    setup = ctx.setup_for(loop_id, state.agent_name)
                actor = self._from_state(
                    state,
                    setup,
                    journal,
                    announce=not announced and not stop and binds and not state.deleted,
                )
            else:
                await journal.recover(loop_id)
                actor = LoopActor(
                    session_id=SessionId(command.session_id),
                    loop_id=loop_id,
                    **self._ports(setup, journal),
                    announce=binds,
                )
        except RestoreError as exc:
            _log.error(
                "loop could not be restored",
                extra={"partition": self.partition, "reason": exc.reason},
            )
            if isinstance(exc.__cause__, TransportError):
                raise exc.__cause__ from exc
            raise
        if self._closed():
            return None
        task = ctx.spawn(self._run_actor(actor), f"loop-{loop_id}")
        self._live[loop_id] = LiveEntry(actor, task, refusing=refusing)
        return actor

    async def _retire_refusing(self, live: LiveEntry) -> None:
        """Stop a loop that only refuses before a new input.

        It refuses when its agent is not hosted here, or when its first input
        named a model the agent does not allow. A refusal binds nothing, so
        the next input is resolved afresh: once the refusing actor has
        answered everything before it, it is stopped (quietly) and the input
        gets a new actor.
        """
        actor = live.actor
        if (actor.config.hosted and not live.refusing) or (
            actor.status is LoopStatus.STOPPED
        ):
            return
        ctx = self._ctx
        stop = self._machine_shutdown(actor)
        try:
            async with asyncio.timeout(ctx.stop_timeout):
                await actor.wait_idle()
                await actor.shutdown(stop)
        except TimeoutError:
            _log.warning("refusing loop did not stop in time")

    def _machine_shutdown(self, actor: LoopActor) -> Shutdown:
        """A ``Shutdown`` of ``actor``'s loop that this process decided on."""
        ctx = self._ctx
        return Shutdown(
            command_id=CommandId(ctx.ids.new_id()),
            session_id=actor.session_id,
            loop_id=actor.loop_id,
            created_at=ctx.clock.now(),
            agency=Agency.MACHINE,
        )

    async def _run_actor(self, actor: LoopActor) -> None:
        self._ctx.metrics.live_loops += 1
        try:
            await actor.run()
        finally:
            self._ctx.metrics.live_loops -= 1

    @property
    def running_turns(self) -> int:
        """Loops of this partition with a turn still running."""
        return sum(
            1
            for entry in self._live.values()
            if entry.actor.status in (LoopStatus.RUNNING, LoopStatus.SHUTTING_DOWN)
            and not entry.actor.turn_suspended
            and not entry.task.done()
        )

    async def stop_actor(self, entry: LiveEntry) -> None:
        """Stop ``entry``'s loop for a handover (or a passivation) and wait."""
        ctx = self._ctx
        actor = entry.actor
        command = self._machine_shutdown(actor)
        try:
            async with asyncio.timeout(ctx.stop_timeout):
                await actor.shutdown(command, handover=True)
                await asyncio.wait([entry.task])
        except TimeoutError:
            _log.warning(
                "loop did not stop in time", extra={"partition": self.partition}
            )
