"""Property: random interleavings of submits, interrupts, retracts and model faults.

Contract §4.10 (invariants the actor guards) and §10.3, checked over random
programs run against the in-memory adapters with a deterministic clock and id
source (asyncio only; no wall-clock waits):

* exactly one terminal per TurnStarted, and no terminal without one;
* TurnIndex contiguous from 1;
* every submitted command resolves exactly once (TurnStarted, TurnFoldedInto,
  TurnRejected or InputCancelled);
* durable before live: the enduring events delivered equal the journal, and the
  loop's history equals the fold of the journal (so an interrupted or failed
  turn never loses a committed step, and holds every StepDone's messages in
  order);
* a step's TokenDeltas all come before its StepDone;
* nothing of a turn comes after its terminal except InputCancelled and
  GateResolved{abandoned} (LoopIdle carries no turn).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from uuid import UUID

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnstream.content import TextChunk
from turnstream.events import (
    Agency,
    AnyEvent,
    GateCloseReason,
    GateResolved,
    InputCancelled,
    StepDone,
    TokenDelta,
    TurnDone,
    TurnFailed,
    TurnFoldedInto,
    TurnInterrupted,
    TurnRejected,
    TurnStarted,
)
from turnstream.ids import CommandId
from turnstream.runtime import LoopConfig, StreamEnd, ToolLimits, fold_loop
from turnstream.testing import (
    FunctionTool,
    Hang,
    Rig,
    ScriptedModel,
    ScriptItem,
    Yield,
    call,
    empty_step,
    failing_step,
    open_rig,
    text_step,
    tool_step,
)

TERMINALS = (TurnDone, TurnFailed, TurnInterrupted)
SETTLE_TURNS = 300
RESOLUTIONS = (TurnStarted, TurnFoldedInto, TurnRejected, InputCancelled)


# Factories, not lists: each example gets fresh script items (and fresh errors).
SCRIPTS: dict[str, Callable[[], list[ScriptItem]]] = {
    "text": lambda: text_step("a", "b"),
    "tool": lambda: tool_step(call("t", id="u1")),
    "tools": lambda: tool_step(call("t", id="u1"), call("t", id="u2"), text="calling"),
    "error_early": failing_step,
    "error_mid": lambda: failing_step(None, "partial"),
    "empty": empty_step,
    "hang": lambda: [TextChunk(text="h"), Hang()],
    "yieldy": lambda: [
        TextChunk(text="y"),
        Yield(3),
        TextChunk(text="z"),
        StreamEnd(),
    ],
}


def script(kind: str) -> list[ScriptItem]:
    return SCRIPTS[kind]()


STEP_KINDS = st.sampled_from(sorted(SCRIPTS))
SUBMIT = st.tuples(st.just("submit"), st.sampled_from(list(Agency)), st.booleans())
YIELD = st.tuples(st.just("yield"), st.integers(min_value=0, max_value=8))
INTERRUPT = st.tuples(st.just("interrupt"))
RETRACT = st.tuples(st.just("retract"), st.integers(min_value=0, max_value=20))
# Weighted towards submits and yields, so queues build up behind running turns.
OPS = st.one_of(SUBMIT, SUBMIT, SUBMIT, YIELD, YIELD, INTERRUPT, RETRACT)


async def tool_fn(_input: str, _ctx: object) -> str:
    for _ in range(2):
        await asyncio.sleep(0)  # interleave, not wait
    return "r"


async def run_program(kinds: list[str], ops: list[tuple[object, ...]]) -> None:
    model = ScriptedModel([script(k) for k in kinds], then=text_step("fallback"))
    tool = FunctionTool("t", tool_fn)
    config = LoopConfig(
        model="m",
        tools=(tool,),
        limits=ToolLimits(max_tool_steps=2),
        inbox_capacity=3,
    )
    submitted: list[CommandId] = []
    async with open_rig(model=model, config=config) as rig:
        for op in ops:
            match op:
                case ("submit", agency, no_fold):
                    submitted.append(
                        await rig.submit("x", agency=agency, no_fold=no_fold)  # type: ignore[arg-type]
                    )
                case ("interrupt",):
                    await rig.session.interrupt()
                case ("yield", times):
                    for _ in range(times):  # type: ignore[call-overload]
                        await asyncio.sleep(0)
                case ("retract", index) if submitted:
                    await rig.session.retract(submitted[index % len(submitted)])  # type: ignore[operator]
                case _:
                    pass
        # Let the program play out (event-loop turns, not wall-clock time), then
        # quiesce: no more scripted hangs, cancel what is stuck, let the rest finish.
        for _ in range(SETTLE_TURNS):
            await asyncio.sleep(0)
        model._steps.clear()
        await rig.session.interrupt()
        await rig.idle()
        state = await rig.session.loop_state()
        journal = rig.journal_events()
        assert state.messages == fold_loop(journal).messages
        assert state.turn_index == len(
            [e for e in journal if isinstance(e, TurnStarted)]
        )
    check_invariants(rig, submitted)


def check_invariants(rig: Rig, submitted: list[CommandId]) -> None:
    events = rig.events
    journal = list(rig.journal_events())
    assert [e for e in events if e.is_enduring()] == journal  # durable before live

    started = [e for e in journal if isinstance(e, TurnStarted)]
    assert [s.turn_index for s in started] == list(range(1, len(started) + 1))
    terminals = Counter(e.header.turn_id for e in journal if isinstance(e, TERMINALS))
    assert terminals == Counter(s.header.turn_id for s in started)

    resolutions = Counter(e.reply_to() for e in journal if isinstance(e, RESOLUTIONS))
    for command_id in submitted:
        assert resolutions[command_id] == 1, command_id
    assert set(resolutions) <= set(submitted)

    check_history(journal)
    check_step_order(events)
    check_nothing_after_terminal(events)


def check_history(journal: list[AnyEvent]) -> None:
    """Every committed step's messages are in history, in commit order."""
    expected = []
    for event in journal:
        if isinstance(event, TurnStarted | TurnFoldedInto):
            expected.append(event.message)
        elif isinstance(event, StepDone):
            expected.extend(event.messages)
    assert list(fold_loop(journal).messages) == expected  # type: ignore[arg-type]


def check_step_order(events: list[AnyEvent]) -> None:
    done_at = {
        e.header.step_id: i for i, e in enumerate(events) if isinstance(e, StepDone)
    }
    for index, event in enumerate(events):
        if isinstance(event, TokenDelta) and event.header.step_id in done_at:
            assert index < done_at[event.header.step_id]


def check_nothing_after_terminal(events: list[AnyEvent]) -> None:
    ended: set[UUID] = set()
    for event in events:
        turn = event.header.turn_id
        if turn is None:
            continue
        if turn in ended:
            allowed = isinstance(event, InputCancelled) or (
                isinstance(event, GateResolved)
                and event.reason is GateCloseReason.ABANDONED
            )
            assert allowed, event.type_name
        if isinstance(event, TERMINALS):
            ended.add(turn)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    kinds=st.lists(STEP_KINDS, min_size=1, max_size=12),
    ops=st.lists(OPS, min_size=3, max_size=24),
)
def test_random_interleavings_keep_the_turn_invariants(
    kinds: list[str], ops: list[tuple[object, ...]]
) -> None:
    """Contract §4.10 invariants and §10.3 shapes over random programs (property)."""
    asyncio.run(run_program(kinds, ops))
