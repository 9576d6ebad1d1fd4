"""Ports: the runtime's view of everything outside one loop's actor.

Owns the protocols the loop runtime is written against -- the durable
:class:`Journal`, the live :class:`LiveHub` and :class:`EventSource`, the
:class:`Clock` and :class:`IdSource`, the :class:`Tool` protocol with its
optional traits, and the optional :class:`AccessPolicy` -- plus the small value
types that cross them (:class:`Recovery`, :class:`ToolContext`,
:class:`ToolOutput`, :class:`AccessRequest`) and the two trivial production
defaults :class:`SystemClock` and :class:`RandomIds`.

The model port lives next door in :mod:`turnstream.runtime.model_client`.

Adapters implement these ports: in-process ones in :mod:`turnstream.memory`,
test fakes in :mod:`turnstream.testing`, broker-backed ones in
:mod:`turnstream.kafka`. This module must not import any adapter, any
transport library, or :mod:`turnstream.wire`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from turnstream.content import TextBlock, ToolResultContent
from turnstream.events import EnduringEvent, EphemeralEvent
from turnstream.ids import LoopId, SessionId, StepId, ToolExecutionId, TurnId, new_uuid
from turnstream.runtime.effects import EffectStage, StagedRecord
from turnstream.runtime.errors import EffectError
from turnstream.runtime.model_client import ToolSpec
from turnstream.runtime.progress import CommandProgress
from turnstream.state import LoopState

if TYPE_CHECKING:
    from turnstream.runtime.subscription import EventFilter, Subscription

__all__ = [
    "AccessEffect",
    "AccessPolicy",
    "AccessRequest",
    "ApprovalTool",
    "AuditableTool",
    "Clock",
    "EffectTopics",
    "EventSource",
    "IdSource",
    "IdempotentTool",
    "Journal",
    "LiveHub",
    "NoAccessPolicy",
    "OpenedTool",
    "RandomIds",
    "Recovery",
    "SequentialTool",
    "SettlingHub",
    "SubscribableHub",
    "SystemClock",
    "Tool",
    "ToolContext",
    "ToolOutput",
    "ToolResource",
]


# --------------------------------------------------------------------------
# Journal (durable) and hub (live)
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Recovery:
    """What a journal hands back for restoring one loop.

    Attributes:
        snapshot: the latest state snapshot, or ``None`` to fold from the start.
        events: every enduring event committed *after* the snapshot, in commit
            order (all of them when there is no snapshot).
    """

    snapshot: LoopState | None
    events: tuple[EnduringEvent, ...]


class Journal(Protocol):
    """The durable, per-loop, totally ordered event log.

    One loop has exactly one writer (its actor), so an implementation never
    sees concurrent appends for the same loop.
    """

    async def append(
        self,
        loop_id: LoopId,
        events: Sequence[EnduringEvent],
        progress: CommandProgress | None = None,
        effects: Sequence[StagedRecord] = (),
    ) -> None:
        """Commit ``events`` atomically, in order; return only once committed.

        One call is one atomic commit (for Kafka: one transaction). Raising
        means nothing of the call was committed; the runtime then neither
        delivers the events live nor changes its state. ``progress`` is how far
        the loop has applied its command log once these events are committed;
        a journal that keeps snapshots stores it with them, in the same commit
        (``None``: unchanged). ``effects`` are the records the step's tool
        calls staged: written in the same commit, or not at all.
        """
        ...

    async def recover(self, loop_id: LoopId) -> Recovery:
        """Read what is needed to rebuild ``loop_id``: snapshot plus later events."""
        ...


@runtime_checkable
class EffectTopics(Protocol):
    """Trait of a journal that refuses some topics for staged records.

    The Kafka journal refuses its own topic set (a tool must never write the
    journal, the commands or the state); the check runs when a call stages a
    record, so the call gets an error result, not its step a failed commit.
    """

    def check_effect_topic(self, topic: str) -> None:
        """Raise :class:`EffectError` (``reserved_topic``) for a refused topic."""
        ...


class LiveHub(Protocol):
    """Live delivery to subscribers. Never raises, never blocks on a consumer."""

    async def publish(self, event: EphemeralEvent) -> None:
        """Deliver an ephemeral event now; it may be dropped."""
        ...

    async def deliver(self, events: Sequence[EnduringEvent]) -> None:
        """Deliver enduring events, called only after their journal commit."""
        ...


@runtime_checkable
class SettlingHub(Protocol):
    """Trait of a hub whose ephemeral events travel apart from the journal.

    There a watcher could see a commit before the deltas published ahead of it;
    the loop's writer calls :meth:`settle` before each commit so it does not.
    """

    async def settle(self, loop_id: LoopId) -> None:
        """Return once ``loop_id``'s events published so far are handed on.

        Bounded by the hub itself; never raises.
        """
        ...


class EventSource(Protocol):
    """Something clients attach to, to watch events live (no replay)."""

    def subscribe(
        self, event_filter: EventFilter, *, capacity: int | None = None
    ) -> Subscription:
        """Attach a bounded subscription; it sees only later events."""
        ...


class SubscribableHub(LiveHub, EventSource, Protocol):
    """A hub that both takes events and hands them to subscribers (in process)."""

    def close(self) -> None:
        """End every subscription after its buffered events."""
        ...


# --------------------------------------------------------------------------
# Clock and ids
# --------------------------------------------------------------------------


class Clock(Protocol):
    """Wall-clock time for ``created_at`` stamps (never used for timeouts)."""

    def now(self) -> datetime:
        """The current time, timezone-aware."""
        ...


class IdSource(Protocol):
    """Mints every id the runtime needs (turns, steps, events, gates, calls)."""

    def new_id(self) -> UUID:
        """A fresh, unique id. May raise; the runtime then fails secure."""
        ...


class SystemClock:
    """The real UTC clock."""

    def now(self) -> datetime:
        """The current UTC time."""
        return datetime.now(UTC)


class RandomIds:
    """Random version-4 UUIDs."""

    def new_id(self) -> UUID:
        """A random UUID."""
        return new_uuid()


# --------------------------------------------------------------------------
# Tools
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolContext:
    """Where a tool call runs: its ids and coordinates.

    Attributes:
        idempotency_key: names this call of the turn, the same in every
            attempt of it (a resumed turn's step calls again what its crashed
            attempt called): ``<turn id>:<step index>:<tool name>:<n>``, the
            step's n-th call of the tool that reached access. Pass it to your
            own API as its idempotency key, so a call run again after a crash
            takes effect once.
    """

    session_id: SessionId
    loop_id: LoopId
    turn_id: TurnId
    step_id: StepId
    tool_execution_id: ToolExecutionId
    tool_use_id: str
    idempotency_key: str = ""
    effects: EffectStage | None = field(default=None, repr=False, compare=False)

    def stage_record(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> None:
        """Stage a record as this call's effect, instead of sending it yourself.

        It is committed with the ``StepDone`` that records this call's result
        (on Kafka: in the same transaction, so ``read_committed`` consumers see
        it if and only if they see the step), and never if the call raises or
        times out, or the step is never committed (a crash before it: a
        resumed turn commits the step, and its effects, once). The loop
        actor's producer needs Write on ``topic``.

        Raises:
            EffectError: the record was refused (see its ``reason``).
        """
        if self.effects is None:
            raise EffectError("unsupported")
        self.effects.stage(topic, key, value, headers)


class ToolOutput(BaseModel):
    """What a tool returns; ``is_error`` makes it an error result for the model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    content: tuple[ToolResultContent, ...] = ()
    is_error: bool = False

    @classmethod
    def text(cls, text: str) -> ToolOutput:
        """A plain text result."""
        return cls(content=(TextBlock(text=text),))

    @classmethod
    def error(cls, text: str) -> ToolOutput:
        """A text error result (the model sees it; the turn goes on)."""
        return cls(content=(TextBlock(text=text),), is_error=True)


class Tool(Protocol):
    """A tool the model may call.

    Optional traits are separate protocols (:class:`SequentialTool`,
    :class:`ApprovalTool`, :class:`AuditableTool`); a tool implements only the
    ones it needs.
    """

    @property
    def spec(self) -> ToolSpec:
        """Name, description and input schema offered to the model."""
        ...

    async def run(self, input_json: str, ctx: ToolContext) -> ToolOutput:
        """Run one call. Raising makes an error result; it never fails the turn."""
        ...


@runtime_checkable
class SequentialTool(Protocol):
    """Trait: calls of this tool run one at a time, before the parallel ones."""

    def sequential(self) -> bool:
        """Whether to run in the serial phase."""
        ...


@runtime_checkable
class IdempotentTool(Protocol):
    """Trait: a call may run again after a crash (with the same idempotency key).

    A call approved before a crash whose result was never committed may have
    run. A resumed turn runs it again only if its tool says so here; any
    other tool's call is not run again and the model gets an ``outcome
    unknown`` error result instead.
    """

    def idempotent(self) -> bool:
        """Whether running a call twice (same key) has the effect of once."""
        ...


@runtime_checkable
class ApprovalTool(Protocol):
    """Trait: a call may need a person's approval (opens a gate)."""

    def requires_approval(self, input_json: str) -> bool:
        """Whether this call must be approved before it runs."""
        ...


@runtime_checkable
class AuditableTool(Protocol):
    """Trait: a redacted one-line summary of a call, for events and gates."""

    def audit_summary(self, input_json: str) -> str:
        """A summary safe to show and store (no secrets)."""
        ...


class ToolResource(Protocol):
    """Something tools share that lives as long as the agent host runs.

    A server process or a session, for example. The host opens each resource
    of its agents' tools once at start (in tool order) and closes them in
    reverse order on shutdown, after its loops have stopped. A resource is
    also free to (re)open itself on its next use, e.g. after a crash.
    """

    async def open(self) -> None:
        """Start it; a failure is logged by the resource, never raised."""
        ...

    async def aclose(self) -> None:
        """Stop it and wait until it has stopped; never raises."""
        ...


@runtime_checkable
class OpenedTool(Protocol):
    """Trait: the tool runs on a :class:`ToolResource` its host opens and closes."""

    def resource(self) -> ToolResource:
        """The resource (several tools may share one)."""
        ...


# --------------------------------------------------------------------------
# Access policy (optional)
# --------------------------------------------------------------------------

AccessEffect = Literal["approve", "deny", "ask"]


@dataclass(frozen=True, slots=True, kw_only=True)
class AccessRequest:
    """What an access policy sees of a call (never its raw arguments)."""

    tool_name: str
    summary: str
    tool_execution_id: ToolExecutionId


class AccessPolicy(Protocol):
    """Decides, without a prompt, whether a call may run.

    Every call is put to the policy first, and every call decided without a
    prompt gets a durable ``PermissionDecided``. ``"deny"`` is final (no gate
    opens, even for an approval tool); ``"ask"`` opens a gate, as does
    ``"approve"`` of an approval tool that requires approval. Without a policy
    (``None``) every call is denied.
    """

    async def decide(self, request: AccessRequest) -> AccessEffect:
        """The decision for one call."""
        ...


class NoAccessPolicy:
    """No access policy configured: every call is denied (contract §6.1).

    ``access_policy=None`` means the same.

    Each denial is a durable ``PermissionDecided{deny, access_gate_missing}``
    and the model sees ``permission denied [unavailable]``; approval tools are
    denied too (there is no gate to ask through).
    """

    async def decide(self, request: AccessRequest) -> AccessEffect:
        """Always ``"deny"``."""
        return "deny"
