"""A chained turn's start commits with the previous turn's end (contract §4.6).

A completed turn with input waiting ends in one commit that also carries the
next turn's ``TurnStarted``: the event order is the order of separate commits,
only the transaction boundary moves. With a Turn hook, or when that commit
fails, the start is a commit of its own, exactly as without chaining.
"""

from __future__ import annotations

from turnstream.events import (
    CancelReason,
    EnduringEvent,
    InputQueued,
    TurnDone,
    TurnStarted,
)
from turnstream.runtime.hooks import (
    Around,
    HookCall,
    HookResult,
    HookSet,
    Operation,
    compile_hooks,
)
from turnstream.testing import Pause, open_rig, text_step
from turnstream.testing.rig import Rig


def _types(batch: tuple[EnduringEvent, ...]) -> tuple[str, ...]:
    return tuple(type(e).__name__ for e in batch)


async def _three_queued_turns(rig: Rig, pause: Pause) -> tuple[object, object]:
    await rig.submit("t1")
    await pause.wait_reached()
    a = await rig.submit("A")
    b = await rig.submit("B")
    await rig.recorder.wait_for_type(InputQueued, count=2)
    pause.release()
    return a, b


def _scripts(pause: Pause) -> list[list[object]]:
    return [[pause, *text_step("one")], text_step("two"), text_step("three")]


async def test_a_chained_start_commits_with_the_previous_end() -> None:
    pause = Pause()
    async with open_rig(*_scripts(pause)) as rig:  # type: ignore[arg-type]
        await _three_queued_turns(rig, pause)
        await rig.recorder.wait_for_type(TurnDone, count=3)
        await rig.idle()
        assert [_types(b) for b in rig.journal.batches[-4:]] == [
            ("TurnStarted",),
            ("StepDone", "TurnDone", "TurnStarted"),
            ("StepDone", "TurnDone", "TurnStarted"),
            ("StepDone", "TurnDone", "LoopIdle"),
        ]
        starts = [e for e in rig.journal.batches[-2] if isinstance(e, TurnStarted)]
        assert [s.turn_index for s in starts] == [3]
        assert [m.role for m in await rig.history()] == ["user", "assistant"] * 3


async def test_with_a_turn_hook_every_start_is_a_commit_of_its_own() -> None:
    """The hook's finish sees its terminal durable and nothing after it."""
    seen: list[tuple[int, tuple[str, ...]]] = []

    def begin(call: HookCall) -> object:
        def finish(_result: HookResult) -> None:
            seen.append((call.turn_index, _types(rig.journal.batches[-1])))

        return finish

    hooks = compile_hooks(HookSet(around=(Around(Operation.TURN, begin),)))  # type: ignore[arg-type]
    pause = Pause()
    async with open_rig(*_scripts(pause), hooks=hooks) as rig:  # type: ignore[arg-type]
        await _three_queued_turns(rig, pause)
        await rig.recorder.wait_for_type(TurnDone, count=3)
        await rig.idle()
        assert [_types(b) for b in rig.journal.batches[-6:]] == [
            ("StepDone", "TurnDone"),
            ("TurnStarted",),
            ("StepDone", "TurnDone"),
            ("TurnStarted",),
            ("StepDone", "TurnDone"),
            ("LoopIdle",),
        ]
        assert seen == [
            (1, ("StepDone", "TurnDone")),
            (2, ("StepDone", "TurnDone")),
            (3, ("StepDone", "TurnDone")),
        ]


async def test_a_failed_chained_commit_ends_the_turn_alone_then_starts_apart() -> None:
    """Only the start is refused: the end commits alone, the input is returned."""
    pause = Pause()
    async with open_rig(*_scripts(pause)) as rig:  # type: ignore[arg-type]
        rig.journal.fail_when(
            lambda events: any(
                isinstance(e, TurnStarted) and e.turn_index == 2 for e in events
            )
        )
        a, b = await _three_queued_turns(rig, pause)
        await rig.idle()
        assert rig.after_start()[-5:] == [
            ("StepDone", ("AI:one",)),
            ("TurnDone", 1, "AI:one"),
            ("InputCancelled", a, CancelReason.TURN_FAILED),
            ("InputCancelled", b, CancelReason.TURN_FAILED),
            ("LoopIdle",),
        ]
        assert [_types(x) for x in rig.journal.batches[-4:]] == [
            ("StepDone", "TurnDone"),
            ("InputCancelled",),
            ("InputCancelled",),
            ("LoopIdle",),
        ]
        assert len(rig.model.requests) == 1


async def test_a_refused_end_is_committed_apart_as_without_chaining() -> None:
    """The whole end is refused: it is committed apart, as without chaining."""
    pause = Pause()
    async with open_rig(*_scripts(pause)) as rig:  # type: ignore[arg-type]
        rig.journal.fail_when(
            lambda events: any(isinstance(e, TurnDone) for e in events)
        )
        a, b = await _three_queued_turns(rig, pause)
        await rig.idle()
        assert rig.after_start()[-4:] == [
            ("StepDone", ("AI:one",)),
            ("InputCancelled", a, CancelReason.TURN_FAILED),
            ("InputCancelled", b, CancelReason.TURN_FAILED),
            ("LoopIdle",),
        ]
        assert not rig.recorder.of_type(TurnDone)
        assert len(rig.model.requests) == 1
