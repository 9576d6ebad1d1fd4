"""The embedded session: every loop of the session runs in this process.

Owns :class:`LocalSession`, the in-process implementation of
:class:`~turnstream.runtime.session.Session`: each loop is a
:class:`~turnstream.runtime.actor.LoopActor` task in the session's task group,
events go through an in-process hub, and the journal is whatever
:class:`~turnstream.runtime.ports.Journal` is passed in (in memory, or a
broker-backed one). It also restores a session from its journal (contract
§8.2). Imports runtime modules and value types; never an adapter.

One module on purpose (~420 lines): the whole embedded Session API (one method per
protocol call) over the same actors and hub.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Mapping
from contextlib import AsyncExitStack
from types import TracebackType
from typing import TYPE_CHECKING, Self

from turnstream.commands import Interrupt, RespondGate, Retract, Shutdown, SubmitInput
from turnstream.errors import SessionError
from turnstream.events import Agency
from turnstream.ids import CommandId, GateId, LoopId, SessionId, TurnId
from turnstream.runtime.actor import LoopActor
from turnstream.runtime.agent import Agent
from turnstream.runtime.config import LoopConfig
from turnstream.runtime.errors import LoopClosedError, RestoreError
from turnstream.runtime.gates import GateAnswer
from turnstream.runtime.hooks import HookRunner
from turnstream.runtime.input_queue import SEEN_WINDOW
from turnstream.runtime.model_client import ModelClient
from turnstream.runtime.ports import (
    AccessPolicy,
    Clock,
    IdSource,
    Journal,
    RandomIds,
    SubscribableHub,
    SystemClock,
)
from turnstream.runtime.restore import restore_loop
from turnstream.runtime.session import Content, LoopSetup, as_message
from turnstream.runtime.subscription import EventFilter, Subscription
from turnstream.state import LoopState

if TYPE_CHECKING:
    from turnstream.runtime.session import Session

__all__ = ["LocalSession"]


class LocalSession:
    """An embedded session: loops run as actors in this process.

    Use it as an async context manager; leaving it shuts the loops down.
    Over 400 lines on purpose: it is the Session API's whole surface for
    in-process loops, most of it docstrings; the loops' work is in their actors.
    """

    def __init__(
        self,
        *,
        journal: Journal,
        hub: SubscribableHub,
        session_id: SessionId | None = None,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        hooks: HookRunner | None = None,
        access_policy: AccessPolicy | None = None,
    ) -> None:
        self._journal = journal
        self._hub = hub
        self._clock = clock or SystemClock()
        self._ids = ids or RandomIds()
        self._session_id = session_id or SessionId(self._ids.new_id())
        self._hooks = hooks or HookRunner()
        self._access_policy = access_policy
        self._loops: dict[LoopId, LoopActor] = {}
        self._runs: dict[LoopId, asyncio.Task[None]] = {}
        self._waiting: list[LoopActor] = []
        self._active: LoopId | None = None
        self._submitted: OrderedDict[CommandId, LoopId] = OrderedDict()
        self._stack: AsyncExitStack | None = None
        self._group: asyncio.TaskGroup | None = None
        self._closing = False
        self._closed = asyncio.Event()

    # -- lifecycle ------------------------------------------------------

    async def __aenter__(self) -> Self:
        stack = AsyncExitStack()
        self._group = await stack.enter_async_context(asyncio.TaskGroup())
        self._stack = stack
        for actor in self._waiting:
            self._run(actor)
        self._waiting.clear()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stack, self._stack = self._stack, None
        if stack is None:
            return
        if exc is None:
            try:
                await self.shutdown()
            except BaseException:
                self._abort()
                await stack.__aexit__(None, None, None)
                raise
        else:
            # The body failed: stop the actors at once and let its error
            # propagate as it is (not wrapped in an exception group).
            self._abort()
        await stack.__aexit__(None, None, None)

    def _abort(self) -> None:
        self._closing = True
        for run in self._runs.values():
            run.cancel()

    def _run(self, actor: LoopActor) -> None:
        if self._group is None:
            raise SessionError("not_connected", "use the session as a context manager")
        self._runs[actor.loop_id] = self._group.create_task(
            actor.run(), name=f"loop-{actor.loop_id}"
        )

    def _check_open(self) -> None:
        if self._closing:
            raise SessionError("session_closing")

    @classmethod
    async def restore(
        cls,
        *,
        session_id: SessionId,
        journal: Journal,
        hub: SubscribableHub,
        loops: Mapping[LoopId, LoopSetup],
        active_loop: LoopId | None = None,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        hooks: HookRunner | None = None,
        access_policy: AccessPolicy | None = None,
    ) -> LocalSession:
        """Rebuild a session's loops from the journal (contract §8.2, F).

        Open turns are closed with a durable ``TurnInterrupted``, or resumed
        (``TurnResumed``) when the loop's agent continues them
        (``on_restore="continue"``); other loops come up idle; nothing of the
        restore is delivered live and no ``LoopStarted`` is re-emitted.

        Raises:
            RestoreError: a loop could not be rebuilt.
        """
        session = cls(
            journal=journal,
            hub=hub,
            session_id=session_id,
            clock=clock,
            ids=ids,
            hooks=hooks,
            access_policy=access_policy,
        )
        for loop_id, setup in loops.items():
            state = await restore_loop(
                journal,
                loop_id,
                clock=session._clock,
                ids=session._ids,
                commit_timeout=setup.config.commit_timeout,
                policy=setup.config.restore,
            )
            if state.session_id != session_id:
                raise RestoreError("loop_mismatch")
            actor = LoopActor.from_state(
                state,
                config=setup.config,
                model=setup.model,
                journal=journal,
                hub=hub,
                clock=session._clock,
                ids=session._ids,
                hooks=setup.hooks or session._hooks,
                access_policy=setup.access_policy or access_policy,
            )
            session._loops[loop_id] = actor
            session._waiting.append(actor)
        session._active = active_loop or next(iter(loops), None)
        return session

    # -- loops ------------------------------------------------------------

    @property
    def session_id(self) -> SessionId:
        """This session's id."""
        return self._session_id

    @property
    def active_loop(self) -> LoopId | None:
        """The loop :meth:`submit` targets (the first created, by default)."""
        return self._active

    @property
    def loop_ids(self) -> tuple[LoopId, ...]:
        """Every loop of this session, in creation order."""
        return tuple(self._loops)

    async def create_agent_loop(
        self,
        agent: Agent,
        model: ModelClient,
        *,
        loop_id: LoopId | None = None,
        activate: bool = False,
    ) -> LoopId:
        """Start a new loop bound to ``agent`` (its config, hooks and policy).

        Raises:
            SessionError: as :meth:`create_loop`.
        """
        return await self.create_loop(
            agent.loop_config(),
            model,
            loop_id=loop_id,
            activate=activate,
            hooks=agent.hook_runner(),
            access_policy=agent.access_policy(),
        )

    async def create_loop(
        self,
        config: LoopConfig,
        model: ModelClient,
        *,
        loop_id: LoopId | None = None,
        activate: bool = False,
        hooks: HookRunner | None = None,
        access_policy: AccessPolicy | None = None,
    ) -> LoopId:
        """Start a new loop; return once its ``LoopStarted`` is durable.

        ``hooks`` and ``access_policy`` replace the session's for this loop.

        Raises:
            SessionError: the session is closing, the id is taken, or the loop
                could not announce itself (``loop_exited``).
        """
        self._check_open()
        loop_id = loop_id or LoopId(self._ids.new_id())
        if loop_id in self._loops:
            raise SessionError("loop_exists")
        actor = LoopActor(
            session_id=self._session_id,
            loop_id=loop_id,
            config=config,
            model=model,
            journal=self._journal,
            hub=self._hub,
            clock=self._clock,
            ids=self._ids,
            hooks=hooks or self._hooks,
            access_policy=access_policy or self._access_policy,
        )
        self._loops[loop_id] = actor
        self._run(actor)
        if not await actor.started():
            del self._loops[loop_id]
            raise SessionError("loop_exited", "LoopStarted was not committed")
        if activate or self._active is None:
            self._active = loop_id
        return loop_id

    def loop(self, loop_id: LoopId) -> LoopActor:
        """The actor of ``loop_id`` (its controller: post commands directly).

        Raises:
            SessionError: ``loop_not_found``.
        """
        return self._actor(loop_id)

    def _actor(self, loop_id: LoopId) -> LoopActor:
        actor = self._loops.get(loop_id)
        if actor is None:
            raise SessionError("loop_not_found")
        return actor

    def _targets(self, loop_id: LoopId | None) -> list[LoopActor]:
        return [self._actor(loop_id)] if loop_id else list(self._loops.values())

    async def loop_state(self, loop_id: LoopId | None = None) -> LoopState:
        """The committed state of a loop (the active one by default)."""
        target = loop_id or self._active
        if target is None:
            raise SessionError("loop_not_found")
        try:
            return await self._actor(target).state()
        except LoopClosedError:
            raise SessionError("loop_exited") from None

    # -- commands ---------------------------------------------------------

    async def submit(
        self, content: Content, *, no_fold: bool = False, agency: Agency = Agency.USER
    ) -> CommandId:
        """Send input to the active loop; return its command id at once."""
        if self._active is None:
            raise SessionError("loop_not_found", "no active loop")
        return await self.submit_to_loop(
            self._active, content, no_fold=no_fold, agency=agency
        )

    async def submit_to_loop(
        self,
        loop_id: LoopId,
        content: Content,
        *,
        no_fold: bool = False,
        agency: Agency = Agency.USER,
    ) -> CommandId:
        """Send input to ``loop_id``; return its command id at once.

        Raises:
            SessionError: closing, unknown loop, or the loop has stopped.
        """
        self._check_open()
        actor = self._actor(loop_id)
        command_id = CommandId(self._ids.new_id())
        command = SubmitInput(
            command_id=command_id,
            session_id=self._session_id,
            loop_id=loop_id,
            created_at=self._clock.now(),
            agency=agency,
            message=as_message(content),
            no_fold=no_fold,
        )
        try:
            actor.post(command)
        except LoopClosedError:
            raise SessionError("loop_exited") from None
        self._submitted[command_id] = loop_id
        while len(self._submitted) > SEEN_WINDOW:
            self._submitted.popitem(last=False)
        return command_id

    def subscribe_events(
        self, event_filter: EventFilter, *, capacity: int | None = None
    ) -> Subscription:
        """Watch later events through the hub (no replay)."""
        return self._hub.subscribe(event_filter, capacity=capacity)

    def _header(self, loop_id: LoopId) -> dict[str, object]:
        return {
            "command_id": self._ids.new_id(),
            "session_id": self._session_id,
            "loop_id": loop_id,
            "created_at": self._clock.now(),
        }

    async def interrupt(
        self, loop_id: LoopId | None = None, *, turn_id: TurnId | None = None
    ) -> bool:
        """Cancel the running turn of one loop, or of every loop concurrently.

        With ``turn_id``, only that turn (see :class:`~turnstream.commands.Interrupt`).
        """

        async def one(actor: LoopActor) -> bool:
            command = Interrupt.model_validate(
                {**self._header(actor.loop_id), "turn_id": turn_id}
            )
            try:
                return await actor.interrupt(command)
            except LoopClosedError:
                return False

        async with asyncio.TaskGroup() as group:
            acks = [group.create_task(one(a)) for a in self._targets(loop_id)]
        return any(ack.result() for ack in acks)

    async def respond_gate(self, gate_id: GateId, action: str) -> None:
        """Answer an open gate.

        Raises:
            SessionError: ``gate_not_found`` (unknown, stale or already
                answered), ``gate_action_invalid`` or ``gate_append_failed``.
        """
        for actor in list(self._loops.values()):
            command = RespondGate.model_validate(
                {**self._header(actor.loop_id), "gate_id": gate_id, "action": action}
            )
            try:
                answer = await actor.respond_gate(command)
            except LoopClosedError:
                continue
            match answer:
                case GateAnswer.DELIVERED:
                    return
                case GateAnswer.ACTION_INVALID:
                    raise SessionError("gate_action_invalid")
                case GateAnswer.NOT_COMMITTED:
                    raise SessionError("gate_append_failed")
                case GateAnswer.NOT_FOUND:
                    continue
        raise SessionError("gate_not_found")

    async def retract(self, command_id: CommandId) -> None:
        """Withdraw a queued input; silently a no-op if it is not queued."""
        loop_id = self._submitted.get(command_id, self._active)
        if loop_id is None or loop_id not in self._loops:
            return
        command = Retract.model_validate(
            {**self._header(loop_id), "target_command_id": command_id}
        )
        try:
            self._loops[loop_id].post(command)
        except LoopClosedError:
            return

    async def wait_idle(self, loop_id: LoopId | None = None) -> None:
        """Return once the loop (or every loop) is parked with nothing to start."""
        async with asyncio.TaskGroup() as group:
            for actor in self._targets(loop_id):
                group.create_task(actor.wait_idle())

    async def shutdown(self) -> None:
        """Stop every loop, then end the subscriptions; idempotent.

        Order: refuse new commands; shut every loop down on its priority lane
        (running turns end ``TurnInterrupted``, queued input is returned, no
        ``LoopIdle``); wait for every actor to finish; end the subscriptions
        (after the events already delivered to them).
        """
        if self._closing:
            await self._closed.wait()
            return
        self._closing = True
        try:
            running = [a for a in self._loops.values() if a.loop_id in self._runs]
            async with asyncio.TaskGroup() as group:
                for actor in running:
                    command = Shutdown.model_validate(self._header(actor.loop_id))
                    group.create_task(actor.shutdown(command))
            for actor in running:
                await actor.stopped()
            self._hub.close()
        finally:
            self._closed.set()


if TYPE_CHECKING:  # LocalSession implements the Session protocol (checked by mypy)

    def _conforms(session: LocalSession) -> Session:
        return session
