"""Deterministic builders of one value per wire record type: the golden set.

Each builder returns the value pinned by ``schemas/fixtures/<name>.bin``
(the framed Avro bytes) and ``<name>.json`` (a readable view for review).
Names are the Python class name, plus ``-<variant>`` where one type needs
several values to cover every union branch (chunks, blocks, messages).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

from turnstream.commands import (
    AnyCommand,
    DeleteLoop,
    Interrupt,
    RespondGate,
    Retract,
    Shutdown,
    SubmitInput,
)
from turnstream.content import (
    AIMessage,
    ImageBlock,
    ImageChunk,
    RefusalBlock,
    RefusalChunk,
    TextBlock,
    TextChunk,
    ThinkingBlock,
    ThinkingChunk,
    ToolResultBlock,
    ToolResultMessage,
    ToolUseBlock,
    ToolUseChunk,
    Usage,
    UserMessage,
)
from turnstream.events import (
    Agency,
    CancelReason,
    Cause,
    EventBase,
    FailureInfo,
    FailureKind,
    GateCloseReason,
    GateOpened,
    GateResolved,
    Header,
    InputCancelled,
    InputQueued,
    LoopDeleted,
    LoopIdle,
    LoopStarted,
    LoopStopped,
    PermissionDecided,
    PermissionRequested,
    RejectReason,
    StepDone,
    TokenDelta,
    ToolCallCompleted,
    ToolCallStarted,
    TurnDone,
    TurnFailed,
    TurnFoldedInto,
    TurnInterrupted,
    TurnRejected,
    TurnResumed,
    TurnStarted,
)
from turnstream.state import CallDecision, LoopState, OpenGate, OpenTurn
from turnstream.wire import Codec

REPO = Path(__file__).resolve().parents[3]
SCHEMA_DIR = REPO / "schemas"
FIXTURE_DIR = SCHEMA_DIR / "fixtures"

WireValue = EventBase | AnyCommand | LoopState


def uid(n: int) -> UUID:
    """A readable fixed UUID (version-4 shaped) for fixtures."""
    return UUID(f"00000000-0000-4000-8000-{n:012x}")


SESSION, LOOP, TURN, STEP = uid(1), uid(2), uid(3), uid(4)
COMMAND, EVENT, TOOL_EXEC, GATE = uid(5), uid(6), uid(7), uid(8)
CHILD_LOOP = uid(9)
AT = datetime(2026, 7, 8, 12, 0, 0, 123456, tzinfo=UTC)

USER_MESSAGE = UserMessage(
    blocks=(
        TextBlock(text="What is in this picture? ünïcödé ✓"),
        ImageBlock(media_type="image/png", data=b"\x89PNG\r\n\x1a\n\x00\x01"),
        ImageBlock(media_type="image/jpeg", url="https://example.test/cat.jpg"),
    )
)
USAGE = Usage(
    input_tokens=1200,
    output_tokens=345,
    cache_read_tokens=1000,
    cache_creation_tokens=12,
    reasoning_tokens=100,
)
AI_WITH_TOOL = AIMessage(
    blocks=(
        ThinkingBlock(
            thinking="The user wants a listing.",
            signature="c2lnbmF0dXJl",
            signature_format="anthropic",
        ),
        TextBlock(text="Let me look."),
        ToolUseBlock(
            id="toolu_01",
            name="list_files",
            input='{"path": "/tmp", "recursive": false}',
            provider_state='{"cache": "x"}',
            provider_state_format="openai-responses",
        ),
    ),
    usage=USAGE,
)
TOOL_RESULT = ToolResultMessage(
    tool_use_id="toolu_01",
    blocks=(
        ToolResultBlock(
            tool_use_id="toolu_01",
            content=(
                TextBlock(text="a.txt\nb.txt"),
                ImageBlock(media_type="image/gif", url="https://example.test/x.gif"),
            ),
        ),
    ),
)
FINAL_ANSWER = AIMessage(
    blocks=(
        TextBlock(text="There are two files."),
        RefusalBlock(text=""),
    ),
    usage=Usage(input_tokens=1500, output_tokens=20),
)


def loop_header(*, agent_name: str = "", cause: Cause | None = None) -> Header:
    """A loop-profile header (no turn, no step)."""
    return Header(
        event_id=EVENT,
        session_id=SESSION,
        loop_id=LOOP,
        created_at=AT,
        agent_name=agent_name,
        cause=cause,
    )


def turn_header(*, cause: Cause | None = None) -> Header:
    """A turn-profile header."""
    return loop_header(cause=cause).model_copy(update={"turn_id": TURN})


def step_header(*, cause: Cause | None = None) -> Header:
    """A step/tool-profile header."""
    return turn_header(cause=cause).model_copy(update={"step_id": STEP})


def live_header() -> Header:
    """The header a live-only event carries: coordinates, no event id."""
    return Header(session_id=SESSION, loop_id=LOOP, turn_id=TURN, step_id=STEP)


def reply_cause(agency: Agency = Agency.USER) -> Cause:
    """The cause of a Reply event: the submit command."""
    return Cause(command_id=COMMAND, loop_id=CHILD_LOOP, agency=agency)


def _command_base() -> dict[str, object]:
    return {
        "command_id": COMMAND,
        "session_id": SESSION,
        "loop_id": LOOP,
        "created_at": AT,
    }


BUILDERS: dict[str, Callable[[], WireValue]] = {
    # ---- enduring events (journal)
    "LoopStarted": lambda: LoopStarted(
        header=loop_header(agent_name="researcher", cause=Cause(agency=Agency.MACHINE)),
        model="claude-sonnet",
        display_name="Research loop",
    ),
    "LoopIdle": lambda: LoopIdle(header=loop_header(agent_name="researcher")),
    "LoopStopped": lambda: LoopStopped(header=loop_header()),
    "LoopDeleted": lambda: LoopDeleted(
        header=loop_header(cause=Cause(command_id=COMMAND, agency=Agency.USER))
    ),
    "TurnRejected": lambda: TurnRejected(
        header=loop_header(cause=Cause(command_id=COMMAND)),
        reason=RejectReason.QUEUE_FULL,
        detail="inbox holds 64 inputs",
    ),
    "TurnStarted": lambda: TurnStarted(
        header=turn_header(cause=reply_cause()),
        turn_index=3,
        message=USER_MESSAGE,
        model="claude-sonnet",
        max_tokens=1024,
    ),
    "TurnFoldedInto": lambda: TurnFoldedInto(
        header=turn_header(cause=reply_cause(Agency.MACHINE)),
        turn_index=3,
        message=UserMessage(blocks=(TextBlock(text="also check /var"),)),
    ),
    "InputCancelled": lambda: InputCancelled(
        header=turn_header(cause=reply_cause()),
        reason=CancelReason.TURN_INTERRUPTED,
        message=UserMessage(blocks=(TextBlock(text="queued"),)),
        turn_index=3,
    ),
    "InputCancelled-retract": lambda: InputCancelled(
        header=loop_header(cause=reply_cause()),
        reason=CancelReason.CLIENT_RETRACTED,
        message=UserMessage(),
    ),
    "StepDone": lambda: StepDone(
        header=step_header(), messages=(AI_WITH_TOOL, TOOL_RESULT)
    ),
    "TurnDone": lambda: TurnDone(
        header=turn_header(), turn_index=3, message=FINAL_ANSWER, usage=USAGE
    ),
    "TurnFailed": lambda: TurnFailed(
        header=turn_header(),
        turn_index=3,
        error=FailureInfo(
            kind=FailureKind.TOOL_LIMIT,
            message="tool limit reached: 8/8 iterations, 9/16 calls",
        ),
    ),
    "TurnInterrupted": lambda: TurnInterrupted(header=turn_header(), turn_index=3),
    "TurnResumed": lambda: TurnResumed(
        header=turn_header(),
        turn_index=3,
        steps=2,
        resumes=1,
        reason="owner_restored",
    ),
    "PermissionDecided": lambda: PermissionDecided(
        header=step_header(cause=Cause(tool_execution_id=TOOL_EXEC)),
        tool_execution_id=TOOL_EXEC,
        effect="deny",
        reason="access_denied",
        subject="delete_file",
    ),
    "PermissionRequested": lambda: PermissionRequested(
        header=step_header(),
        tool_execution_id=TOOL_EXEC,
        gate_id=GATE,
        tool_name="delete_file",
        summary="delete /tmp/a.txt",
    ),
    "GateOpened": lambda: GateOpened(
        header=step_header(),
        gate_id=GATE,
        kind="permission",
        tool_execution_id=TOOL_EXEC,
        actions=("approve", "deny", "approve_always"),
    ),
    "GateResolved": lambda: GateResolved(
        header=step_header(),
        gate_id=GATE,
        reason=GateCloseReason.ANSWERED,
        action="approve",
    ),
    # ---- ephemeral events (deltas)
    "InputQueued": lambda: InputQueued(
        header=Header(session_id=SESSION, loop_id=LOOP, cause=Cause(command_id=COMMAND))
    ),
    "TokenDelta": lambda: TokenDelta(
        header=live_header(), turn_index=3, chunk=TextChunk(text="Hel")
    ),
    "TokenDelta-refusal": lambda: TokenDelta(
        header=live_header(), turn_index=3, chunk=RefusalChunk(text="I can't")
    ),
    "TokenDelta-thinking": lambda: TokenDelta(
        header=live_header(),
        turn_index=3,
        chunk=ThinkingChunk(
            index=1, thinking="hmm", signature="sig", signature_format="anthropic"
        ),
    ),
    "TokenDelta-tool_use": lambda: TokenDelta(
        header=live_header(),
        turn_index=3,
        chunk=ToolUseChunk(index=2, id="toolu_01", name="ls", input_json='{"pa'),
    ),
    "TokenDelta-image": lambda: TokenDelta(
        header=live_header(),
        turn_index=3,
        chunk=ImageChunk(index=3, media_type="image/png", data=b"\x89PNG"),
    ),
    "ToolCallStarted": lambda: ToolCallStarted(
        header=live_header(),
        tool_execution_id=TOOL_EXEC,
        tool_use_id="toolu_01",
        tool_name="list_files",
        summary="list /tmp",
    ),
    "ToolCallCompleted": lambda: ToolCallCompleted(
        header=live_header(),
        tool_execution_id=TOOL_EXEC,
        tool_use_id="toolu_01",
        is_error=True,
        result_preview="permission denied",
    ),
    # ---- commands
    "SubmitInput": lambda: SubmitInput.model_validate(
        {
            **_command_base(),
            "message": USER_MESSAGE,
            "no_fold": True,
            "agent": "researcher",
            "model": "claude-sonnet",
            "max_tokens": 512,
        }
    ),
    "Interrupt": lambda: Interrupt.model_validate(
        {**_command_base(), "agency": Agency.MACHINE, "turn_id": uid(11)}
    ),
    "RespondGate": lambda: RespondGate.model_validate(
        {**_command_base(), "gate_id": GATE, "action": "approve"}
    ),
    "Retract": lambda: Retract.model_validate(
        {**_command_base(), "target_command_id": uid(10)}
    ),
    "Shutdown": lambda: Shutdown.model_validate(_command_base()),
    "DeleteLoop": lambda: DeleteLoop.model_validate(_command_base()),
    # ---- loop state
    "LoopState": lambda: LoopState(
        session_id=SESSION,
        loop_id=LOOP,
        agent_name="researcher",
        model="claude-sonnet",
        turn_index=3,
        messages=(USER_MESSAGE, AI_WITH_TOOL, TOOL_RESULT, FINAL_ANSWER),
        open_turn=OpenTurn(
            turn_id=TURN,
            turn_index=3,
            gates=(
                OpenGate(
                    gate_id=uid(21),
                    step_id=STEP,
                    tool_name="delete_file",
                    summary="delete /tmp/x",
                ),
            ),
            message_index=0,
            steps=1,
            resumes=1,
            model="claude-sonnet",
            max_tokens=512,
            decisions=(CallDecision(tool_name="read_file", effect="approve"),),
        ),
        journal_offset=42,
        command_offset=7,
        recent_command_ids=(uid(11), uid(12)),
        updated_at=AT,
        applied_command_offset=9,
        pending_command_offsets=(5, 8),
    ),
    "LoopState-empty": lambda: LoopState(session_id=SESSION, loop_id=LOOP),
    "LoopState-deleted": lambda: LoopState(
        session_id=SESSION,
        loop_id=LOOP,
        agent_name="researcher",
        model="claude-sonnet",
        turn_index=3,
        journal_offset=44,
        updated_at=AT,
        stopped=True,
        deleted=True,
        history_length=0,
    ),
}
"""Golden builders by fixture name."""


def encode(codec: Codec, value: WireValue) -> bytes:
    """Encode ``value`` with the codec function of its topic."""
    if isinstance(value, LoopState):
        return codec.marshal_state(value)
    if isinstance(value, EventBase):
        if value.is_enduring():
            return codec.marshal_event(value)
        return codec.marshal_ephemeral(value)
    return codec.marshal_command(value)


def decoder_for(codec: Codec, value: WireValue) -> Callable[[bytes], WireValue]:
    """The decoder of the topic ``value`` belongs to."""
    if isinstance(value, LoopState):
        return codec.unmarshal_state
    if isinstance(value, EventBase):
        return (
            codec.unmarshal_event if value.is_enduring() else codec.unmarshal_ephemeral
        )
    return codec.unmarshal_command
