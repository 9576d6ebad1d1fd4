"""A planned stop leaves a continuing agent's turn open for the next owner.

``LoopActor.suspend_turn`` (a drain) lets the running step commit, then stops
the turn there, open, while the actor keeps serving; ``shutdown(handover=True)``
then writes nothing that ends it, and a new owner resumes it after that step.
The default agent is not suspended and its turn is interrupted at the handover.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from uuid import uuid4

import pytest
from tests.support.eventually import assert_eventually

from turnstream.commands import Interrupt, Shutdown
from turnstream.events import (
    Agency,
    EnduringEvent,
    RejectReason,
    StepDone,
    TurnDone,
    TurnInterrupted,
    TurnRejected,
    TurnResumed,
)
from turnstream.ids import CommandId, TurnId
from turnstream.memory import InMemoryHub, InMemoryJournal
from turnstream.runtime import LocalSession, LoopConfig, LoopSetup
from turnstream.runtime.actor import LoopActor
from turnstream.runtime.config import RestorePolicy
from turnstream.runtime.hooks import (
    Around,
    FinishFn,
    HookCall,
    HookResult,
    HookSet,
    Operation,
    compile_hooks,
)
from turnstream.runtime.ports import ToolContext
from turnstream.testing import (
    FixedClock,
    FunctionTool,
    Rig,
    ScriptedModel,
    SequentialIds,
    StaticAccessPolicy,
    call,
    open_rig,
    text_step,
    tool_step,
)

CONTINUE = RestorePolicy(on_restore="continue")


def _steps(count: int) -> list[object]:
    return [
        tool_step(call("t", id=f"u{i}", input_json=f'{{"n":{i}}}'))
        for i in range(1, count + 1)
    ]


def _handover(actor: LoopActor) -> Shutdown:
    return Shutdown(
        command_id=CommandId(uuid4()),
        session_id=actor.session_id,
        loop_id=actor.loop_id,
        created_at=datetime.now(UTC),
        agency=Agency.MACHINE,
    )


def _names(events: tuple[EnduringEvent, ...] | list[EnduringEvent]) -> list[str]:
    return [type(e).__name__ for e in events]


class _Held:
    """A tool whose second call waits until released."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.holding = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, input_json: str, _ctx: ToolContext) -> str:
        self.ran.append(input_json)
        if len(self.ran) == 2:
            self.holding.set()
            await self.release.wait()
        return f"r{len(self.ran)}"


async def _held_at_step_two(rig: Rig, held: _Held) -> LoopActor:
    await rig.submit("go")
    await held.holding.wait()
    return rig.session.loop(rig.loop_id)


async def test_suspend_commits_the_current_step_then_the_handover_ends_nothing() -> (
    None
):
    """Step 2 commits, step 3 is never asked; the handover writes nothing more."""
    held = _Held()
    tool = FunctionTool("t", held)
    config = LoopConfig(model="m", tools=(tool,), restore=CONTINUE)
    model = ScriptedModel([*_steps(3), text_step("done")])
    journal = InMemoryJournal()
    async with open_rig(model=model, tools=[tool], config=config) as rig:
        actor = await _held_at_step_two(rig, held)
        assert actor.suspend_turn()
        held.release.set()

        async def suspended() -> None:
            assert actor.turn_suspended

        await assert_eventually(suspended, timeout=5)
        assert _names(rig.journal_events()).count("StepDone") == 2
        assert len(model.requests) == 2  # stopped before step 3's request
        before = len(rig.journal_events())
        await actor.shutdown(_handover(actor), urgent=True, handover=True)
        events = rig.journal_events()
        assert len(events) == before  # no terminal, nothing else
        assert not any(e.ends_turn() for e in events)
        await journal.append(rig.loop_id, events)
        session_id, loop_id = rig.session.session_id, rig.loop_id
    ran: list[str] = []

    def counts(input_json: str, _ctx: ToolContext) -> str:
        ran.append(input_json)
        return "ok"

    resumed_model = ScriptedModel([*_steps(3)[2:], text_step("done")])
    again = FunctionTool("t", counts)
    session = await LocalSession.restore(
        session_id=session_id,
        journal=journal,
        hub=InMemoryHub(),
        loops={
            loop_id: LoopSetup(
                LoopConfig(model="m", tools=(again,), restore=CONTINUE), resumed_model
            )
        },
        clock=FixedClock(),
        ids=SequentialIds(50_000),
        access_policy=StaticAccessPolicy(),
    )
    async with session:
        await session.wait_idle()
    events = journal.events(loop_id)
    resumed = [e for e in events if isinstance(e, TurnResumed)]
    assert [(r.steps, r.resumes) for r in resumed] == [(2, 1)]
    assert held.ran == ['{"n":1}', '{"n":2}']
    assert ran == ['{"n":3}']  # nothing ran twice, nothing with an unknown outcome
    assert [type(e) for e in events if e.ends_turn()] == [TurnDone]
    assert _names(events).count("StepDone") == 4


async def test_an_interrupt_ends_a_suspended_turn() -> None:
    """A suspended turn is still the actor's: an interrupt ends it durably."""
    held = _Held()
    tool = FunctionTool("t", held)
    config = LoopConfig(model="m", tools=(tool,), restore=CONTINUE)
    async with open_rig(*_steps(3), tools=[tool], config=config) as rig:
        actor = await _held_at_step_two(rig, held)
        actor.suspend_turn()
        held.release.set()

        async def suspended() -> None:
            assert actor.turn_suspended

        await assert_eventually(suspended, timeout=5)
        assert await rig.session.interrupt(rig.loop_id)
        await rig.idle()
        events = rig.journal_events()
        assert [type(e) for e in events if e.ends_turn()] == [TurnInterrupted]
        assert _names(events).count("StepDone") == 2


async def test_handover_drops_a_running_step_of_a_continuing_turn() -> None:
    """Without a suspension first, the step running at the handover is dropped."""
    held = _Held()
    tool = FunctionTool("t", held)
    config = LoopConfig(model="m", tools=(tool,), restore=CONTINUE)
    async with open_rig(*_steps(3), tools=[tool], config=config) as rig:
        actor = await _held_at_step_two(rig, held)
        await actor.shutdown(_handover(actor), urgent=True, handover=True)
        events = rig.journal_events()
        assert not any(e.ends_turn() for e in events)
        assert [e for e in events if isinstance(e, StepDone)][-1].messages[0]
        assert _names(events).count("StepDone") == 1
        assert _names(events)[-1] == "PermissionDecided"  # step 2's, its result not


async def test_the_default_agent_is_not_suspended_and_is_interrupted() -> None:
    """suspend_turn does nothing to a default agent; the handover interrupts it."""
    held = _Held()
    tool = FunctionTool("t", held)
    config = LoopConfig(model="m", tools=(tool,))
    async with open_rig(*_steps(3), tools=[tool], config=config) as rig:
        actor = await _held_at_step_two(rig, held)
        actor.suspend_turn()
        await actor.shutdown(_handover(actor), urgent=True, handover=True)
        events = rig.journal_events()
        assert [type(e) for e in events if e.ends_turn()] == [TurnInterrupted]


@pytest.mark.parametrize("handover", [False, True], ids=["no-stop", "handover"])
async def test_an_interrupt_that_met_the_finished_task_is_answered_turn_ended(
    handover: bool,
) -> None:
    """A named interrupt that reaches the turn after its task finished (its end
    still in the mailbox) cancels nothing: the turn ends as it ended and the
    interrupt is answered ``turn_ended`` at that end. So also when a handover
    comes before that end: left open, the interrupt was never answered and the
    next owner re-ran the finished turn's last step.

    The window is held, not raced: the final step's hook, which runs in the
    task's last moment, posts the interrupt (and asks for the handover), so
    the actor takes them before the task's end reaches it.
    """
    holder: dict[str, object] = {}

    def begin(call: HookCall) -> FinishFn:
        def finish(_result: HookResult) -> None:
            rig = holder["rig"]
            assert isinstance(rig, Rig)
            actor = rig.session.loop(rig.loop_id)
            interrupt = Interrupt(
                command_id=CommandId(uuid4()),
                session_id=actor.session_id,
                loop_id=actor.loop_id,
                created_at=datetime.now(UTC),
                agency=Agency.USER,
                turn_id=TurnId(call.turn_id) if call.turn_id else None,
            )
            holder["interrupt"] = interrupt.command_id
            actor.post(interrupt)
            if handover:
                holder["handover"] = asyncio.ensure_future(
                    actor.shutdown(_handover(actor), urgent=True, handover=True)
                )

        return finish

    hooks = compile_hooks(HookSet(around=(Around(Operation.STEP, begin),)))
    config = LoopConfig(model="m", restore=CONTINUE)
    async with open_rig(text_step("done"), config=config, hooks=hooks) as rig:
        holder["rig"] = rig
        await rig.submit("go")

        async def answered() -> None:
            assert rig.recorder.of_type(TurnRejected)

        await assert_eventually(answered, timeout=5)
        stopping = holder.get("handover")
        if isinstance(stopping, asyncio.Future):
            await asyncio.wait_for(stopping, timeout=5)
        events = rig.journal_events()
        assert [type(e) for e in events if e.ends_turn()] == [TurnDone]
        rejected = rig.recorder.of_type(TurnRejected)
        assert [(r.reply_to(), r.reason) for r in rejected] == [
            (holder["interrupt"], RejectReason.TURN_ENDED)
        ]
