"""The loop actor: the one task that owns and writes one loop.

Owns :class:`LoopActor`: the actor task (:meth:`LoopActor.run`), its
:class:`~turnstream.runtime.mailbox.Mailbox`, and the public surface other
tasks use to reach it. Every method of that surface only enqueues a message
(and perhaps awaits its reply); the state itself lives in the actor's
:class:`~turnstream.runtime.machine.LoopMachine`, which only this task drives,
one message at a time -- no locks, no shared state.

Guarantees (contract §4.10): durable before live; exactly one terminal per
turn (a continuing agent's turn handed over open gets it from its next owner);
the actor survives any exception in a turn and is never pinned by a turn
that ignores cancellation (``drain_timeout``); every admitted input resolves
exactly once; ``LoopIdle`` only when the loop parks, never between chained
turns and never on shutdown. Imports runtime modules and value types; never an
adapter.
"""

from __future__ import annotations

import asyncio
from typing import TypeVar, assert_never

from turnstream.commands import (
    AnyCommand,
    DeleteLoop,
    Interrupt,
    RespondGate,
    Retract,
    Shutdown,
    SubmitInput,
)
from turnstream.content import UserMessage
from turnstream.events import RejectReason
from turnstream.ids import CommandId, LoopId, SessionId
from turnstream.runtime.config import LoopConfig
from turnstream.runtime.errors import LoopClosedError, RestoreError
from turnstream.runtime.gates import GateAnswer
from turnstream.runtime.hooks import HookRunner
from turnstream.runtime.machine import LoopMachine, LoopStatus
from turnstream.runtime.mailbox import (
    ActorMessage,
    CommitRequest,
    DrainExpired,
    DrainRequest,
    GateRequest,
    IdleWaiter,
    InterruptRequest,
    Mailbox,
    OpenGateRequest,
    Posted,
    ShutdownRequest,
    StateQuery,
    SuspendRequest,
    TurnEnded,
    settle,
)
from turnstream.runtime.model_client import ModelClient
from turnstream.runtime.ports import (
    AccessPolicy,
    Clock,
    IdSource,
    Journal,
    LiveHub,
    RandomIds,
    SystemClock,
)
from turnstream.runtime.progress import CommandProgress
from turnstream.runtime.stamping import EventFactory
from turnstream.runtime.writer import LoopWriter
from turnstream.state import LoopState

__all__ = ["LoopActor", "LoopStatus"]

T = TypeVar("T")


class LoopActor:
    """One loop: create it, run :meth:`run` as a task, talk to it by message.

    :meth:`post` is fire-and-forget (the path a Kafka consumer uses); the
    awaiting helpers (:meth:`interrupt`, :meth:`shutdown`, :meth:`respond_gate`,
    :meth:`wait_idle`, :meth:`state`) send a message and await its reply. A new
    loop announces itself with ``LoopStarted``; a restored one
    (:meth:`from_state`) does not.
    """

    def __init__(
        self,
        *,
        session_id: SessionId,
        loop_id: LoopId,
        config: LoopConfig,
        model: ModelClient,
        journal: Journal,
        hub: LiveHub,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        hooks: HookRunner | None = None,
        access_policy: AccessPolicy | None = None,
        state: LoopState | None = None,
        announce: bool | None = None,
    ) -> None:
        self.session_id = session_id
        self.loop_id = loop_id
        self.config = config
        factory = EventFactory(
            session_id=session_id,
            loop_id=loop_id,
            clock=clock or SystemClock(),
            ids=ids or RandomIds(),
            agent_name=config.agent_name,
        )
        self._writer = LoopWriter(
            loop_id=loop_id,
            factory=factory,
            journal=journal,
            hub=hub,
            commit_timeout=config.commit_timeout,
            progress=CommandProgress(
                state.applied_command_offset, state.pending_command_offsets
            )
            if state is not None
            else None,
        )
        self._mail: Mailbox[ActorMessage] = Mailbox()
        self._machine = LoopMachine(
            session_id=session_id,
            loop_id=loop_id,
            config=config,
            model=model,
            writer=self._writer,
            mailbox=self._mail,
            hooks=hooks or HookRunner(),
            access_policy=access_policy,
            state=state,
        )
        # A refusing (unhosted) loop is never announced: a refusal binds nothing.
        announce = state is None if announce is None else announce
        self._announce = announce and config.hosted
        self._shutdown_waiters: list[asyncio.Future[None]] = []
        self._idle_waiters: list[asyncio.Future[None]] = []
        self._ready = asyncio.Event()
        self._start_failed = False
        self._waiting = False  # parked on the mailbox, between two messages
        self._stopped = asyncio.Event()

    @classmethod
    def from_state(
        cls,
        state: LoopState,
        *,
        config: LoopConfig,
        model: ModelClient,
        journal: Journal,
        hub: LiveHub,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        hooks: HookRunner | None = None,
        access_policy: AccessPolicy | None = None,
        announce: bool = False,
    ) -> LoopActor:
        """A restored loop, seeded from ``state``, announcing nothing.

        It comes up idle, or -- when ``state`` keeps a turn open that the
        restore resumed (``TurnResumed``, an agent with
        ``on_restore="continue"``) -- running that turn again.

        ``announce`` is for a loop whose journal holds only refusals (it was
        never bound to an agent): it is announced -- bound -- now.

        Raises:
            RestoreError: ``state`` still has an open turn the loop cannot
                resume (close it first).
        """
        turn = state.open_turn
        if turn is not None and not (
            config.restore.continues
            and 0 <= turn.message_index < len(state.messages)
            and isinstance(state.messages[turn.message_index], UserMessage)
        ):
            raise RestoreError("open_turn")
        return cls(
            session_id=SessionId(state.session_id),
            loop_id=LoopId(state.loop_id),
            config=config,
            model=model,
            journal=journal,
            hub=hub,
            clock=clock,
            ids=ids,
            hooks=hooks,
            access_policy=access_policy,
            state=state,
            announce=announce,
        )

    # ------------------------------------------------------------------
    # The public surface: every method only enqueues or awaits a reply
    # ------------------------------------------------------------------

    @property
    def status(self) -> LoopStatus:
        """The loop's status (informational; it may change at any await)."""
        return self._machine.status

    @property
    def parked(self) -> bool:
        """Idle, waiting for mail with none queued and no turn task left.

        A quiet stop of a parked loop then loses, cancels and waits for nothing.
        """
        machine = self._machine
        return (
            self._waiting
            and machine.status is LoopStatus.IDLE
            and not self._mail
            and not machine.tasks
        )

    @property
    def turn_suspended(self) -> bool:
        """Its turn stopped after a committed step, open for the next owner."""
        return self._machine.turn_suspended

    def post(self, command: AnyCommand, position: int | None = None) -> None:
        """Send a command without waiting; commands take effect in post order.

        Args:
            command: the client command.
            position: its place in the loop's command log (the Kafka offset),
                recorded when the actor takes it; ``None`` in memory.

        Raises:
            LoopClosedError: the actor has stopped.
        """
        if not self._mail.put(Posted(command, position)):
            raise LoopClosedError

    async def _ask(
        self, message: ActorMessage, reply: asyncio.Future[T], *, priority: bool
    ) -> T:
        put = self._mail.put_priority if priority else self._mail.put
        if not put(message):
            raise LoopClosedError
        return await reply

    async def interrupt(self, command: Interrupt) -> bool:
        """Cancel the running turn; ``True`` iff a turn was cancelled.

        Taken in order after every command sent before it, so it cancels the
        turn an earlier submit started.
        """
        reply: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        return await self._ask(InterruptRequest(command, reply), reply, priority=False)

    async def shutdown(
        self, command: Shutdown, *, urgent: bool = False, handover: bool = False
    ) -> None:
        """Stop the loop (quietly: no LoopIdle); return once it has stopped.

        Args:
            command: the stop.
            urgent: the host's own stop (a handover, the session closing), served
                before queued commands, which then stay unanswered; a client's
                ``Shutdown`` is not urgent and takes effect in order.
            handover: another owner takes the loop over: an agent that
                continues turns (``on_restore="continue"``) leaves its open
                turn to it, writing nothing that ends it (a step still running
                is dropped uncommitted); any other agent's turn is interrupted.
        """
        reply: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        request = ShutdownRequest(command, reply, handover=handover)
        try:
            await self._ask(request, reply, priority=urgent)
        except LoopClosedError:
            return  # already stopped: shutdown is idempotent

    def suspend_turn(self) -> bool:
        """A planned stop is coming: stop a continuing turn after its current step.

        An agent that continues turns lets its running turn commit the step
        it is in, then stops it there without ending it (the actor keeps
        serving interrupts and gate answers): a handover that follows leaves
        the turn, with nothing uncommitted, to the next owner. Any other
        agent's turn runs on. ``False``: the actor has stopped.
        """
        return self._mail.put_priority(SuspendRequest())

    async def respond_gate(self, command: RespondGate) -> GateAnswer:
        """Answer a gate and learn what became of the answer."""
        reply: asyncio.Future[GateAnswer] = asyncio.get_running_loop().create_future()
        return await self._ask(GateRequest(command, reply), reply, priority=False)

    async def wait_idle(self) -> None:
        """Return once every earlier command is handled and the loop is parked."""
        reply: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        try:
            await self._ask(IdleWaiter(reply), reply, priority=False)
        except LoopClosedError:
            return

    async def state(self) -> LoopState:
        """A snapshot of the committed state, after every earlier command."""
        reply: asyncio.Future[LoopState] = asyncio.get_running_loop().create_future()
        return await self._ask(StateQuery(reply), reply, priority=False)

    async def started(self) -> bool:
        """Wait until the loop serves commands; ``False`` if it could not start."""
        await self._ready.wait()
        return not self._start_failed

    async def stopped(self) -> None:
        """Wait until :meth:`run` has finished its work."""
        await self._stopped.wait()

    # ------------------------------------------------------------------
    # The actor task
    # ------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the mailbox until shutdown, then settle whatever is left."""
        machine = self._machine
        try:
            if self._announce and not await self._writer.announce(self.config):
                self._start_failed = True
                machine.status = LoopStatus.STOPPED
            self._ready.set()
            if not self._start_failed:
                machine.resume()
            while machine.status is not LoopStatus.STOPPED:
                self._waiting = True
                message = await self._mail.get()
                self._waiting = False
                await self._handle(message)
                self._wake_waiters()
        except asyncio.CancelledError:
            self._mail.close()
            machine.tasks.cancel_all()
            self._release_everyone()
            self._stopped.set()
            raise
        finally:
            self._mail.close()
            self._ready.set()
        try:
            await self._settle_leftovers()
            await machine.tasks.aclose(self.config.drain_timeout)
        finally:
            self._stopped.set()

    async def _handle(self, message: ActorMessage) -> None:  # noqa: PLR0912 - one case per message
        machine = self._machine
        match message:
            case Posted():
                await self._take(message)
            case InterruptRequest():
                settle(
                    message.reply, await machine.on_interrupt_command(message.command)
                )
            case ShutdownRequest():
                self._shutdown_waiters.append(message.reply)
                await machine.on_shutdown(handover=message.handover)
            case SuspendRequest():
                machine.on_suspend()
            case GateRequest():
                settle(message.reply, await machine.on_answer(message.command))
            case IdleWaiter():
                self._idle_waiters.append(message.reply)
            case StateQuery():
                settle(message.reply, machine.snapshot())
            case CommitRequest():
                await machine.on_commit(message)
            case DrainRequest():
                machine.on_drain(message)
            case OpenGateRequest():
                await machine.on_open_gate(message)
            case TurnEnded():
                await machine.on_turn_ended(message)
            case DrainExpired():
                await machine.on_drain_expired(message)
            case _:
                assert_never(message)

    async def _take(self, posted: Posted) -> None:
        """Apply one client command, recording its place in the command log."""
        machine = self._machine
        command = posted.command
        if posted.position is not None:
            self._writer.progress.take(posted.position)
        match command:
            case SubmitInput():
                await machine.on_submit(command, posted.position)
            case Retract():
                await machine.on_retract(command)
            case RespondGate():
                await machine.on_answer(command)
            case Interrupt():
                await machine.on_interrupt_command(command)
            case Shutdown():
                await machine.on_shutdown(durable=True)
            case DeleteLoop():
                await machine.on_delete(command)
            case _:
                assert_never(command)

    def _wake_waiters(self) -> None:
        machine = self._machine
        stopped = machine.status is LoopStatus.STOPPED
        if stopped:
            for waiter in self._shutdown_waiters:
                settle(waiter, None)
            self._shutdown_waiters.clear()
        if stopped or machine.parked:
            for waiter in self._idle_waiters:
                settle(waiter, None)
            self._idle_waiters.clear()

    async def _settle_leftovers(self) -> None:
        """After the stop: answer whatever is still in the mailbox."""
        machine = self._machine
        for message in self._mail.take_all():
            match message:
                case Posted(command=SubmitInput() as submit):
                    command_id = CommandId(submit.command_id)
                    if command_id not in machine.seen:
                        machine.seen.add(command_id)
                        await self._writer.reject(
                            command_id,
                            RejectReason.LOOP_DELETED
                            if machine.deleted
                            else RejectReason.SHUTTING_DOWN,
                        )
                case Posted(command=DeleteLoop() as delete):
                    # Taken after the stop: deleted now, without a turn to end
                    # (a handover refuses the commit: the next owner runs it).
                    await machine.delete_stopped(delete)
                case InterruptRequest() | CommitRequest():
                    settle(message.reply, False)
                case DrainRequest():
                    settle(message.reply, None)
                case OpenGateRequest():
                    settle(message.answer, None)
                case GateRequest():
                    settle(message.reply, GateAnswer.NOT_FOUND)
                case StateQuery():
                    settle(message.reply, machine.snapshot())
                case ShutdownRequest() | IdleWaiter():
                    settle(message.reply, None)
                case _:
                    pass  # commands without a reply, hand-offs of finished turns
        self._release_everyone()

    def _release_everyone(self) -> None:
        for waiter in (*self._shutdown_waiters, *self._idle_waiters):
            settle(waiter, None)
        self._shutdown_waiters.clear()
        self._idle_waiters.clear()
        self._machine.abandon_gates()
