"""Commands: what clients send to a loop.

Owns :class:`SubmitInput`, :class:`Interrupt`, :class:`RespondGate`,
:class:`Retract`, :class:`Shutdown`, :class:`DeleteLoop` and the :data:`Command`
union. Commands are
fire-and-forget: the outcome arrives as an event whose ``reply_to()`` (or, for
interrupts and gate answers, whose effect) names the command. Every command is
addressed to one loop; on Kafka the loop id is the record key. Imports only
value types.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from turnstream.content import UserMessage
from turnstream.events import Agency

__all__ = [
    "AnyCommand",
    "Command",
    "CommandBase",
    "DeleteLoop",
    "Interrupt",
    "RespondGate",
    "Retract",
    "Shutdown",
    "SubmitInput",
]


class CommandBase(BaseModel):
    """Fields every command carries."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    command_id: UUID
    session_id: UUID
    loop_id: UUID
    created_at: datetime
    agency: Agency = Agency.USER


class SubmitInput(CommandBase):
    """Submit a user message to a loop.

    Attributes:
        no_fold: never fold this input into a running turn; it starts its own
            turn in FIFO order and stops the fold scan at its position.
        agent: the agent this input is for. The first submit of a loop binds
            the loop to it (empty: the service's single agent); later ones
            must name the same agent or none.
        model: a model from the agent's allow-list for the turn this input
            starts (empty: the agent's default). An input that names a model
            or options never folds: it starts its own turn.
        max_tokens: an output cap for that turn's steps (``None``: the
            agent's).
    """

    type: Literal["SubmitInput"] = "SubmitInput"
    message: UserMessage
    no_fold: bool = False
    agent: str = Field(default="", max_length=256)
    model: str = Field(default="", max_length=256)
    max_tokens: int | None = Field(default=None, ge=1)

    def picks_turn_options(self) -> bool:
        """Whether this input chooses its own turn's model or options."""
        return bool(self.model) or self.max_tokens is not None


class Interrupt(CommandBase):
    """Cancel the loop's running turn (if any). Human queued input is kept.

    With ``turn_id`` it cancels that turn only: one that already ended (or a
    later turn running by then) is left alone and the interrupt is answered
    ``TurnRejected{turn_ended}``. Without it, whichever turn is running.
    """

    type: Literal["Interrupt"] = "Interrupt"
    turn_id: UUID | None = None


class RespondGate(CommandBase):
    """Answer an open gate with one of the actions it offered."""

    type: Literal["RespondGate"] = "RespondGate"
    gate_id: UUID
    action: str


class Retract(CommandBase):
    """Withdraw a queued input that has not started or folded yet."""

    type: Literal["Retract"] = "Retract"
    target_command_id: UUID


class Shutdown(CommandBase):
    """Stop the loop: interrupt its turn and return queued input."""

    type: Literal["Shutdown"] = "Shutdown"


class DeleteLoop(CommandBase):
    """Delete the loop: stop it, drop its state, refuse every later input.

    Its turn is interrupted and queued input returned; then ``LoopDeleted``
    is committed, in the same transaction as the removal of the loop's state
    (its history records tombstoned, its head replaced by a small deleted
    marker). Later inputs are answered ``TurnRejected{loop_deleted}`` by any
    owner. The journal keeps the loop's events until its retention.
    """

    type: Literal["DeleteLoop"] = "DeleteLoop"


AnyCommand = SubmitInput | Interrupt | RespondGate | Retract | Shutdown | DeleteLoop
"""Every command, for ``match`` dispatch ending in ``assert_never``."""

Command = Annotated[AnyCommand, Field(discriminator="type")]
"""Every command, as a pydantic discriminated union (for parsing)."""
