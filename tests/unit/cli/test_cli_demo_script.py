"""The demo's script and lifecycle check, driven through the embedded session."""

from __future__ import annotations

from uuid import uuid4

import pytest

from turnstream.cli.demo_script import DemoScript, LifecycleCheck, run_script
from turnstream.cli.render import EventRenderer
from turnstream.content import AIMessage, TextBlock, UserMessage
from turnstream.events import AnyEvent, Cause, Header, LoopIdle, TurnDone, TurnStarted
from turnstream.ids import LoopId
from turnstream.loop_actor.tools import tool_set
from turnstream.memory import embedded_session
from turnstream.models import DemoModel
from turnstream.runtime import AccessRules, LoopConfig


class Recorder:
    """An Output that renders into a list of lines."""

    def __init__(self) -> None:
        self.renderer = EventRenderer()
        self.text = ""

    def show(self, event: AnyEvent) -> None:
        self.text += self.renderer.feed(event)

    def note(self, text: str, style: str = "dim") -> None:
        self.text += self.renderer.close() + text + "\n"

    def types(self) -> list[str]:
        return [line.split(" ", 1)[0] for line in self.text.splitlines()]


async def run_demo(
    script: DemoScript, chunk_delay: float
) -> tuple[LifecycleCheck, Recorder]:
    out = Recorder()
    async with embedded_session() as session:
        loop_id = await session.create_loop(
            LoopConfig(model="demo", tools=tool_set("demo")),
            DemoModel(chunk_delay=chunk_delay),
            loop_id=LoopId(uuid4()),
            access_policy=AccessRules(allow=["add", "word_count"]),
        )
        check = await run_script(session, loop_id, script, out, within=20)
    return check, out


def subsequence(wanted: list[str], seen: list[str]) -> bool:
    it = iter(seen)
    return all(any(s == w for s in it) for w in wanted)


async def test_demo_script_meets_every_expectation_with_the_demo_model() -> None:
    """Tool turn, queued chain and interrupt all happen; nothing is missing."""
    script = DemoScript()

    check, out = await run_demo(script, chunk_delay=0.01)

    assert check.problems(script) == []
    first, second, third = check.turns
    assert first.tools_started == 2
    assert first.steps == 3
    assert second.queued
    assert third.terminal == "TurnInterrupted"
    assert subsequence(
        [
            "TurnStarted",
            "TokenDelta",
            "ToolCallStarted",
            "ToolCallCompleted",
            "StepDone",
            "TurnDone",
            "TurnStarted",
            "TurnDone",
            "TurnStarted",
            "TokenDelta",
            "TurnInterrupted",
        ],
        out.types(),
    ), out.text
    assert "InputQueued" in out.types()


def test_demo_check_reports_an_idle_loop_between_turns() -> None:
    """Turn 2 after a LoopIdle (not queued, not chained) is reported."""
    loop, c1, c2, t1, t2 = (uuid4() for _ in range(5))
    message = UserMessage(blocks=(TextBlock(text="q"),))
    check = LifecycleCheck(clock=lambda: 0.0)
    check.expect(c1)
    check.see(
        TurnStarted(
            header=Header(loop_id=loop, turn_id=t1, cause=Cause(command_id=c1)),
            turn_index=1,
            message=message,
        )
    )
    check.see(
        TurnDone(
            header=Header(loop_id=loop, turn_id=t1),
            turn_index=1,
            message=AIMessage(blocks=(TextBlock(text="a"),)),
        )
    )
    check.see(LoopIdle(header=Header(loop_id=loop)))
    check.expect(c2)
    check.see(
        TurnStarted(
            header=Header(loop_id=loop, turn_id=t2, cause=Cause(command_id=c2)),
            turn_index=2,
            message=message,
        )
    )
    check.expect(uuid4())

    problems = check.problems(DemoScript(require_tools=False))

    assert "input 2 was not queued (no InputQueued while turn 1 ran)" in problems
    assert any(p.startswith("turn 2 did not chain") for p in problems)
    assert "turn 1 streamed no TokenDelta" in problems
    assert "turn 3 ended with nothing, not TurnInterrupted" in problems


def test_demo_check_with_no_turns_reports_it() -> None:
    """A check that saw no submits says so instead of passing."""
    assert LifecycleCheck().problems(DemoScript()) == [
        "only 0 of 3 inputs were submitted"
    ]


@pytest.mark.parametrize(
    ("provider", "tools"),
    [pytest.param("demo", True, id="demo"), pytest.param("openai", False, id="real")],
)
def test_script_for_provider(provider: str, tools: bool) -> None:
    """A real model is not required to call tools."""
    assert DemoScript.for_provider(provider).require_tools is tools
