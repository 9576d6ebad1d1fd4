"""Loop state: what the compacted ``turnstream.loops.v1`` topic holds per loop.

Owns :class:`LoopState`, :class:`OpenTurn` and :class:`OpenGate`. A snapshot
is a *cache* of the journal fold, never the source of truth: restore reads the
latest snapshot and then folds only the journal events after
``journal_offset``. Imports only value types.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from turnstream.content import Conversation

__all__ = ["CallDecision", "LoopState", "OpenGate", "OpenTurn"]


class CallDecision(BaseModel):
    """An access decision of the open turn's step that is not committed yet.

    Calls are decided one at a time in call order, so the n-th decision about
    a tool is about the step's n-th decided call of that tool. ``approve``
    means the call may have run: its outcome is unknown after a crash.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool_name: str
    effect: Literal["approve", "deny"]


class OpenGate(BaseModel):
    """An approval gate of the open turn that has not been resolved yet.

    ``tool_name`` and ``summary`` are its ``PermissionRequested``'s: a resumed
    turn's call of the same tool and summary takes the gate over.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    gate_id: UUID
    step_id: UUID
    tool_name: str = ""
    summary: str = ""


class OpenTurn(BaseModel):
    """A turn that started and has not ended yet (with its open gates).

    Attributes:
        message_index: where the turn's input sits in the loop's history (the
            turn's own messages follow it); ``-1``: not recorded.
        steps: the turn's committed ``StepDone`` events.
        resumes: how often the turn was resumed (``TurnResumed`` events).
        model: the model its steps ask (its ``TurnStarted``'s); empty: not
            recorded.
        max_tokens: its output cap per step, if any.
        decisions: the access decisions of the step after its last
            ``StepDone`` (``PermissionDecided`` and answered gates), in order.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    turn_id: UUID
    turn_index: int = Field(ge=1)
    gates: tuple[OpenGate, ...] = ()
    message_index: int = Field(default=-1, ge=-1)
    steps: int = Field(default=0, ge=0)
    resumes: int = Field(default=0, ge=0)
    model: str = ""
    max_tokens: int | None = Field(default=None, ge=1)
    decisions: tuple[CallDecision, ...] = ()


class LoopState(BaseModel):
    """A loop's committed state after folding its journal up to an offset.

    Attributes:
        turn_index: the number of turns started (the next turn is ``+ 1``).
        messages: committed history (never the system prompt).
        open_turn: the turn in progress at ``journal_offset``, if any.
        journal_offset: the events-topic offset of the *next* record after
            the last folded one (``-1`` when the state was not read from
            Kafka, e.g. in memory).
        command_offset: the commands-topic offset of the next command to
            process (``-1`` when unknown).
        recent_command_ids: ids of the most recently resolved commands
            (bounded window, oldest first), so a client's retry of a command
            with the same id is recognised and not run twice.
        applied_command_offset: commands-topic offset of the last command of
            this loop the actor had taken when the snapshot was written; a
            command at or before it has taken effect and never runs again
            (``-1``: none, or not on Kafka).
        pending_command_offsets: offsets at or before
            ``applied_command_offset`` of admitted inputs that had no durable
            answer yet (queued behind a turn); they run again after a restore.
        stopped: a client's ``Shutdown`` stopped the loop (``LoopStopped``);
            later inputs are refused unless the loop's agent reopens it.
        history_length: how many messages of the history are held by the
            loop's history records rather than by ``messages``; ``-1``:
            ``messages`` is the whole history (nothing is kept elsewhere).
        history_records: how many history records hold them.
        history_start: in a history record, the position of its first
            message in the loop's history.
        history_first_offset: where the loop's history record 0 is in its
            history partition (``-1``: not known).
        history_last_offset: in a head, where its last history record is
            (``-1``: not known).
        history_previous_offset: in a history record ``n > 0``, where record
            ``n - 1`` is (``-1``: none, or not known). With the head's last
            offset these let a reader fetch a loop's history records by
            position instead of scanning the partition for their keys.
        deleted: a client's ``DeleteLoop`` deleted the loop (``LoopDeleted``):
            the state is the loop's deleted marker (no history); every later
            input is refused, by any owner.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    session_id: UUID
    loop_id: UUID
    agent_name: str = ""
    model: str = ""
    turn_index: int = Field(default=0, ge=0)
    messages: tuple[Conversation, ...] = ()
    open_turn: OpenTurn | None = None
    journal_offset: int = -1
    command_offset: int = -1
    recent_command_ids: tuple[UUID, ...] = ()
    updated_at: datetime | None = None
    applied_command_offset: int = -1
    pending_command_offsets: tuple[int, ...] = ()
    stopped: bool = False
    history_length: int = Field(default=-1, ge=-1)
    history_records: int = Field(default=0, ge=0)
    history_start: int = Field(default=0, ge=0)
    history_first_offset: int = Field(default=-1, ge=-1)
    history_last_offset: int = Field(default=-1, ge=-1)
    history_previous_offset: int = Field(default=-1, ge=-1)
    deleted: bool = False
