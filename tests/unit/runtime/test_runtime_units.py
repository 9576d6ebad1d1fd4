"""Unit tests of the runtime's pure parts: accumulator, schema, inbox, config, adapters,
layering.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path
from uuid import uuid4

import pytest

import turnstream.memory
import turnstream.runtime
import turnstream.testing
from turnstream.content import (
    AIMessage,
    ImageBlock,
    ImageChunk,
    RefusalChunk,
    TextBlock,
    TextChunk,
    ThinkingBlock,
    ThinkingChunk,
    ToolUseBlock,
    ToolUseChunk,
    UserMessage,
)
from turnstream.errors import (
    ConfigError,
    EphemeralNotPersistableError,
    InvalidEventError,
    StructuredOutputError,
)
from turnstream.events import Agency, Header, InputQueued, LoopIdle, TurnStarted
from turnstream.ids import CommandId, LoopId
from turnstream.memory import IdempotencyCollisionError, InMemoryJournal
from turnstream.runtime import LoopConfig, ToolLimits
from turnstream.runtime.accumulate import (
    INTERRUPTED_NOTICE,
    ChunkAccumulator,
    ToolCall,
    is_empty_response,
)
from turnstream.runtime.input_queue import (
    Inbox,
    QueuedInput,
    SeenCommands,
    input_problem,
)
from turnstream.runtime.mailbox import Mailbox
from turnstream.runtime.output_schema import (
    check_schema,
    check_structured_output,
    find_mismatch,
)
from turnstream.runtime.tools import preview, shape_result, summarize
from turnstream.testing import FunctionTool


def fold(*chunks: object) -> ChunkAccumulator:
    acc = ChunkAccumulator()
    for chunk in chunks:
        acc.add(chunk)  # type: ignore[arg-type]
    return acc


def test_accumulator_materialises_in_contract_order() -> None:
    """Contract §4.4 step 5: thinking, text, (refusal, images), then tool calls by
    index; inputs sanitised for storage.
    """
    acc = fold(
        ToolUseChunk(index=1, id="b", name="second", input_json="not json"),
        TextChunk(text="Hel"),
        ThinkingChunk(index=0, thinking="plan"),
        ToolUseChunk(index=0, id="a", name="first", input_json='{"x":'),
        ToolUseChunk(index=0, input_json="1}"),
        TextChunk(text="lo"),
        ImageChunk(media_type="image/png", url="https://x/y.png"),
    )
    message = acc.message(None)
    assert [b.type for b in message.blocks] == [
        "thinking",
        "text",
        "image",
        "tool_use",
        "tool_use",
    ]
    assert message.blocks[1] == TextBlock(text="Hello")
    assert message.blocks[3] == ToolUseBlock(id="a", name="first", input='{"x":1}')
    assert message.blocks[4] == ToolUseBlock(id="b", name="second", input="{}")
    assert acc.tool_calls() == (
        ToolCall("a", "first", '{"x":1}'),
        ToolCall("b", "second", "not json"),  # execution sees the raw input
    )


@pytest.mark.parametrize(
    ("blocks", "empty"),
    [
        pytest.param((), True, id="nothing"),
        pytest.param((TextBlock(text=""),), True, id="empty-text"),
        pytest.param(
            (ThinkingBlock(signature="s"),), True, id="signature-only-thinking"
        ),
        pytest.param((ThinkingBlock(thinking="t"),), False, id="reasoning-text"),
        pytest.param((ThinkingBlock(provider_state="{}"),), False, id="provider-state"),
        pytest.param((TextBlock(text="x"),), False, id="text"),
        pytest.param((ImageBlock(media_type="image/png", url="u"),), False, id="image"),
        pytest.param((ToolUseBlock(id="a", name="t"),), False, id="tool-call"),
    ],
)
def test_is_empty_response(blocks: tuple[object, ...], empty: bool) -> None:
    """Contract 9.3 #44 TestIsEmptyAssistantMessageCountsRefusalAsContent and §4.4 step
    5.
    """
    assert is_empty_response(AIMessage(blocks=blocks)) is empty  # type: ignore[arg-type]


def test_empty_refusal_is_content() -> None:
    """Contract 9.3 #44: a refusal, even empty, is content."""
    assert not is_empty_response(fold(RefusalChunk(text="")).message(None))


def test_safe_prefix_keeps_only_replayable_blocks() -> None:
    """Contract §4.5: text, refusals and sealed thinking, then the notice; nothing
    replayable → None.
    """
    acc = fold(
        ThinkingChunk(
            index=0, thinking="sealed", signature="sig", signature_format="f"
        ),
        ThinkingChunk(index=1, thinking="loose"),
        TextChunk(text="so far"),
        ToolUseChunk(index=0, id="a", name="t"),
        ImageChunk(media_type="image/png", url="u"),
    )
    prefix = acc.safe_prefix(INTERRUPTED_NOTICE)
    assert prefix is not None
    assert [b.type for b in prefix.blocks] == ["thinking", "text", "text"]
    assert prefix.blocks[-1] == TextBlock(text=INTERRUPTED_NOTICE)
    assert fold(ToolUseChunk(index=0, id="a", name="t")).safe_prefix("n") is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param('{"a": "x"}', None, id="valid"),
        pytest.param("", "missing_output", id="missing"),
        pytest.param("{oops", "invalid_json", id="invalid"),
        pytest.param('{"a": NaN}', "invalid_json", id="nan-is-not-json"),
        pytest.param('{"a": 1}', "schema_mismatch", id="wrong-type"),
        pytest.param("{}", "schema_mismatch", id="missing-required"),
        pytest.param('{"a": "x", "b": 1}', "schema_mismatch", id="additional-property"),
    ],
)
def test_check_structured_output(text: str, reason: str | None) -> None:
    """Contract 9.3 #48: the final answer must be JSON matching the schema; errors name
    a path, never a value.
    """
    schema = {
        "type": "object",
        "required": ["a"],
        "properties": {"a": {"type": "string"}},
        "additionalProperties": False,
    }
    message = AIMessage(blocks=(TextBlock(text=text),) if text else ())
    if reason is None:
        check_structured_output(message, schema)
        return
    with pytest.raises(StructuredOutputError) as error:
        check_structured_output(message, schema)
    assert error.value.reason == reason
    assert "x" not in error.value.detail.replace("$", "")


def test_find_mismatch_paths_and_number_types() -> None:
    """Minimal JSON Schema: integers exclude booleans; arrays check items; enum; paths
    point at the fault.
    """
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}},
        },
    }
    assert find_mismatch({"n": 1, "tags": ["a"]}, schema) is None
    assert find_mismatch({"n": True}, schema) == "$.n"
    assert find_mismatch({"tags": ["a", "z"]}, schema) == "$.tags[1]"
    assert find_mismatch(1.5, {"type": ["integer", "number"]}) is None


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param({"type": "thing"}, id="unknown-type"),
        pytest.param({"properties": []}, id="properties-not-object"),
        pytest.param({"required": "a"}, id="required-not-list"),
        pytest.param({"additionalProperties": {}}, id="schema-additional-properties"),
        pytest.param({"items": [1]}, id="tuple-items"),
    ],
)
def test_check_schema_rejects_unsupported(schema: dict[str, object]) -> None:
    """LoopConfig validates the output schema at start-up (ConfigError)."""
    with pytest.raises(ValueError, match=r"\$"):
        check_schema(schema)
    with pytest.raises(ConfigError):
        LoopConfig(model="m", output_schema=schema)


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"model": " "}, id="blank-model"),
        pytest.param({"model": "m", "inbox_capacity": 0}, id="inbox"),
        pytest.param({"model": "m", "drain_timeout": 0}, id="drain-timeout"),
        pytest.param({"model": "m", "step_timeout": -1}, id="step-timeout"),
        pytest.param({"model": "m", "max_tokens": 0}, id="max-tokens"),
        pytest.param(
            {"model": "m", "tools": (FunctionTool("a"), FunctionTool("a"))},
            id="duplicate-tools",
        ),
    ],
)
def test_loop_config_validation(kwargs: dict[str, object]) -> None:
    """Config: invalid settings fail at construction with ConfigError."""
    with pytest.raises(ConfigError):
        LoopConfig(**kwargs)  # type: ignore[arg-type]


def test_tool_limits_defaults_and_validation() -> None:
    """Contract §6.1: defaults 25 / 100 / 8 / unbounded; result bytes 0 or ≥ 256."""
    limits = ToolLimits()
    assert (limits.max_tool_steps, limits.max_tool_calls, limits.max_parallel) == (
        25,
        100,
        8,
    )
    assert LoopConfig(model="m").inbox_capacity == 64
    assert LoopConfig(model="m").drain_timeout == 5.0
    assert LoopConfig(model="m").truncated_commit_grace == 0.25
    with pytest.raises(ConfigError):
        ToolLimits(max_result_bytes=10)
    with pytest.raises(ConfigError):
        ToolLimits(max_parallel=0)


def entry(
    n: int, *, no_fold: bool = False, agency: Agency = Agency.USER
) -> QueuedInput:
    return QueuedInput(
        command_id=CommandId(uuid4()),
        agency=agency,
        message=UserMessage(blocks=(TextBlock(text=str(n)),)),
        no_fold=no_fold,
        queued=True,
    )


def test_inbox_drains_leading_foldable_run_and_returns_draining_first() -> None:
    """Contract §4.7 / §4.6: leading run only (NoFold stops it); draining entries come
    back first.
    """
    inbox = Inbox(capacity=4)
    a, b, c = entry(1), entry(2, no_fold=True), entry(3)
    for e in (a, b, c):
        inbox.push(e)
    assert inbox.drain_foldable() == (a,)
    assert inbox.draining == (a,)
    assert inbox.take_all() == [a, b, c]
    inbox.push(a)
    inbox.push(b)
    assert inbox.drain_foldable() == (a,)
    inbox.folded(a.command_id)
    assert inbox.draining == ()


def test_inbox_keep_user_input_after_interrupt() -> None:
    """Contract §10.1.4: user input is retained (FIFO, draining first); machine input
    returned.
    """
    inbox = Inbox(capacity=4)
    u1, m1, u2 = entry(1), entry(2, agency=Agency.MACHINE), entry(3)
    for e in (u1, m1, u2):
        inbox.push(e)
    inbox.drain_foldable()
    assert inbox.keep_user_input() == [m1]
    assert inbox.entries() == (u1, u2)


def test_seen_commands_window_is_bounded() -> None:
    """Redelivered commands are recognised within a bounded window."""
    seen = SeenCommands(limit=2)
    ids = [CommandId(uuid4()) for _ in range(3)]
    for command_id in ids:
        seen.add(command_id)
    assert ids[0] not in seen
    assert seen.recent() == tuple(ids[1:])


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        pytest.param(UserMessage(), "message has no blocks", id="no-blocks"),
        pytest.param(
            UserMessage(blocks=(TextBlock(text=" \n"),)), "message is empty", id="blank"
        ),
        pytest.param(
            UserMessage(blocks=(ToolUseBlock(id="a", name="t"),)),
            "a user message cannot hold a tool_use block",
            id="tool-use",
        ),
        pytest.param(
            UserMessage(blocks=(ImageBlock(media_type="image/png", url="u"),)),
            None,
            id="image",
        ),
    ],
)
def test_input_problem(message: UserMessage, problem: str | None) -> None:
    """Contract §4.2 (turnstream): invalid input is refused with a detail naming the
    rule.
    """
    assert input_problem(message) == problem


async def test_mailbox_serves_priority_then_internal_then_ordinary() -> None:
    """Contract §4.1/§10.2: Interrupt/Shutdown are never stuck behind ordinary
    commands.
    """
    mailbox: Mailbox[str] = Mailbox()
    mailbox.put("ordinary")
    mailbox.put_internal("internal")
    mailbox.put_priority("priority")
    assert [await mailbox.get() for _ in range(3)] == [
        "priority",
        "internal",
        "ordinary",
    ]
    mailbox.close()
    assert mailbox.put("late") is False


def test_tool_text_helpers() -> None:
    """Contract §1.7/§6.2: bounded summaries (no control chars), previews and shaped
    results.
    """
    assert summarize(None, "t\x00x", "{}") == "t x"
    assert (
        summarize(FunctionTool("t", summary=lambda _i: "deleting 3 files"), "t", "{}")
        == "deleting 3 files"
    )
    lines = "\n".join(str(i) for i in range(30))
    assert preview(lines).count("\n") == 19
    assert preview("short") == "short"
    shaped = shape_result("é" * 1000, 300)
    assert len(shaped.encode()) <= 300
    assert shape_result("small", 300) == "small"


async def test_in_memory_journal_refuses_what_could_not_be_restored() -> None:
    """Contract §2.3 write boundary: no ephemeral events, no profile violations,
    idempotent by event id.
    """
    journal = InMemoryJournal()
    loop_id = LoopId(uuid4())
    header = Header(session_id=uuid4(), loop_id=loop_id)
    with pytest.raises(EphemeralNotPersistableError):
        await journal.append(loop_id, [InputQueued(header=header)])  # type: ignore[list-item]
    with pytest.raises(InvalidEventError):
        await journal.append(loop_id, [LoopIdle(header=header)])  # no event id
    idle = LoopIdle(header=header.model_copy(update={"event_id": uuid4()}))
    await journal.append(loop_id, [idle])
    await journal.append(loop_id, [idle])  # identical retry: kept once
    assert journal.events(loop_id) == (idle,)
    other = LoopIdle(header=idle.header.model_copy(update={"agent_name": "x"}))
    with pytest.raises(IdempotencyCollisionError):
        await journal.append(loop_id, [other])
    with pytest.raises(InvalidEventError):
        await journal.append(
            LoopId(uuid4()),
            [LoopIdle(header=header.model_copy(update={"event_id": uuid4()}))],
        )
    started = TurnStarted(
        header=header.model_copy(update={"event_id": uuid4()}),
        turn_index=1,
        message=UserMessage(),
    )
    with pytest.raises(InvalidEventError):  # a turn event without a turn id
        await journal.append(loop_id, [idle, started])
    assert journal.events(loop_id) == (idle,)  # atomic: nothing of a refused call
    assert await journal.read(loop_id, after=-1) == [idle]
    assert journal.loop_ids() == (loop_id,)


@pytest.mark.parametrize(
    "package", [turnstream.runtime, turnstream.memory, turnstream.testing]
)
def test_package_tables_of_contents(package: object) -> None:
    """House style: each package __init__ is a table of contents; every name in __all__
    resolves.
    """
    names = package.__all__  # type: ignore[attr-defined]
    assert names == sorted(names, key=lambda n: (not n.isupper(), n))
    assert len(set(names)) == len(names)
    for name in names:
        assert getattr(package, name) is not None


FORBIDDEN = {
    "turnstream.runtime": (
        "turnstream.wire",
        "turnstream.kafka",
        "turnstream.memory",
        "turnstream.testing",
        "aiokafka",
        "fastavro",
        "httpx",
    ),
    "turnstream.memory": (
        "turnstream.wire",
        "turnstream.kafka",
        "turnstream.testing",
        "aiokafka",
        "fastavro",
    ),
}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_layering(package: str) -> None:
    """House style §3.1: runtime never imports wire/kafka/adapters; memory never imports
    test fakes.
    """
    module = importlib.import_module(package)
    root = Path(module.__file__).parent  # type: ignore[arg-type]
    for info in pkgutil.iter_modules([str(root)]):
        tree = ast.parse((root / f"{info.name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported = node.module
            elif isinstance(node, ast.Import):
                imported = node.names[0].name
            else:
                continue
            assert not imported.startswith(FORBIDDEN[package]), (
                f"{info.name} imports {imported}"
            )
