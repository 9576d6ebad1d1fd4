"""Records a tool call stages are committed with its step's ``StepDone``, or never.

Against the in-memory journal (its ``effects`` list): a call that returns has
its records committed in the ``StepDone``'s own append; a call that raises has
none; a step whose commit fails leaves none; a refused topic or a stage after
the call returned is the call's error result, not a turn failure.
"""

from __future__ import annotations

import pytest

from turnstream.content import ToolResultMessage, text_of
from turnstream.events import StepDone, TurnDone
from turnstream.runtime import LoopConfig
from turnstream.runtime.effects import EffectStage, StagedRecord
from turnstream.runtime.errors import EffectError
from turnstream.runtime.ports import ToolContext
from turnstream.testing import (
    FlakyJournal,
    FunctionTool,
    call,
    open_rig,
    text_step,
    tool_step,
)


def _results(events: tuple[object, ...]) -> list[str]:
    return [
        text_of(m.blocks)
        for e in events
        if isinstance(e, StepDone)
        for m in e.messages[1:]
        if isinstance(m, ToolResultMessage)
    ]


def _emit(input_json: str, ctx: ToolContext) -> str:
    ctx.stage_record(
        "orders.v1",
        ctx.idempotency_key.encode(),
        input_json.encode(),
        [("kind", b"order")],
    )
    return "staged"


async def test_staged_records_commit_with_their_step() -> None:
    """Each returned call's records, in call order, in its StepDone's append."""
    tool = FunctionTool("emit", _emit)
    journal = FlakyJournal()
    config = LoopConfig(model="m", tools=(tool,))
    async with open_rig(
        tool_step(call("emit", '{"n":1}', id="a"), call("emit", '{"n":2}', id="b")),
        tool_step(call("emit", '{"n":3}', id="c")),
        text_step("done"),
        tools=[tool],
        config=config,
        journal=journal,
    ) as rig:
        await rig.submit("go")
        await rig.idle()
        events = rig.journal_events()
        turn_id = next(e for e in events if isinstance(e, TurnDone)).header.turn_id
    assert [(loop, r.value) for loop, r in journal.effects] == [
        (rig.loop_id, b'{"n":1}'),
        (rig.loop_id, b'{"n":2}'),
        (rig.loop_id, b'{"n":3}'),
    ]
    assert [r.key for _, r in journal.effects] == [
        f"{turn_id}:0:emit:0".encode(),
        f"{turn_id}:0:emit:1".encode(),
        f"{turn_id}:1:emit:0".encode(),
    ]
    assert {r.topic for _, r in journal.effects} == {"orders.v1"}
    assert {r.headers for _, r in journal.effects} == {(("kind", b"order"),)}


async def test_no_effect_without_its_step() -> None:
    """A StepDone whose commit fails takes its records with it."""
    tool = FunctionTool("emit", _emit)
    journal = FlakyJournal()
    journal.fail_when(lambda events: any(isinstance(e, StepDone) for e in events))
    config = LoopConfig(model="m", tools=(tool,))
    async with open_rig(
        tool_step(call("emit", '{"n":1}')),
        tools=[tool],
        config=config,
        journal=journal,
    ) as rig:
        await rig.submit("go")
        await rig.idle()
        names = [type(e).__name__ for e in rig.journal_events()]
    assert "TurnInterrupted" in names
    assert "StepDone" not in names
    assert journal.effects == []


async def test_a_call_that_raises_takes_no_effect() -> None:
    """Records staged before the call raised are dropped; its result is an error."""

    def stages_then_raises(_input_json: str, ctx: ToolContext) -> str:
        ctx.stage_record("orders.v1", None, b"lost")
        raise RuntimeError("boom")

    tool = FunctionTool("emit", stages_then_raises)
    journal = FlakyJournal()
    async with open_rig(
        tool_step(call("emit")),
        text_step("done"),
        tools=[tool],
        config=LoopConfig(model="m", tools=(tool,)),
        journal=journal,
    ) as rig:
        await rig.submit("go")
        await rig.idle()
        results = _results(rig.journal_events())
    assert results == ["error: boom"]
    assert journal.effects == []


@pytest.mark.parametrize(
    ("topic", "reason"),
    [
        pytest.param("bad topic", "invalid_topic", id="space"),
        pytest.param("", "invalid_topic", id="empty"),
        pytest.param("..", "invalid_topic", id="dots"),
        pytest.param("x" * 250, "invalid_topic", id="too-long"),
    ],
)
async def test_a_refused_topic_is_the_calls_error_result(
    topic: str, reason: str
) -> None:
    def stages(_input_json: str, ctx: ToolContext) -> str:
        ctx.stage_record(topic, None, b"v")
        return "staged"

    tool = FunctionTool("emit", stages)
    journal = FlakyJournal()
    async with open_rig(
        tool_step(call("emit")),
        text_step("done"),
        tools=[tool],
        config=LoopConfig(model="m", tools=(tool,)),
        journal=journal,
    ) as rig:
        await rig.submit("go")
        await rig.idle()
        results = _results(rig.journal_events())
    assert results == [f"error: record not staged: {reason}"]
    assert journal.effects == []


def test_stage_refuses_after_the_call_and_bad_records() -> None:
    """The journal's own check runs; a closed stage refuses; keep=False drops."""

    def reserved(topic: str) -> None:
        if topic == "journal":
            raise EffectError("reserved_topic")

    stage = EffectStage(reserved)
    with pytest.raises(EffectError) as refused:
        stage.stage("journal", None, b"v")
    assert refused.value.reason == "reserved_topic"
    with pytest.raises(EffectError) as bad:
        stage.stage("t", "key", b"v")  # type: ignore[arg-type]
    assert bad.value.reason == "invalid_record"
    stage.stage("t", b"k", None)
    assert stage.close(keep=True) == (StagedRecord(topic="t", key=b"k", value=None),)
    with pytest.raises(EffectError) as closed:
        stage.stage("t", None, b"v")
    assert closed.value.reason == "closed"
    dropped = EffectStage()
    dropped.stage("t", None, b"v")
    assert dropped.close(keep=False) == ()
