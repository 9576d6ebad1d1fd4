"""The event model: every event that takes part in a loop's and a turn's life.

Owns :class:`Header`, :class:`Cause`, the event classes, their delivery class
(ephemeral / enduring / terminal), scope, coordinate profile and Reply-ness, the
unions, and the projection of a turn error to its stable wire form. Imports only
value types and errors; never a transport or codec library.

Delivery classes:

* **ephemeral** events (:class:`TokenDelta`, :class:`ToolCallStarted`,
  :class:`ToolCallCompleted`, :class:`InputQueued`) are live-only and may be
  dropped; they never reach the journal.
* **enduring** events are appended to the journal before anyone sees them.
* **terminal** events are enduring and end a turn: :class:`TurnDone`,
  :class:`TurnFailed`, :class:`TurnInterrupted`. Every turn has exactly one.

A *Reply* event answers a command: ``reply_to()`` is ``header.cause.command_id``.

One module on purpose (~560 lines): the event union is closed; its members, their
delivery traits and the unions that name them change together.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, ClassVar, Literal, get_args
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, model_validator

from turnstream.content import AIMessage, Chunk, ToolResultMessage, Usage, UserMessage
from turnstream.errors import RestoredError, TurnError

__all__ = [
    "ENDURING_EVENT_TYPES",
    "EPHEMERAL_EVENT_TYPES",
    "EVENT_TYPES",
    "REPLY_EVENT_TYPES",
    "TERMINAL_EVENT_TYPES",
    "Agency",
    "AnyEvent",
    "CancelReason",
    "Cause",
    "Delivery",
    "EnduringEvent",
    "EphemeralEvent",
    "Event",
    "EventBase",
    "FailureInfo",
    "FailureKind",
    "GateCloseReason",
    "GateOpened",
    "GateResolved",
    "Header",
    "InputCancelled",
    "InputQueued",
    "LoopDeleted",
    "LoopIdle",
    "LoopStarted",
    "LoopStopped",
    "PermissionDecided",
    "PermissionRequested",
    "Profile",
    "RejectReason",
    "Scope",
    "StepDone",
    "TerminalEvent",
    "TokenDelta",
    "ToolCallCompleted",
    "ToolCallStarted",
    "ToolTiming",
    "TurnDone",
    "TurnFailed",
    "TurnFoldedInto",
    "TurnInterrupted",
    "TurnRejected",
    "TurnResumed",
    "TurnStarted",
    "failure_from_error",
]

MAX_FAILURE_MESSAGE = 4096
"""Bound on a projected failure message, in characters."""


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Agency(StrEnum):
    """Who asked: a person or a machine. Machine is the fail-secure default."""

    MACHINE = "machine"
    USER = "user"


class Delivery(StrEnum):
    """How an event is delivered and stored."""

    EPHEMERAL = "ephemeral"
    ENDURING = "enduring"
    TERMINAL = "terminal"


class Scope(StrEnum):
    """Whether an event belongs to a session or to one loop."""

    SESSION = "session"
    LOOP = "loop"


class Profile(StrEnum):
    """Which header coordinates an event type must (and must not) carry."""

    LOOP = "loop"
    TURN = "turn"
    INPUT_CANCELLED = "input_cancelled"
    STEP = "step"
    TOOL = "tool"


class RejectReason(StrEnum):
    """Why an input was refused before it became a turn."""

    UNSPECIFIED = "unspecified"
    QUEUE_FULL = "queue_full"
    SHUTTING_DOWN = "shutting_down"
    INTERNAL = "internal"
    INVALID_INPUT = "invalid_input"
    UNKNOWN_AGENT = "unknown_agent"
    """The submit names an agent this service does not host (or names none
    while the service hosts several)."""
    WRONG_AGENT = "wrong_agent"
    """The submit names another agent than the one the loop is bound to."""
    MODEL_NOT_ALLOWED = "model_not_allowed"
    """The submit names a model outside the agent's allow-list."""
    TURN_ENDED = "turn_ended"
    """An ``Interrupt`` named a turn that is no longer running (the answer
    to that interrupt; no turn was cancelled)."""
    LOOP_DELETED = "loop_deleted"
    """The loop was deleted (``LoopDeleted``): every later input is refused,
    by any owner. Also the answer to a ``DeleteLoop`` of a deleted loop."""
    UNKNOWN_LOOP = "unknown_loop"
    """A ``DeleteLoop`` named a loop of which nothing is stored (nothing was
    deleted)."""


class CancelReason(StrEnum):
    """Why a queued input was returned without running."""

    CLIENT_RETRACTED = "client_retracted"
    TURN_INTERRUPTED = "turn_interrupted"
    TURN_FAILED = "turn_failed"
    UNKNOWN = "unknown"
    """A reason this reader does not know (the schema's default symbol)."""
    LOOP_DELETED = "loop_deleted"
    """The loop was deleted (``DeleteLoop``) before the input ran."""


class GateCloseReason(StrEnum):
    """How a gate was closed."""

    ANSWERED = "answered"
    ABANDONED = "abandoned"
    UNKNOWN = "unknown"
    """A reason this reader does not know (the schema's default symbol)."""


class FailureKind(StrEnum):
    """The stable kind of a turn failure, as it travels on the wire."""

    UNKNOWN = "unknown"
    EMPTY_RESPONSE = "empty_response"
    TOOL_LIMIT = "tool_limit"
    STRUCTURED_OUTPUT = "structured_output"
    HOOK_DENIED = "hook_denied"
    PROVIDER = "provider"
    TURN_PANIC = "turn_panic"
    USAGE_OVERFLOW = "usage_overflow"
    RESTORED = "restored"
    RESUME_LIMIT = "resume_limit"


# --------------------------------------------------------------------------
# Header
# --------------------------------------------------------------------------


class Cause(_Value):
    """The direct causal edge of an event.

    Attributes:
        command_id: the command this event answers (Reply events).
        loop_id: for an input handed back by a child loop, that child loop.
        agency: who issued the command.
    """

    command_id: UUID | None = None
    event_id: UUID | None = None
    loop_id: UUID | None = None
    tool_execution_id: UUID | None = None
    agency: Agency = Agency.MACHINE


class Header(_Value):
    """Identity and coordinates of an event (session ▸ loop ▸ turn ▸ step).

    There is no sequence number here: the only order is the journal's (the
    Kafka offset within a loop's partition).
    """

    event_id: UUID | None = None
    session_id: UUID | None = None
    loop_id: UUID | None = None
    turn_id: UUID | None = None
    step_id: UUID | None = None
    created_at: datetime | None = None
    cause: Cause | None = None
    agent_name: str = ""


# --------------------------------------------------------------------------
# Failure projection
# --------------------------------------------------------------------------


class FailureInfo(_Value):
    """A turn error projected to its stable wire form ``{kind, message}``."""

    kind: FailureKind = FailureKind.UNKNOWN
    message: str = ""

    def to_error(self) -> RestoredError:
        """The typed error a consumer sees after reading this back."""
        return RestoredError(self.kind.value, self.message)


def failure_from_error(err: BaseException | None) -> FailureInfo:
    """Project ``err`` to ``{kind, message}``.

    A restored error keeps its own kind and original message, so re-projecting
    it is a fixed point. Errors outside the turn-error tree are ``unknown``.
    """
    if err is None:
        return FailureInfo()
    if isinstance(err, RestoredError):
        return FailureInfo(kind=_kind_of(err.restored_kind), message=err.message)
    kind = _kind_of(err.kind) if isinstance(err, TurnError) else FailureKind.UNKNOWN
    return FailureInfo(kind=kind, message=str(err)[:MAX_FAILURE_MESSAGE])


def _kind_of(value: str) -> FailureKind:
    try:
        return FailureKind(value)
    except ValueError:
        return FailureKind.UNKNOWN


# --------------------------------------------------------------------------
# Events
# --------------------------------------------------------------------------


class EventBase(_Value):
    """Fields and class-level traits shared by every event."""

    DELIVERY: ClassVar[Delivery]
    PROFILE: ClassVar[Profile]
    SCOPE: ClassVar[Scope] = Scope.LOOP
    REPLY: ClassVar[bool] = False

    header: Header

    @property
    def type_name(self) -> str:
        """The event's type name, as used on the wire."""
        return type(self).__name__

    def is_enduring(self) -> bool:
        """Whether the event is journaled (enduring or terminal)."""
        return self.DELIVERY is not Delivery.EPHEMERAL

    def ends_turn(self) -> bool:
        """True only for the three turn terminals."""
        return self.DELIVERY is Delivery.TERMINAL

    def reply_to(self) -> UUID | None:
        """The command this event answers, for Reply events; else ``None``."""
        if not self.REPLY or self.header.cause is None:
            return None
        return self.header.cause.command_id


_TurnIndex = Annotated[int, Field(ge=1)]


class LoopStarted(EventBase):
    """A loop came into being (first event of its journal)."""

    DELIVERY = Delivery.ENDURING
    PROFILE = Profile.LOOP
    type: Literal["LoopStarted"] = "LoopStarted"
    model: str = ""
    display_name: str = ""


class LoopStopped(EventBase):
    """A client's ``Shutdown`` stopped the loop; later inputs are refused.

    Durable, so every later owner of the loop refuses alike
    (``TurnRejected{shutting_down}``). A host's own stop (a partition
    handover) writes none. An agent that allows it reopens the loop with the
    next input's ``TurnStarted``.
    """

    DELIVERY = Delivery.ENDURING
    PROFILE = Profile.LOOP
    type: Literal["LoopStopped"] = "LoopStopped"


class LoopDeleted(EventBase):
    """A client's ``DeleteLoop`` deleted the loop: the answer to that command.

    Committed after the loop's turn ended and its queued input was returned,
    in the same transaction that removes the loop's state (history records
    tombstoned, the head replaced by a small deleted marker). Every later
    input is refused ``TurnRejected{loop_deleted}``, by any owner. The
    journal is never compacted: the loop's earlier events stay until the
    topic's retention removes them.
    """

    DELIVERY = Delivery.ENDURING
    PROFILE = Profile.LOOP
    REPLY = True
    type: Literal["LoopDeleted"] = "LoopDeleted"


class LoopIdle(EventBase):
    """The loop parked: no turn running and nothing left to start."""

    DELIVERY = Delivery.ENDURING
    PROFILE = Profile.LOOP
    type: Literal["LoopIdle"] = "LoopIdle"


class InputQueued(EventBase):
    """An input was accepted behind a running turn (live-only, self-healing)."""

    DELIVERY = Delivery.EPHEMERAL
    PROFILE = Profile.LOOP
    REPLY = True
    type: Literal["InputQueued"] = "InputQueued"


class TurnRejected(EventBase):
    """An input was refused before it became a turn."""

    DELIVERY = Delivery.ENDURING
    PROFILE = Profile.LOOP
    REPLY = True
    type: Literal["TurnRejected"] = "TurnRejected"
    reason: RejectReason
    detail: str = ""


class TurnStarted(EventBase):
    """A turn began; ``message`` is the exact committed first user message."""

    DELIVERY = Delivery.ENDURING
    PROFILE = Profile.TURN
    REPLY = True
    type: Literal["TurnStarted"] = "TurnStarted"
    turn_index: _TurnIndex
    message: UserMessage
    model: str = ""
    """The model every step of this turn asks (empty: not recorded)."""
    max_tokens: int | None = Field(default=None, ge=1)
    """The output cap of every step of this turn, if any."""


class TurnFoldedInto(EventBase):
    """A queued input joined the running turn after a tool step."""

    DELIVERY = Delivery.ENDURING
    PROFILE = Profile.TURN
    REPLY = True
    type: Literal["TurnFoldedInto"] = "TurnFoldedInto"
    turn_index: _TurnIndex
    message: UserMessage


class InputCancelled(EventBase):
    """A queued input was returned without running.

    ``header.turn_id`` names the turn whose end returned it, or is ``None`` for
    a retract. ``turn_index`` is that turn's index, or 0.
    """

    DELIVERY = Delivery.ENDURING
    PROFILE = Profile.INPUT_CANCELLED
    REPLY = True
    type: Literal["InputCancelled"] = "InputCancelled"
    reason: CancelReason
    message: UserMessage
    turn_index: int = Field(default=0, ge=0)


class TokenDelta(EventBase):
    """One streamed chunk of a step (live-only)."""

    DELIVERY = Delivery.EPHEMERAL
    PROFILE = Profile.STEP
    type: Literal["TokenDelta"] = "TokenDelta"
    turn_index: _TurnIndex
    chunk: Chunk


class ToolTiming(BaseModel):
    """When one tool call of a step ran, and how it ended (no input or output).

    Attributes:
        tool_use_id: the call (its ``ToolResultMessage`` has the same id).
        tool_name: the tool.
        started_at: when the tool was called (UTC).
        duration_us: how long it ran, in microseconds (up to its timeout).
        is_error: it raised, timed out or returned an error result.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool_use_id: str
    tool_name: str
    started_at: datetime
    duration_us: int = Field(ge=0)
    is_error: bool = False


class StepDone(EventBase):
    """A step committed: its AIMessage, then one ToolResultMessage per call.

    ``tool_timings`` has one entry per call that ran (in call order; a denied
    or not-run call has none): the durable per-call times analytics need.
    """

    DELIVERY = Delivery.ENDURING
    PROFILE = Profile.STEP
    type: Literal["StepDone"] = "StepDone"
    messages: tuple[
        Annotated[AIMessage | ToolResultMessage, Field(discriminator="role")], ...
    ]
    tool_timings: tuple[ToolTiming, ...] = ()

    @model_validator(mode="after")
    def _group_shape(self) -> StepDone:
        messages = self.messages
        if not messages or not isinstance(messages[0], AIMessage):
            raise ValueError("messages must start with the step's AIMessage")
        # A loop, not all() over a generator: this runs on every decoded step.
        for message in messages[1:]:
            if not isinstance(message, ToolResultMessage):
                # ValueError, as pydantic turns it into a ValidationError.
                raise ValueError("messages after the first must be tool results")  # noqa: TRY004
        return self

    @property
    def ai_message(self) -> AIMessage:
        """The step's model response."""
        first = self.messages[0]
        if not isinstance(first, AIMessage):  # unreachable: _group_shape checks it
            raise TypeError("StepDone without an AIMessage")
        return first


class TurnDone(EventBase):
    """The turn ended with a final answer (the last step's AIMessage)."""

    DELIVERY = Delivery.TERMINAL
    PROFILE = Profile.TURN
    type: Literal["TurnDone"] = "TurnDone"
    turn_index: _TurnIndex
    message: AIMessage
    usage: Usage = Usage()


class TurnFailed(EventBase):
    """The turn ended with an error; committed steps stay."""

    DELIVERY = Delivery.TERMINAL
    PROFILE = Profile.TURN
    type: Literal["TurnFailed"] = "TurnFailed"
    turn_index: _TurnIndex
    error: FailureInfo

    def restored_error(self) -> RestoredError:
        """The failure as a typed error (what survives a restart)."""
        return self.error.to_error()


class TurnInterrupted(EventBase):
    """The turn was interrupted (by a command, a shutdown, or a restore)."""

    DELIVERY = Delivery.TERMINAL
    PROFILE = Profile.TURN
    type: Literal["TurnInterrupted"] = "TurnInterrupted"
    turn_index: _TurnIndex


class ToolCallStarted(EventBase):
    """A tool call of the current step is about to run (live-only)."""

    DELIVERY = Delivery.EPHEMERAL
    PROFILE = Profile.TOOL
    type: Literal["ToolCallStarted"] = "ToolCallStarted"
    tool_execution_id: UUID
    tool_use_id: str
    tool_name: str
    summary: str = ""


class ToolCallCompleted(EventBase):
    """A tool call finished; ``result_preview`` is bounded (live-only)."""

    DELIVERY = Delivery.EPHEMERAL
    PROFILE = Profile.TOOL
    type: Literal["ToolCallCompleted"] = "ToolCallCompleted"
    tool_execution_id: UUID
    tool_use_id: str
    is_error: bool = False
    result_preview: str = ""


class PermissionDecided(EventBase):
    """A tool call's access was decided without asking anyone."""

    DELIVERY = Delivery.ENDURING
    PROFILE = Profile.TOOL
    type: Literal["PermissionDecided"] = "PermissionDecided"
    tool_execution_id: UUID
    effect: Literal["approve", "deny"]
    reason: str
    subject: str


class PermissionRequested(EventBase):
    """A tool call waits for a person's approval on gate ``gate_id``."""

    DELIVERY = Delivery.ENDURING
    PROFILE = Profile.TOOL
    type: Literal["PermissionRequested"] = "PermissionRequested"
    tool_execution_id: UUID
    gate_id: UUID
    tool_name: str
    summary: str = ""


class GateOpened(EventBase):
    """A gate opened; ``actions`` are the answers it accepts."""

    DELIVERY = Delivery.ENDURING
    PROFILE = Profile.STEP
    type: Literal["GateOpened"] = "GateOpened"
    gate_id: UUID
    kind: str
    tool_execution_id: UUID | None = None
    actions: tuple[str, ...] = ()


class GateResolved(EventBase):
    """A gate closed: answered (with ``action``) or abandoned."""

    DELIVERY = Delivery.ENDURING
    PROFILE = Profile.STEP
    type: Literal["GateResolved"] = "GateResolved"
    gate_id: UUID
    reason: GateCloseReason
    action: str = ""


class TurnResumed(EventBase):
    """A new owner continues the open turn a crash left (``on_restore="continue"``).

    ``steps`` counts the turn's committed ``StepDone`` events (the turn goes on
    after the last of them), ``resumes`` how often this turn was resumed,
    this time included; ``reason`` is a stable code (``owner_restored``).
    """

    DELIVERY = Delivery.ENDURING
    PROFILE = Profile.TURN
    type: Literal["TurnResumed"] = "TurnResumed"
    turn_index: _TurnIndex
    steps: int = Field(default=0, ge=0)
    resumes: int = Field(default=1, ge=1)
    reason: str = ""


AnyEvent = (
    LoopStarted
    | LoopIdle
    | InputQueued
    | TurnRejected
    | TurnStarted
    | TurnFoldedInto
    | InputCancelled
    | TokenDelta
    | StepDone
    | TurnDone
    | TurnFailed
    | TurnInterrupted
    | ToolCallStarted
    | ToolCallCompleted
    | PermissionDecided
    | PermissionRequested
    | GateOpened
    | GateResolved
    | LoopStopped
    | TurnResumed
    | LoopDeleted
)
"""Every event, for ``match`` dispatch ending in ``assert_never``."""

Event = Annotated[AnyEvent, Field(discriminator="type")]
"""Every event, as a pydantic discriminated union (for parsing)."""

EphemeralEvent = TokenDelta | ToolCallStarted | ToolCallCompleted | InputQueued
TerminalEvent = TurnDone | TurnFailed | TurnInterrupted
EnduringEvent = (
    LoopStarted
    | LoopIdle
    | TurnRejected
    | TurnStarted
    | TurnFoldedInto
    | InputCancelled
    | StepDone
    | TurnDone
    | TurnFailed
    | TurnInterrupted
    | PermissionDecided
    | PermissionRequested
    | GateOpened
    | GateResolved
    | LoopStopped
    | TurnResumed
    | LoopDeleted
)

EVENT_TYPES: tuple[type[EventBase], ...] = get_args(AnyEvent)
"""Every event class, in :data:`AnyEvent` order (its enduring ones: the journal's)."""
EPHEMERAL_EVENT_TYPES = tuple(
    t for t in EVENT_TYPES if t.DELIVERY is Delivery.EPHEMERAL
)
ENDURING_EVENT_TYPES = tuple(
    t for t in EVENT_TYPES if t.DELIVERY is not Delivery.EPHEMERAL
)
TERMINAL_EVENT_TYPES = tuple(t for t in EVENT_TYPES if t.DELIVERY is Delivery.TERMINAL)
REPLY_EVENT_TYPES = tuple(t for t in EVENT_TYPES if t.REPLY)
