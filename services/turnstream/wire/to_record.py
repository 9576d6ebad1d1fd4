"""Encode side of the codec: value types to Avro records (plain dicts).

Owns one pure function per Avro record type, mapping a frozen pydantic model
to the dict fastavro writes. Union branches are written in tuple notation
``(full name, record)`` so the writer never guesses a branch from a record's
shape. Imports value types and wire errors; never fastavro, the runtime or
aiokafka.

Every record built here has exactly the fields of its schema (the writer runs
with ``strict=True``), and dispatch is exhaustive: adding an event, command,
block or chunk type without a mapping fails ``mypy`` at ``assert_never``.

One module on purpose (~470 lines): the whole encode direction, one builder per
record type, mirroring ``from_record``.
"""

from __future__ import annotations

from datetime import datetime
from typing import assert_never
from uuid import UUID

from turnstream import commands, content
from turnstream import events as ev
from turnstream.state import LoopState, OpenTurn
from turnstream.wire.errors import EncodeError
from turnstream.wire.schemas import NAMESPACE

__all__ = [
    "command_record",
    "event_record",
    "full_name",
    "loop_state_record",
    "loop_state_scalars",
]

Record = dict[str, object]
Branch = tuple[str, Record]


def full_name(short: str) -> str:
    """The full Avro name of a record type in the current namespace."""
    return f"{NAMESPACE}.{short}"


def _branch(short: str, record: Record) -> Branch:
    return (f"{NAMESPACE}.{short}", record)


def _uuid(value: UUID) -> str:
    # Written as its canonical text: fastavro's union writer matches a str
    # branch far faster than it converts a UUID object (same bytes on the wire).
    return str(value)


def _opt_uuid(value: UUID | None) -> str | None:
    return None if value is None else str(value)


def _timestamp(value: datetime, where: str) -> datetime:
    # timestamp-micros is an instant; a naive datetime has no instant, and
    # reading it back would yield an aware value unequal to what was written.
    if value.tzinfo is None or value.utcoffset() is None:
        raise EncodeError(where, "naive datetime; use a timezone-aware (UTC) value")
    return value


def _opt_timestamp(value: datetime | None, where: str) -> datetime | None:
    return None if value is None else _timestamp(value, where)


# --------------------------------------------------------------------------
# Header
# --------------------------------------------------------------------------


def _cause(cause: ev.Cause) -> Record:
    return {
        "command_id": _opt_uuid(cause.command_id),
        "event_id": _opt_uuid(cause.event_id),
        "loop_id": _opt_uuid(cause.loop_id),
        "tool_execution_id": _opt_uuid(cause.tool_execution_id),
        "agency": cause.agency.value,
    }


def header_record(header: ev.Header) -> Record:
    """The ``Header`` record of an event."""
    return {
        "event_id": _opt_uuid(header.event_id),
        "session_id": _opt_uuid(header.session_id),
        "loop_id": _opt_uuid(header.loop_id),
        "turn_id": _opt_uuid(header.turn_id),
        "step_id": _opt_uuid(header.step_id),
        "created_at": _opt_timestamp(header.created_at, "header.created_at"),
        "cause": None if header.cause is None else _cause(header.cause),
        "agent_name": header.agent_name,
    }


# --------------------------------------------------------------------------
# Content
# --------------------------------------------------------------------------


def usage_record(usage: content.Usage) -> Record:
    """The ``Usage`` record."""
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_creation_tokens": usage.cache_creation_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
    }


def _image(media_type: str, url: str | None, data: bytes | None) -> Record:
    return {"media_type": media_type, "url": url, "data": data}


def _thinking(thinking: content.ThinkingBlock | content.ThinkingChunk) -> Record:
    # Both records carry these five fields; a chunk adds its index.
    return {
        "thinking": thinking.thinking,
        "signature": thinking.signature,
        "signature_format": thinking.signature_format,
        "provider_state": thinking.provider_state,
        "provider_state_format": thinking.provider_state_format,
    }


def block_branch(block: content.Block) -> Branch:
    """A content block as its union branch."""
    match block:
        case content.TextBlock():
            return _branch("TextBlock", {"text": block.text})
        case content.RefusalBlock():
            return _branch("RefusalBlock", {"text": block.text})
        case content.ImageBlock():
            return _branch(
                "ImageBlock", _image(block.media_type, block.url, block.data)
            )
        case content.ThinkingBlock():
            return _branch("ThinkingBlock", _thinking(block))
        case content.ToolUseBlock():
            return _branch(
                "ToolUseBlock",
                {
                    "id": block.id,
                    "name": block.name,
                    "input": block.input,
                    "provider_state": block.provider_state,
                    "provider_state_format": block.provider_state_format,
                },
            )
        case content.ToolResultBlock():
            return _branch(
                "ToolResultBlock",
                {
                    "tool_use_id": block.tool_use_id,
                    # A tool result's content is a subset of the blocks, written alike.
                    "content": [block_branch(c) for c in block.content],
                    "is_error": block.is_error,
                },
            )
        case _:
            assert_never(block)


def _blocks(blocks: tuple[content.Block, ...]) -> list[Branch]:
    return [block_branch(b) for b in blocks]


def user_message_record(message: content.UserMessage) -> Record:
    """The ``UserMessage`` record."""
    return {"blocks": _blocks(message.blocks)}


def ai_message_record(message: content.AIMessage) -> Record:
    """The ``AIMessage`` record."""
    return {
        "blocks": _blocks(message.blocks),
        "usage": None if message.usage is None else usage_record(message.usage),
    }


def tool_result_message_record(message: content.ToolResultMessage) -> Record:
    """The ``ToolResultMessage`` record."""
    return {
        "tool_use_id": message.tool_use_id,
        "is_error": message.is_error,
        "blocks": _blocks(message.blocks),
    }


def message_branch(message: content.Message) -> Branch:
    """A message as its union branch (history and step groups)."""
    match message:
        case content.UserMessage():
            return _branch("UserMessage", user_message_record(message))
        case content.AIMessage():
            return _branch("AIMessage", ai_message_record(message))
        case content.ToolResultMessage():
            return _branch("ToolResultMessage", tool_result_message_record(message))
        case _:
            assert_never(message)


def chunk_branch(chunk: content.Chunk) -> Branch:
    """A streamed chunk as its union branch."""
    match chunk:
        case content.TextChunk():
            return _branch("TextChunk", {"text": chunk.text})
        case content.RefusalChunk():
            return _branch("RefusalChunk", {"text": chunk.text})
        case content.ThinkingChunk():
            return _branch("ThinkingChunk", {"index": chunk.index, **_thinking(chunk)})
        case content.ToolUseChunk():
            return _branch(
                "ToolUseChunk",
                {
                    "index": chunk.index,
                    "id": chunk.id,
                    "name": chunk.name,
                    "input_json": chunk.input_json,
                },
            )
        case content.ImageChunk():
            return _branch(
                "ImageChunk",
                {
                    "index": chunk.index,
                    **_image(chunk.media_type, chunk.url, chunk.data),
                },
            )
        case _:
            assert_never(chunk)


def failure_record(info: ev.FailureInfo) -> Record:
    """The ``FailureInfo`` record: ``{kind, message}``."""
    return {"kind": info.kind.value, "message": info.message}


# --------------------------------------------------------------------------
# Events
# --------------------------------------------------------------------------


def payload_record(event: ev.AnyEvent) -> Record:  # noqa: PLR0911, PLR0912
    """The body of ``event`` (its fields except ``header`` and ``type``)."""
    match event:
        case ev.LoopStarted():
            return {"model": event.model, "display_name": event.display_name}
        case ev.LoopIdle() | ev.InputQueued() | ev.LoopStopped() | ev.LoopDeleted():
            return {}
        case ev.TurnRejected():
            return {"reason": event.reason.value, "detail": event.detail}
        case ev.TurnStarted():
            return {
                "turn_index": event.turn_index,
                "message": user_message_record(event.message),
                "model": event.model,
                "max_tokens": event.max_tokens,
            }
        case ev.TurnFoldedInto():
            return {
                "turn_index": event.turn_index,
                "message": user_message_record(event.message),
            }
        case ev.InputCancelled():
            return {
                "reason": event.reason.value,
                "message": user_message_record(event.message),
                "turn_index": event.turn_index,
            }
        case ev.TokenDelta():
            return {"turn_index": event.turn_index, "chunk": chunk_branch(event.chunk)}
        case ev.StepDone():
            return {
                "messages": [message_branch(m) for m in event.messages],
                "tool_timings": [
                    {
                        "tool_use_id": t.tool_use_id,
                        "tool_name": t.tool_name,
                        "started_at": _timestamp(
                            t.started_at, "tool_timings.started_at"
                        ),
                        "duration_us": t.duration_us,
                        "is_error": t.is_error,
                    }
                    for t in event.tool_timings
                ],
            }
        case ev.TurnDone():
            return {
                "turn_index": event.turn_index,
                "message": ai_message_record(event.message),
                "usage": usage_record(event.usage),
            }
        case ev.TurnFailed():
            return {
                "turn_index": event.turn_index,
                "error": failure_record(event.error),
            }
        case ev.TurnInterrupted():
            return {"turn_index": event.turn_index}
        case ev.TurnResumed():
            return {
                "turn_index": event.turn_index,
                "steps": event.steps,
                "resumes": event.resumes,
                "reason": event.reason,
            }
        case ev.ToolCallStarted():
            return {
                "tool_execution_id": _uuid(event.tool_execution_id),
                "tool_use_id": event.tool_use_id,
                "tool_name": event.tool_name,
                "summary": event.summary,
            }
        case ev.ToolCallCompleted():
            return {
                "tool_execution_id": _uuid(event.tool_execution_id),
                "tool_use_id": event.tool_use_id,
                "is_error": event.is_error,
                "result_preview": event.result_preview,
            }
        case ev.PermissionDecided():
            return {
                "tool_execution_id": _uuid(event.tool_execution_id),
                "effect": event.effect,
                "reason": event.reason,
                "subject": event.subject,
            }
        case ev.PermissionRequested():
            return {
                "tool_execution_id": _uuid(event.tool_execution_id),
                "gate_id": _uuid(event.gate_id),
                "tool_name": event.tool_name,
                "summary": event.summary,
            }
        case ev.GateOpened():
            return {
                "gate_id": _uuid(event.gate_id),
                "kind": event.kind,
                "tool_execution_id": _opt_uuid(event.tool_execution_id),
                "actions": list(event.actions),
            }
        case ev.GateResolved():
            return {
                "gate_id": _uuid(event.gate_id),
                "reason": event.reason.value,
                "action": event.action,
            }
        case _:
            assert_never(event)


def event_record(event: ev.AnyEvent) -> Record:
    """The envelope record ``{header, payload}`` of any event.

    The caller picks the envelope (journal or deltas) by delivery class; the
    record shape is the same for both.
    """
    return {
        "header": header_record(event.header),
        "payload": _branch(type(event).__name__, payload_record(event)),
    }


# --------------------------------------------------------------------------
# Commands and loop state
# --------------------------------------------------------------------------


def _command_payload(command: commands.AnyCommand) -> Record:
    match command:
        case commands.SubmitInput():
            return {
                "message": user_message_record(command.message),
                "no_fold": command.no_fold,
                "agent": command.agent,
                "model": command.model,
                "max_tokens": command.max_tokens,
            }
        case commands.Interrupt():
            return {"turn_id": _opt_uuid(command.turn_id)}
        case commands.Shutdown() | commands.DeleteLoop():
            return {}
        case commands.RespondGate():
            return {"gate_id": _uuid(command.gate_id), "action": command.action}
        case commands.Retract():
            return {"target_command_id": _uuid(command.target_command_id)}
        case _:
            assert_never(command)


def command_record(command: commands.AnyCommand) -> Record:
    """The ``CommandEnvelope`` record of a command."""
    return {
        "command_id": _uuid(command.command_id),
        "session_id": _uuid(command.session_id),
        "loop_id": _uuid(command.loop_id),
        "created_at": _timestamp(command.created_at, "command.created_at"),
        "agency": command.agency.value,
        "payload": _branch(type(command).__name__, _command_payload(command)),
    }


def _open_turn(turn: OpenTurn) -> Record:
    return {
        "turn_id": _uuid(turn.turn_id),
        "turn_index": turn.turn_index,
        "gates": [
            {
                "gate_id": _uuid(g.gate_id),
                "step_id": _uuid(g.step_id),
                "tool_name": g.tool_name,
                "summary": g.summary,
            }
            for g in turn.gates
        ],
        "message_index": turn.message_index,
        "steps": turn.steps,
        "resumes": turn.resumes,
        "model": turn.model,
        "max_tokens": turn.max_tokens,
        "decisions": [
            {"tool_name": d.tool_name, "effect": d.effect} for d in turn.decisions
        ],
    }


def _uuids(ids: tuple[UUID, ...]) -> list[str]:
    return [str(i) for i in ids]


def loop_state_record(state: LoopState) -> Record:
    """The ``LoopState`` record."""
    record = loop_state_scalars(state)
    record["messages"] = [message_branch(m) for m in state.messages]
    record["recent_command_ids"] = _uuids(state.recent_command_ids)
    return record


def loop_state_scalars(state: LoopState) -> Record:
    """The ``LoopState`` record without its two long arrays.

    ``messages`` and ``recent_command_ids`` are left out: the snapshot writer
    of :mod:`turnstream.wire._accel.state_writer` writes them from its memo.
    """
    return {
        "session_id": _uuid(state.session_id),
        "loop_id": _uuid(state.loop_id),
        "agent_name": state.agent_name,
        "model": state.model,
        "turn_index": state.turn_index,
        "open_turn": None if state.open_turn is None else _open_turn(state.open_turn),
        "journal_offset": state.journal_offset,
        "command_offset": state.command_offset,
        "updated_at": _opt_timestamp(state.updated_at, "loop_state.updated_at"),
        "applied_command_offset": state.applied_command_offset,
        "pending_command_offsets": list(state.pending_command_offsets),
        "stopped": state.stopped,
        "deleted": state.deleted,
        "history_length": state.history_length,
        "history_records": state.history_records,
        "history_start": state.history_start,
        "history_first_offset": state.history_first_offset,
        "history_last_offset": state.history_last_offset,
        "history_previous_offset": state.history_previous_offset,
    }
