"""Decode side of the codec: Avro records (as read by fastavro) to value types.

Owns one pure function per Avro record type, mapping a decoded record to its
frozen pydantic model. Input arrives as ``object`` (the codec narrows
fastavro's ``Any`` at the boundary) and every field is narrowed here by
``isinstance`` before it reaches a constructor, which then validates the
value's own rules (ranges, group shape …). Imports value types and wire
errors; never fastavro, the runtime or aiokafka.

Records are read with ``return_record_name=True`` (and the override for
``["null", Record]`` unions), so a union of records arrives as
``(full name, record)`` and the branch is chosen by name, never by shape.
Names are matched on their short form, so a record keeps its meaning when
a later namespace (``turnstream.v2``) reuses it.

One module on purpose (~620 lines): the whole decode direction, one small reader
per record type in one table, so a new type changes one place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Literal, TypeVar
from uuid import UUID

from turnstream import commands, content
from turnstream import events as ev
from turnstream.errors import DecodeError
from turnstream.state import CallDecision, LoopState, OpenGate, OpenTurn
from turnstream.wire.errors import UnknownRecordTypeError

__all__ = [
    "COMMAND_READERS",
    "EVENT_READERS",
    "Record",
    "command_from",
    "event_from",
    "loop_state_from",
]

Record = Mapping[str, object]

_WHAT = "record"
_E = TypeVar("_E")
_V = TypeVar("_V")


def _wrong(key: str, expected: str) -> DecodeError:
    return DecodeError(_WHAT, f"field {key!r} is not {expected}")


def _get(rec: Record, key: str) -> object:
    try:
        return rec[key]
    except KeyError:
        raise DecodeError(_WHAT, f"field {key!r} is missing") from None


def _of(rec: Record, key: str, kind: type[_V], expected: str) -> _V:
    value = _get(rec, key)
    if isinstance(value, kind):
        return value
    raise _wrong(key, expected)


def _opt_of(rec: Record, key: str, kind: type[_V], expected: str) -> _V | None:
    value = _get(rec, key)
    if value is None or isinstance(value, kind):
        return value
    raise _wrong(key, expected)


def _str(rec: Record, key: str) -> str:
    return _of(rec, key, str, "a string")


def _int(rec: Record, key: str) -> int:
    value = _get(rec, key)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise _wrong(key, "a long")


def _bool(rec: Record, key: str) -> bool:
    return _of(rec, key, bool, "a boolean")


def _opt_int(rec: Record, key: str) -> int | None:
    value = _get(rec, key)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise _wrong(key, "a long or null")


def _opt_str(rec: Record, key: str) -> str | None:
    return _opt_of(rec, key, str, "a string or null")


def _opt_bytes(rec: Record, key: str) -> bytes | None:
    return _opt_of(rec, key, bytes, "bytes or null")


def _uuid(rec: Record, key: str) -> UUID:
    return _of(rec, key, UUID, "a uuid")


def _opt_uuid(rec: Record, key: str) -> UUID | None:
    return _opt_of(rec, key, UUID, "a uuid or null")


def _opt_timestamp(rec: Record, key: str) -> datetime | None:
    return _opt_of(rec, key, datetime, "a timestamp or null")


def _timestamp(rec: Record, key: str) -> datetime:
    value = _opt_timestamp(rec, key)
    if value is None:
        raise _wrong(key, "a timestamp")
    return value


def _tool_timing(rec: Record) -> ev.ToolTiming:
    return ev.ToolTiming(
        tool_use_id=_str(rec, "tool_use_id"),
        tool_name=_str(rec, "tool_name"),
        started_at=_timestamp(rec, "started_at"),
        duration_us=_int(rec, "duration_us"),
        is_error=_bool(rec, "is_error"),
    )


def _record(value: object, key: str) -> Record:
    if isinstance(value, dict):
        return value
    raise _wrong(key, "a record")


def _opt_record(rec: Record, key: str) -> Record | None:
    value = _get(rec, key)
    return None if value is None else _record(value, key)


def _list(rec: Record, key: str) -> list[object]:
    return _of(rec, key, list, "an array")


def _branch(value: object, key: str) -> tuple[str, Record]:
    """A union value read with ``return_record_name``: (short name, record)."""
    if isinstance(value, tuple) and len(value) == 2:
        name, rec = value
        if isinstance(name, str):
            return name.rpartition(".")[2], _record(rec, key)
    raise _wrong(key, "a named union branch")


def _enum(enum: Callable[[str], _E], rec: Record, key: str) -> _E:
    try:
        return enum(_str(rec, key))
    except ValueError:
        raise _wrong(key, "a known symbol") from None


# --------------------------------------------------------------------------
# Header
# --------------------------------------------------------------------------


def _cause(rec: Record) -> ev.Cause:
    return ev.Cause(
        command_id=_opt_uuid(rec, "command_id"),
        event_id=_opt_uuid(rec, "event_id"),
        loop_id=_opt_uuid(rec, "loop_id"),
        tool_execution_id=_opt_uuid(rec, "tool_execution_id"),
        agency=_enum(ev.Agency, rec, "agency"),
    )


def header_from(rec: Record) -> ev.Header:
    """The :class:`Header` of a decoded envelope."""
    cause = _opt_record(rec, "cause")
    return ev.Header(
        event_id=_opt_uuid(rec, "event_id"),
        session_id=_opt_uuid(rec, "session_id"),
        loop_id=_opt_uuid(rec, "loop_id"),
        turn_id=_opt_uuid(rec, "turn_id"),
        step_id=_opt_uuid(rec, "step_id"),
        created_at=_opt_timestamp(rec, "created_at"),
        cause=None if cause is None else _cause(cause),
        agent_name=_str(rec, "agent_name"),
    )


# --------------------------------------------------------------------------
# Content
# --------------------------------------------------------------------------


def usage_from(rec: Record) -> content.Usage:
    """A :class:`Usage` (negative counts fail its validation)."""
    return content.Usage(
        input_tokens=_int(rec, "input_tokens"),
        output_tokens=_int(rec, "output_tokens"),
        cache_read_tokens=_int(rec, "cache_read_tokens"),
        cache_creation_tokens=_int(rec, "cache_creation_tokens"),
        reasoning_tokens=_int(rec, "reasoning_tokens"),
    )


def _image_block(rec: Record) -> content.ImageBlock:
    return content.ImageBlock(
        media_type=_str(rec, "media_type"),
        url=_opt_str(rec, "url"),
        data=_opt_bytes(rec, "data"),
    )


def _text_block(rec: Record) -> content.TextBlock:
    return content.TextBlock(text=_str(rec, "text"))


def _result_content(value: object) -> content.ToolResultContent:
    name, rec = _branch(value, "content")
    if name == "TextBlock":
        return _text_block(rec)
    if name == "ImageBlock":
        return _image_block(rec)
    raise UnknownRecordTypeError("tool result content", name)


def _thinking_block(rec: Record) -> content.ThinkingBlock:
    return content.ThinkingBlock(
        thinking=_str(rec, "thinking"),
        signature=_str(rec, "signature"),
        signature_format=_str(rec, "signature_format"),
        provider_state=_str(rec, "provider_state"),
        provider_state_format=_str(rec, "provider_state_format"),
    )


def _tool_use_block(rec: Record) -> content.ToolUseBlock:
    return content.ToolUseBlock(
        id=_str(rec, "id"),
        name=_str(rec, "name"),
        input=_str(rec, "input"),
        provider_state=_str(rec, "provider_state"),
        provider_state_format=_str(rec, "provider_state_format"),
    )


def _tool_result_block(rec: Record) -> content.ToolResultBlock:
    return content.ToolResultBlock(
        tool_use_id=_str(rec, "tool_use_id"),
        content=tuple(_result_content(v) for v in _list(rec, "content")),
        is_error=_bool(rec, "is_error"),
    )


_BLOCK_READERS: dict[str, Callable[[Record], content.Block]] = {
    "TextBlock": _text_block,
    "RefusalBlock": lambda rec: content.RefusalBlock(text=_str(rec, "text")),
    "ImageBlock": _image_block,
    "ThinkingBlock": _thinking_block,
    "ToolUseBlock": _tool_use_block,
    "ToolResultBlock": _tool_result_block,
}


def _dispatch(
    readers: Mapping[str, Callable[[Record], _E]], what: str, value: object
) -> _E:
    name, rec = _branch(value, what)
    reader = readers.get(name)
    if reader is None:
        raise UnknownRecordTypeError(what, name)
    return reader(rec)


def _blocks(rec: Record) -> tuple[content.Block, ...]:
    return tuple(_dispatch(_BLOCK_READERS, "block", v) for v in _list(rec, "blocks"))


def user_message_from(rec: Record) -> content.UserMessage:
    """A :class:`UserMessage`."""
    return content.UserMessage(blocks=_blocks(rec))


def ai_message_from(rec: Record) -> content.AIMessage:
    """An :class:`AIMessage`."""
    usage = _opt_record(rec, "usage")
    return content.AIMessage(
        blocks=_blocks(rec), usage=None if usage is None else usage_from(usage)
    )


def tool_result_message_from(rec: Record) -> content.ToolResultMessage:
    """A :class:`ToolResultMessage`."""
    return content.ToolResultMessage(
        tool_use_id=_str(rec, "tool_use_id"),
        is_error=_bool(rec, "is_error"),
        blocks=_blocks(rec),
    )


_MESSAGE_READERS: dict[str, Callable[[Record], content.Message]] = {
    "UserMessage": user_message_from,
    "AIMessage": ai_message_from,
    "ToolResultMessage": tool_result_message_from,
}


def _message(value: object) -> content.Message:
    return _dispatch(_MESSAGE_READERS, "message", value)


def _step_message(value: object) -> content.AIMessage | content.ToolResultMessage:
    message = _message(value)
    if isinstance(message, content.UserMessage):
        raise UnknownRecordTypeError("step message", "UserMessage")
    return message


_CHUNK_READERS: dict[str, Callable[[Record], content.Chunk]] = {
    "TextChunk": lambda rec: content.TextChunk(text=_str(rec, "text")),
    "RefusalChunk": lambda rec: content.RefusalChunk(text=_str(rec, "text")),
    "ThinkingChunk": lambda rec: content.ThinkingChunk(
        index=_int(rec, "index"),
        thinking=_str(rec, "thinking"),
        signature=_str(rec, "signature"),
        signature_format=_str(rec, "signature_format"),
        provider_state=_str(rec, "provider_state"),
        provider_state_format=_str(rec, "provider_state_format"),
    ),
    "ToolUseChunk": lambda rec: content.ToolUseChunk(
        index=_int(rec, "index"),
        id=_str(rec, "id"),
        name=_str(rec, "name"),
        input_json=_str(rec, "input_json"),
    ),
    "ImageChunk": lambda rec: content.ImageChunk(
        index=_int(rec, "index"),
        media_type=_str(rec, "media_type"),
        url=_opt_str(rec, "url"),
        data=_opt_bytes(rec, "data"),
    ),
}


def _failure(rec: Record) -> ev.FailureInfo:
    return ev.FailureInfo(
        kind=_enum(ev.FailureKind, rec, "kind"), message=_str(rec, "message")
    )


def _effect(rec: Record) -> Literal["approve", "deny"]:
    effect = _str(rec, "effect")
    if effect == "approve":
        return "approve"
    if effect == "deny":
        return "deny"
    raise _wrong("effect", "approve or deny")


# --------------------------------------------------------------------------
# Events: one reader per payload record, given the decoded header
# --------------------------------------------------------------------------

EventReader = Callable[[ev.Header, Record], ev.AnyEvent]

EVENT_READERS: dict[str, EventReader] = {
    "LoopStarted": lambda h, r: ev.LoopStarted(
        header=h, model=_str(r, "model"), display_name=_str(r, "display_name")
    ),
    "LoopIdle": lambda h, r: ev.LoopIdle(header=h),
    "LoopStopped": lambda h, r: ev.LoopStopped(header=h),
    "LoopDeleted": lambda h, r: ev.LoopDeleted(header=h),
    "InputQueued": lambda h, r: ev.InputQueued(header=h),
    "TurnRejected": lambda h, r: ev.TurnRejected(
        header=h, reason=_enum(ev.RejectReason, r, "reason"), detail=_str(r, "detail")
    ),
    "TurnStarted": lambda h, r: ev.TurnStarted(
        header=h,
        turn_index=_int(r, "turn_index"),
        message=user_message_from(_record(_get(r, "message"), "message")),
        model=_str(r, "model"),
        max_tokens=_opt_int(r, "max_tokens"),
    ),
    "TurnFoldedInto": lambda h, r: ev.TurnFoldedInto(
        header=h,
        turn_index=_int(r, "turn_index"),
        message=user_message_from(_record(_get(r, "message"), "message")),
    ),
    "InputCancelled": lambda h, r: ev.InputCancelled(
        header=h,
        reason=_enum(ev.CancelReason, r, "reason"),
        message=user_message_from(_record(_get(r, "message"), "message")),
        turn_index=_int(r, "turn_index"),
    ),
    "TokenDelta": lambda h, r: ev.TokenDelta(
        header=h,
        turn_index=_int(r, "turn_index"),
        chunk=_dispatch(_CHUNK_READERS, "chunk", _get(r, "chunk")),
    ),
    "StepDone": lambda h, r: ev.StepDone(
        header=h,
        messages=tuple(_step_message(m) for m in _list(r, "messages")),
        tool_timings=tuple(
            _tool_timing(_record(t, "tool_timings"))
            for t in (_list(r, "tool_timings") if "tool_timings" in r else ())
        ),
    ),
    "TurnDone": lambda h, r: ev.TurnDone(
        header=h,
        turn_index=_int(r, "turn_index"),
        message=ai_message_from(_record(_get(r, "message"), "message")),
        usage=usage_from(_record(_get(r, "usage"), "usage")),
    ),
    "TurnFailed": lambda h, r: ev.TurnFailed(
        header=h,
        turn_index=_int(r, "turn_index"),
        error=_failure(_record(_get(r, "error"), "error")),
    ),
    "TurnInterrupted": lambda h, r: ev.TurnInterrupted(
        header=h, turn_index=_int(r, "turn_index")
    ),
    "TurnResumed": lambda h, r: ev.TurnResumed(
        header=h,
        turn_index=_int(r, "turn_index"),
        steps=_int(r, "steps"),
        resumes=_int(r, "resumes"),
        reason=_str(r, "reason"),
    ),
    "ToolCallStarted": lambda h, r: ev.ToolCallStarted(
        header=h,
        tool_execution_id=_uuid(r, "tool_execution_id"),
        tool_use_id=_str(r, "tool_use_id"),
        tool_name=_str(r, "tool_name"),
        summary=_str(r, "summary"),
    ),
    "ToolCallCompleted": lambda h, r: ev.ToolCallCompleted(
        header=h,
        tool_execution_id=_uuid(r, "tool_execution_id"),
        tool_use_id=_str(r, "tool_use_id"),
        is_error=_bool(r, "is_error"),
        result_preview=_str(r, "result_preview"),
    ),
    "PermissionDecided": lambda h, r: ev.PermissionDecided(
        header=h,
        tool_execution_id=_uuid(r, "tool_execution_id"),
        effect=_effect(r),
        reason=_str(r, "reason"),
        subject=_str(r, "subject"),
    ),
    "PermissionRequested": lambda h, r: ev.PermissionRequested(
        header=h,
        tool_execution_id=_uuid(r, "tool_execution_id"),
        gate_id=_uuid(r, "gate_id"),
        tool_name=_str(r, "tool_name"),
        summary=_str(r, "summary"),
    ),
    "GateOpened": lambda h, r: ev.GateOpened(
        header=h,
        gate_id=_uuid(r, "gate_id"),
        kind=_str(r, "kind"),
        tool_execution_id=_opt_uuid(r, "tool_execution_id"),
        actions=tuple(_strings(r, "actions")),
    ),
    "GateResolved": lambda h, r: ev.GateResolved(
        header=h,
        gate_id=_uuid(r, "gate_id"),
        reason=_enum(ev.GateCloseReason, r, "reason"),
        action=_str(r, "action"),
    ),
}
"""Payload readers keyed by the record's short name (the event type)."""


def _strings(rec: Record, key: str) -> list[str]:
    values = _list(rec, key)
    for value in values:
        if not isinstance(value, str):
            raise _wrong(key, "an array of strings")
    return [str(v) for v in values]


def event_from(rec: Record, allowed: frozenset[str]) -> ev.AnyEvent:
    """The event of a decoded envelope ``{header, payload}``.

    Args:
        rec: the decoded envelope.
        allowed: the payload type names this envelope may carry.

    Raises:
        UnknownRecordTypeError: the payload type is not in ``allowed``.
        DecodeError: a field has the wrong shape.
    """
    header = header_from(_record(_get(rec, "header"), "header"))
    name, payload = _branch(_get(rec, "payload"), "payload")
    reader = EVENT_READERS.get(name)
    if reader is None or name not in allowed:
        raise UnknownRecordTypeError("event", name)
    return reader(header, payload)


# --------------------------------------------------------------------------
# Commands and loop state
# --------------------------------------------------------------------------

CommandReader = Callable[[Record, Record], commands.AnyCommand]


def _base(env: Record) -> dict[str, object]:
    return {
        "command_id": _uuid(env, "command_id"),
        "session_id": _uuid(env, "session_id"),
        "loop_id": _uuid(env, "loop_id"),
        "created_at": _timestamp(env, "created_at"),
        "agency": _enum(ev.Agency, env, "agency"),
    }


COMMAND_READERS: dict[str, CommandReader] = {
    "SubmitInput": lambda env, r: commands.SubmitInput.model_validate(
        {
            **_base(env),
            "message": user_message_from(_record(_get(r, "message"), "message")),
            "no_fold": _bool(r, "no_fold"),
            "agent": _str(r, "agent"),
            "model": _str(r, "model"),
            "max_tokens": _opt_int(r, "max_tokens"),
        }
    ),
    "Interrupt": lambda env, r: commands.Interrupt.model_validate(
        {**_base(env), "turn_id": _opt_uuid(r, "turn_id")}
    ),
    "RespondGate": lambda env, r: commands.RespondGate.model_validate(
        {**_base(env), "gate_id": _uuid(r, "gate_id"), "action": _str(r, "action")}
    ),
    "Retract": lambda env, r: commands.Retract.model_validate(
        {**_base(env), "target_command_id": _uuid(r, "target_command_id")}
    ),
    "Shutdown": lambda env, r: commands.Shutdown.model_validate(_base(env)),
    "DeleteLoop": lambda env, r: commands.DeleteLoop.model_validate(_base(env)),
}
"""Command readers keyed by the payload record's short name."""


def command_from(env: Record) -> commands.AnyCommand:
    """The command of a decoded ``CommandEnvelope``."""
    name, payload = _branch(_get(env, "payload"), "payload")
    reader = COMMAND_READERS.get(name)
    if reader is None:
        raise UnknownRecordTypeError("command", name)
    return reader(env, payload)


def _command_ids(rec: Record) -> tuple[UUID, ...]:
    values = _list(rec, "recent_command_ids")
    for value in values:
        if not isinstance(value, UUID):
            raise _wrong("recent_command_ids", "an array of uuids")
    return tuple(v for v in values if isinstance(v, UUID))


def loop_state_from(rec: Record) -> LoopState:
    """A :class:`LoopState`."""
    open_turn = _opt_record(rec, "open_turn")
    return LoopState(
        session_id=_uuid(rec, "session_id"),
        loop_id=_uuid(rec, "loop_id"),
        agent_name=_str(rec, "agent_name"),
        model=_str(rec, "model"),
        turn_index=_int(rec, "turn_index"),
        messages=tuple(_message(m) for m in _list(rec, "messages")),
        open_turn=None
        if open_turn is None
        else OpenTurn(
            turn_id=_uuid(open_turn, "turn_id"),
            turn_index=_int(open_turn, "turn_index"),
            gates=tuple(
                OpenGate(
                    gate_id=_uuid(gate, "gate_id"),
                    step_id=_uuid(gate, "step_id"),
                    tool_name=_str(gate, "tool_name"),
                    summary=_str(gate, "summary"),
                )
                for gate in (_record(g, "gates") for g in _list(open_turn, "gates"))
            ),
            message_index=_int(open_turn, "message_index"),
            steps=_int(open_turn, "steps"),
            resumes=_int(open_turn, "resumes"),
            model=_str(open_turn, "model"),
            max_tokens=_opt_int(open_turn, "max_tokens"),
            decisions=tuple(
                CallDecision(tool_name=_str(d, "tool_name"), effect=_effect(d))
                for d in (
                    _record(d, "decisions") for d in _list(open_turn, "decisions")
                )
            ),
        ),
        journal_offset=_int(rec, "journal_offset"),
        command_offset=_int(rec, "command_offset"),
        recent_command_ids=_command_ids(rec),
        updated_at=_opt_timestamp(rec, "updated_at"),
        applied_command_offset=_int(rec, "applied_command_offset"),
        pending_command_offsets=_offsets(rec, "pending_command_offsets"),
        stopped=_bool(rec, "stopped"),
        deleted=_bool(rec, "deleted"),
        history_length=_int(rec, "history_length"),
        history_records=_int(rec, "history_records"),
        history_start=_int(rec, "history_start"),
        history_first_offset=_int(rec, "history_first_offset"),
        history_last_offset=_int(rec, "history_last_offset"),
        history_previous_offset=_int(rec, "history_previous_offset"),
    )


def _offsets(rec: Record, key: str) -> tuple[int, ...]:
    values = _list(rec, key)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise _wrong(key, "an array of longs")
    return tuple(v for v in values if isinstance(v, int))
