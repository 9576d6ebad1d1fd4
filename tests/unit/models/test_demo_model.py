"""DemoModel: deterministic, offline and tool-using."""

from __future__ import annotations

import asyncio
import math

import pytest
from tests.unit.models.helpers import collect

from turnstream.content import (
    AIMessage,
    Message,
    TextBlock,
    TextChunk,
    ToolResultMessage,
    ToolUseBlock,
    ToolUseChunk,
    Usage,
    UserMessage,
)
from turnstream.errors import ConfigError
from turnstream.models import DemoModel, demo_tool_specs, run_demo_tool
from turnstream.runtime.model_client import (
    ModelEvent,
    ModelRequest,
    StreamEnd,
    ToolSpec,
)

TOOLS = demo_tool_specs()


def words(*pieces: str) -> list[ModelEvent]:
    return [TextChunk(text=piece) for piece in pieces]


def request(*messages: Message, tools: tuple[ToolSpec, ...] = TOOLS) -> ModelRequest:
    return ModelRequest(model="demo", messages=messages, tools=tools)


def ask(text: str) -> UserMessage:
    return UserMessage(blocks=(TextBlock(text=text),))


def fold(events: list[ModelEvent]) -> AIMessage:
    """The AIMessage a runtime would build from ``events``."""
    text = "".join(e.text for e in events if isinstance(e, TextChunk))
    calls: dict[int, list[str]] = {}
    for event in events:
        if isinstance(event, ToolUseChunk):
            call = calls.setdefault(event.index, ["", "", ""])
            call[0] += event.id
            call[1] += event.name
            call[2] += event.input_json
    uses = tuple(ToolUseBlock(id=i, name=n, input=j) for i, n, j in calls.values())
    return AIMessage(blocks=(TextBlock(text=text), *uses))


def run_tools(message: AIMessage) -> list[ToolResultMessage]:
    return [
        ToolResultMessage(
            tool_use_id=use.id,
            blocks=(TextBlock(text=run_demo_tool(use.name, use.input)),),
        )
        for use in message.tool_uses()
    ]


async def test_demo_three_numbers_take_two_add_steps_then_an_answer() -> None:
    """Step 1 adds the first two numbers, step 2 adds the running total to the
    third, and the final answer quotes both results."""
    model = DemoModel()
    history: list[Message] = [ask("What is 12 + 30 + 8?")]

    step1 = await collect(model.stream(request(*history)))
    assert step1 == [
        *words("Let ", "me ", "work ", "that ", "out."),
        ToolUseChunk(index=0, id="demo-1-1", name="add"),
        ToolUseChunk(index=0, input_json='{"a": 12'),
        ToolUseChunk(index=0, input_json=', "b": 3'),
        ToolUseChunk(index=0, input_json="0}"),
        StreamEnd(usage=Usage(input_tokens=7, output_tokens=9), stop_reason="tool_use"),
    ]
    reply = fold(step1)
    history += [reply, *run_tools(reply)]

    step2 = await collect(model.stream(request(*history)))
    assert step2 == [
        *words("Now ", "I'll ", "add ", "8 ", "to ", "the ", "running ", "total."),
        ToolUseChunk(index=0, id="demo-1-2", name="add"),
        ToolUseChunk(index=0, input_json='{"a": 42'),
        ToolUseChunk(index=0, input_json=', "b": 8'),
        ToolUseChunk(index=0, input_json="}"),
        StreamEnd(
            usage=Usage(input_tokens=17, output_tokens=12), stop_reason="tool_use"
        ),
    ]
    reply = fold(step2)
    history += [reply, *run_tools(reply)]

    final = await collect(model.stream(request(*history)))
    assert "".join(e.text for e in final if isinstance(e, TextChunk)) == (
        "add(12, 30) returned 42. add(42, 8) returned 50. The total is 50."
    )
    assert final[-1] == StreamEnd(
        usage=Usage(input_tokens=30, output_tokens=12), stop_reason="end_turn"
    )
    assert all(isinstance(e, TextChunk) for e in final[:-1])


async def test_demo_is_deterministic() -> None:
    """The same request streams the same events, from any instance."""
    req = request(ask("add 1.5 and -2 please"))

    assert await collect(DemoModel().stream(req)) == await collect(
        DemoModel().stream(req)
    )


async def test_demo_counts_words_when_there_are_no_numbers() -> None:
    """Without two numbers the question goes to word_count, then is answered."""
    model = DemoModel()
    history: list[Message] = [ask("How many words are in this sentence?")]

    step = await collect(model.stream(request(*history)))
    reply = fold(step)
    [call] = reply.tool_uses()
    assert (call.id, call.name) == ("demo-1-1", "word_count")
    assert call.input == '{"text": "How many words are in this sentence?"}'
    assert step[-1] == StreamEnd(
        usage=Usage(input_tokens=7, output_tokens=13), stop_reason="tool_use"
    )
    history += [reply, *run_tools(reply)]

    final = await collect(model.stream(request(*history)))
    assert "".join(e.text for e in final if isinstance(e, TextChunk)) == (
        "word_count returned 7, so your message has 7 words."
    )
    assert isinstance(final[-1], StreamEnd)
    assert final[-1].stop_reason == "end_turn"


async def test_demo_numbers_ids_by_question() -> None:
    """A second question in the same conversation gets fresh call ids."""
    earlier: list[Message] = [
        ask("1 2"),
        AIMessage(blocks=(ToolUseBlock(id="demo-1-1", name="add", input="{}"),)),
        ToolResultMessage(tool_use_id="demo-1-1", blocks=(TextBlock(text="3"),)),
        AIMessage(blocks=(TextBlock(text="The total is 3."),)),
    ]

    events = await collect(DemoModel().stream(request(*earlier, ask("3 4"))))

    assert ToolUseChunk(index=0, id="demo-2-1", name="add") in events


@pytest.mark.parametrize(
    ("tools", "question"),
    [
        pytest.param((), "What is 1 + 2?", id="no-tools"),
        pytest.param(
            tuple(t for t in TOOLS if t.name == "add"), "no numbers", id="add-only"
        ),
    ],
)
async def test_demo_answers_without_tools_when_none_fit(
    tools: tuple[ToolSpec, ...], question: str
) -> None:
    """With no fitting tool the demo explains itself and ends the turn."""
    events = await collect(DemoModel().stream(request(ask(question), tools=tools)))

    assert not any(isinstance(e, ToolUseChunk) for e in events)
    assert "".join(e.text for e in events if isinstance(e, TextChunk)).startswith(
        "I am the turnstream demo model."
    )
    assert isinstance(events[-1], StreamEnd)
    assert events[-1].stop_reason == "end_turn"


async def test_demo_reports_a_failed_tool() -> None:
    """An error result ends the turn with an answer that quotes it."""
    history: list[Message] = [
        ask("2 and 3"),
        AIMessage(blocks=(ToolUseBlock(id="demo-1-1", name="add", input="{}"),)),
        ToolResultMessage(
            tool_use_id="demo-1-1",
            is_error=True,
            blocks=(TextBlock(text="add: missing field 'a'"),),
        ),
    ]

    events = await collect(DemoModel().stream(request(*history)))

    assert "".join(e.text for e in events if isinstance(e, TextChunk)) == (
        "The add tool failed (add: missing field 'a')."
    )
    assert isinstance(events[-1], StreamEnd)
    assert events[-1].stop_reason == "end_turn"


async def test_demo_waits_chunk_delay_before_each_chunk() -> None:
    """chunk_delay is slept once per chunk, not before the StreamEnd."""
    delays: list[float] = []

    async def record(seconds: float) -> None:
        delays.append(seconds)

    events = await collect(
        DemoModel(chunk_delay=0.05, sleep=record).stream(request(ask("1 and 2")))
    )

    assert delays == [0.05] * (len(events) - 1)


async def test_demo_without_delay_never_sleeps() -> None:
    """chunk_delay 0 streams without waiting at all."""

    async def forbidden(seconds: float) -> None:
        raise AssertionError("slept")

    events = await collect(DemoModel(sleep=forbidden).stream(request(ask("1 2"))))

    assert isinstance(events[-1], StreamEnd)


async def test_demo_chunk_delay_is_cancellable() -> None:
    """Cancelling during a chunk delay propagates CancelledError at once."""
    sleeping = asyncio.Event()
    received: list[ModelEvent] = []

    async def sleep(seconds: float) -> None:
        if received:
            sleeping.set()
        await asyncio.sleep(seconds)

    async def first_chunk_now(seconds: float) -> None:
        # The first delay is skipped so the test can see a chunk arrive.
        if received:
            await sleep(seconds)

    model = DemoModel(chunk_delay=3600.0, sleep=first_chunk_now)

    async def consume() -> None:
        async for event in model.stream(request(ask("1 2"))):
            received.append(event)

    task = asyncio.create_task(consume())
    async with asyncio.timeout(10):
        await sleeping.wait()
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task
    assert received == [TextChunk(text="Let ")]


@pytest.mark.parametrize(
    "delay",
    [
        pytest.param(-0.1, id="negative"),
        pytest.param(math.inf, id="infinite"),
        pytest.param(math.nan, id="nan"),
    ],
)
def test_demo_rejects_bad_chunk_delay(delay: float) -> None:
    """A negative or non-finite delay is a ConfigError."""
    with pytest.raises(ConfigError):
        DemoModel(chunk_delay=delay)


def test_demo_name_and_repr() -> None:
    """The demo reports itself as "demo"."""
    model = DemoModel(chunk_delay=0.05)

    assert model.name == "demo"
    assert repr(model) == "DemoModel(chunk_delay=0.05)"


async def test_demo_says_one_word_not_one_words() -> None:
    """A one-word message is counted in the singular."""
    model = DemoModel()
    history: list[Message] = [ask("hello")]
    reply = fold(await collect(model.stream(request(*history))))
    history += [reply, *run_tools(reply)]
    final = await collect(model.stream(request(*history)))
    assert "".join(e.text for e in final if isinstance(e, TextChunk)) == (
        "word_count returned 1, so your message has 1 word."
    )
