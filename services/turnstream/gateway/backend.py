"""The gateway's Kafka side: sending commands for a tenant, loop ownership, streams.

Owns :class:`Backend` (one :class:`~turnstream.kafka.client.KafkaSession` used
only to send, one :class:`~turnstream.kafka.client.StreamHub` for every stream
of the process) and :class:`LoopDirectory` (which tenant's session owns a loop:
remembered for loops the gateway created or already looked up, otherwise read
from the loop's head record on the compacted loops topic). Imports the Kafka
client and the value types; never the ASGI stack.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from uuid import UUID

from turnstream.commands import Interrupt, RespondGate, SubmitInput
from turnstream.content import TextBlock, UserMessage
from turnstream.events import (
    Agency,
    EnduringEvent,
    GateOpened,
    GateResolved,
    LoopStopped,
    TurnDone,
    TurnFailed,
    TurnInterrupted,
    TurnStarted,
)
from turnstream.gateway.tenants import Tenant
from turnstream.ids import CommandId, LoopId
from turnstream.kafka.client import (
    KafkaSession,
    StreamHub,
    read_loop_head_state,
)
from turnstream.kafka.clients import KafkaClients
from turnstream.kafka.topology import TopicNames
from turnstream.runtime.ports import Clock, IdSource, RandomIds, SystemClock
from turnstream.state import LoopState
from turnstream.wire import Codec, default_codec

__all__ = ["Backend", "LoopDirectory", "LoopView"]

_REMEMBERED = 100_000
"""Loop owners kept in memory (least recently used go first)."""


@dataclass(frozen=True, slots=True)
class LoopView:
    """What ``GET /v1/loops/{loop}`` answers.

    Attributes:
        status: ``new`` (nothing committed yet), ``running``, ``idle`` or
            ``stopped``.
        turns: turns started so far.
        running_turn: the open turn's id, if any.
        open_gates: the gates that wait for an answer.
        agent: the loop's agent (empty: the service's single agent).
    """

    status: str
    turns: int
    running_turn: UUID | None
    open_gates: tuple[UUID, ...]
    agent: str


def _view(head: LoopState | None, tail: list[EnduringEvent]) -> LoopView:
    """Fold the journal after the head's snapshot onto it."""
    turns = 0 if head is None else head.turn_index
    stopped = head is not None and head.stopped
    running: UUID | None = None
    gates: dict[UUID, None] = {}
    if head is not None and head.open_turn is not None:
        running = head.open_turn.turn_id
        gates = {g.gate_id: None for g in head.open_turn.gates}
    agent = "" if head is None else head.agent_name
    for event in tail:
        if isinstance(event, TurnStarted):
            running, turns, stopped = event.header.turn_id, event.turn_index, False
            agent = event.header.agent_name or agent
        elif isinstance(event, TurnDone | TurnFailed | TurnInterrupted):
            running, gates = None, {}
        elif isinstance(event, GateOpened):
            gates[event.gate_id] = None
        elif isinstance(event, GateResolved):
            gates.pop(event.gate_id, None)
        elif isinstance(event, LoopStopped):
            stopped = True
    if head is None and not tail:
        status = "new"
    elif stopped:
        status = "stopped"
    else:
        status = "running" if running is not None else "idle"
    return LoopView(status, turns, running, tuple(gates), agent)


class LoopDirectory:
    """Which session (tenant) owns a loop (see module docstring)."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._owners: OrderedDict[UUID, UUID] = OrderedDict()

    def claim(self, loop_id: UUID, tenant: Tenant) -> None:
        """Record a loop the gateway just created for ``tenant``."""
        self._remember(loop_id, tenant.session_id)

    async def owner(self, loop_id: UUID) -> UUID | None:
        """The session id owning ``loop_id`` (``None``: no such loop known).

        Raises:
            TransportError: the loops topic could not be read in time.
        """
        known = self._owners.get(loop_id)
        if known is not None:
            self._owners.move_to_end(loop_id)
            return known
        state = await self._backend.head(loop_id)
        if state is None:
            return None
        self._remember(loop_id, state.session_id)
        return state.session_id

    def _remember(self, loop_id: UUID, session_id: UUID) -> None:
        self._owners[loop_id] = session_id
        self._owners.move_to_end(loop_id)
        while len(self._owners) > _REMEMBERED:
            self._owners.popitem(last=False)


@dataclass(eq=False, repr=False, kw_only=True)
class Backend:
    """The Kafka clients of one gateway process (start with :meth:`connect`)."""

    clients: KafkaClients
    topics: TopicNames
    codec: Codec
    session: KafkaSession
    hub: StreamHub
    clock: Clock
    ids: IdSource
    directory: LoopDirectory = field(init=False)

    def __post_init__(self) -> None:
        self.directory = LoopDirectory(self)

    @classmethod
    async def connect(
        cls,
        clients: KafkaClients,
        topics: TopicNames,
        *,
        stream_queue: int,
        codec: Codec | None = None,
    ) -> Backend:
        """Start the command producer and the stream hub.

        Raises:
            ConfigError: a topic does not exist.
            TransportError: Kafka could not be reached in time.
        """
        codec = codec or default_codec()
        session = await KafkaSession.connect(
            clients=clients, topics=topics, codec=codec, live=False
        )
        hub = StreamHub(clients=clients, codec=codec, topics=topics, queue=stream_queue)
        try:
            await hub.start()
        except BaseException:
            await session.close()
            raise
        return cls(
            clients=clients,
            topics=topics,
            codec=codec,
            session=session,
            hub=hub,
            clock=SystemClock(),
            ids=RandomIds(),
        )

    async def close(self) -> None:
        """Stop the hub (every stream ends) and the producer."""
        await self.hub.close()
        await self.session.close()

    def new_loop(self) -> LoopId:
        """A fresh loop id."""
        return LoopId(self.ids.new_id())

    async def view(self, loop_id: UUID) -> LoopView:
        """The loop as committed now: its head snapshot and the journal after it.

        The actor writes the head with some commits, not all: the journal from
        the head's ``journal_offset`` (the whole partition for a loop without
        one) brings it up to date.
        """
        head = await self.head(loop_id)
        start = 0 if head is None else max(head.journal_offset, 0)
        tail = await self.session.replay(loop_id, from_=start)
        return _view(head, tail)

    async def head(self, loop_id: UUID) -> LoopState | None:
        """The loop's latest head state (``None``: none committed yet)."""
        return await read_loop_head_state(
            self.clients,
            self.codec,
            self.topics,
            loop_id,
            partitions=self.session.partitions,
        )

    def _fields(self, tenant: Tenant, loop_id: UUID) -> dict[str, object]:
        return {
            "command_id": CommandId(self.ids.new_id()),
            "session_id": tenant.session_id,
            "loop_id": loop_id,
            "created_at": self.clock.now(),
            "agency": Agency.USER,
        }

    async def submit(
        self, tenant: Tenant, loop_id: UUID, text: str, *, no_fold: bool
    ) -> CommandId:
        """Send a text input for ``tenant``; its command id once acknowledged."""
        command = SubmitInput.model_validate(
            {
                **self._fields(tenant, loop_id),
                "message": UserMessage(blocks=(TextBlock(text=text),)),
                "no_fold": no_fold,
            }
        )
        return await self.session.send(command)

    async def respond_gate(
        self, tenant: Tenant, loop_id: UUID, gate_id: UUID, action: str
    ) -> CommandId:
        """Answer a gate of ``loop_id``."""
        command = RespondGate.model_validate(
            {**self._fields(tenant, loop_id), "gate_id": gate_id, "action": action}
        )
        return await self.session.send(command)

    async def interrupt(
        self, tenant: Tenant, loop_id: UUID, turn_id: UUID | None
    ) -> CommandId:
        """Ask ``loop_id`` to cancel its running turn (``turn_id``: only that one)."""
        command = Interrupt.model_validate(
            {**self._fields(tenant, loop_id), "turn_id": turn_id}
        )
        return await self.session.send(command)
