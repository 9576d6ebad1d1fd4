"""The contract's sequences A to E end to end through Kafka (harness contract §10.3).

Commands go in through ``KafkaSession.submit``; the loop-actor service runs in
process against the real broker; events are observed live through
``subscribe_events`` and afterwards through ``replay`` (the journal read
``read_committed``), and both must show the exact same enduring sequence. There are
no Session* events in turnstream: ``LoopIdle`` is the quiescence signal, and a new
loop's journal opens with ``LoopStarted``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from uuid import uuid4

import pytest
import pytest_asyncio
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    Models,
    apply_topic_set,
    collect_garbage,
    collect_garbage_late,
    collect_until,
    connect,
    count_type,
    delete_topic_set,
    enduring_types,
    loop_filter,
    running,
    service_for,
    unique_prefix,
)

from turnstream.content import TextChunk, UserMessage
from turnstream.errors import ProviderError
from turnstream.events import (
    InputCancelled,
    PermissionDecided,
    RejectReason,
    StepDone,
    ToolCallCompleted,
    TurnDone,
    TurnFailed,
    TurnFoldedInto,
    TurnRejected,
    TurnStarted,
)
from turnstream.ids import LoopId
from turnstream.kafka.actor.service import LoopActorService
from turnstream.kafka.client.session import KafkaSession
from turnstream.kafka.client.turns import TurnStatus
from turnstream.loop_actor.tools import tool_set
from turnstream.runtime.model_client import StreamEnd
from turnstream.runtime.ports import AccessPolicy
from turnstream.testing import (
    FunctionTool,
    Hang,
    Pause,
    ScriptedModel,
    StaticAccessPolicy,
    call,
    failing_step,
    text_step,
    tool_step,
)

pytestmark = [pytest.mark.kafka, pytest.mark.asyncio(loop_scope="module")]


@dataclass
class Lane:
    service: LoopActorService
    session: KafkaSession
    models: Models


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def lane(kafka_bootstrap: str) -> AsyncIterator[Lane]:
    prefix = unique_prefix("sequences")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=2)
    lookup = FunctionTool("lookup", lambda _input, _ctx: "42")
    remove = FunctionTool("remove", lambda _input, _ctx: "removed", approval=True)
    models = Models(tools=(*tool_set("demo"), lookup, remove))
    service = service_for(
        kafka_bootstrap, topics, group_id=f"{prefix}actors", models=models
    )
    try:
        async with running(service):
            session = await connect(kafka_bootstrap, topics)
            try:
                yield Lane(service, session, models)
            finally:
                await session.close()
    finally:
        await delete_topic_set(kafka_bootstrap, prefix)


def new_loop(lane: Lane, model: ScriptedModel | None = None) -> LoopId:
    loop_id = LoopId(uuid4())
    if model is not None:
        lane.models.by_loop[loop_id] = model
    return loop_id


async def test_sequence_a_text_only_turn(lane: Lane) -> None:
    """A: TurnStarted → deltas → StepDone → TurnDone → LoopIdle; journal equal."""
    loop_id = new_loop(lane, ScriptedModel([text_step("Hel", "lo", "!")]))
    subscription = lane.session.subscribe_events(loop_filter(loop_id))
    command_id = await lane.session.submit("hi", loop_id=loop_id)

    live = await collect_until(subscription, count_type("LoopIdle"))

    expected = ["LoopStarted", "TurnStarted", "StepDone", "TurnDone", "LoopIdle"]
    assert enduring_types(live) == expected
    started = next(e for e in live if isinstance(e, TurnStarted))
    assert started.reply_to() == command_id
    assert started.turn_index == 1
    deltas = [e for e in live if e.type_name == "TokenDelta"]
    assert "".join(d.chunk.text for d in deltas if isinstance(d.chunk, TextChunk)) == (
        "Hello!"
    )
    done = next(e for e in live if isinstance(e, TurnDone))
    assert done.message.blocks[0].text == "Hello!"  # type: ignore[union-attr]
    journal = await lane.session.replay(loop_id)
    assert [e.type_name for e in journal] == expected
    assert [e.header.event_id for e in journal] == [
        e.header.event_id for e in live if e.is_enduring()
    ]


async def test_sequence_b_two_tool_steps_then_text(lane: Lane) -> None:
    """B: two tool steps and a text answer; tool calls are live-only events."""
    loop_id = new_loop(lane)  # the demo model: "add 1 2 3" is two add calls
    subscription = lane.session.subscribe_events(loop_filter(loop_id))
    lane.models.by_loop[loop_id] = lane.models.default
    await lane.session.submit("add 1 2 3", loop_id=loop_id)

    live = await collect_until(subscription, count_type("LoopIdle"))

    expected = [
        "LoopStarted",
        "TurnStarted",
        "PermissionDecided",
        "StepDone",
        "PermissionDecided",
        "StepDone",
        "StepDone",
        "TurnDone",
        "LoopIdle",
    ]
    assert enduring_types(live) == expected
    calls = [e.type_name for e in live if e.type_name.startswith("ToolCall")]
    assert calls == ["ToolCallStarted", "ToolCallCompleted"] * 2
    steps = [e for e in live if isinstance(e, StepDone)]
    assert [len(s.messages) for s in steps] == [2, 2, 1]
    assert "The total is 6." in steps[-1].ai_message.blocks[0].text  # type: ignore[union-attr]
    assert [e.type_name for e in await lane.session.replay(loop_id)] == expected


async def test_sequence_c_interrupted_mid_stream(lane: Lane) -> None:
    """C: an interrupt mid-stream commits the safe prefix, then TurnInterrupted."""
    model = ScriptedModel(
        [[TextChunk(text="partial "), TextChunk(text="answer"), Hang()]]
    )
    loop_id = new_loop(lane, model)
    subscription = lane.session.subscribe_events(loop_filter(loop_id))
    await lane.session.submit("tell me", loop_id=loop_id)
    # Deltas come from another topic: they may be read before the TurnStarted.
    await collect_until(
        subscription,
        lambda seen: (
            count_type("TokenDelta", 2)(seen) and count_type("TurnStarted")(seen)
        ),
    )

    assert await lane.session.interrupt(loop_id)
    live = await collect_until(subscription, count_type("LoopIdle"))

    expected = ["StepDone", "TurnInterrupted", "LoopIdle"]
    assert enduring_types(live) == expected
    prefix = next(e for e in live if isinstance(e, StepDone))
    assert prefix.ai_message.blocks[0].text.startswith("partial answer")  # type: ignore[union-attr]
    journal = [e.type_name for e in await lane.session.replay(loop_id)]
    assert journal == ["LoopStarted", "TurnStarted", *expected]


async def test_sequence_d_failed_turn_after_one_committed_step(lane: Lane) -> None:
    """D: a provider error in step 1 ends TurnFailed; step 0 stays committed."""
    model = ScriptedModel(
        [tool_step(call("lookup", "{}")), failing_step(ProviderError("scripted", "x"))]
    )
    loop_id = new_loop(lane, model)
    subscription = lane.session.subscribe_events(loop_filter(loop_id))
    await lane.session.submit("look it up", loop_id=loop_id)

    live = await collect_until(subscription, count_type("LoopIdle"))

    expected = [
        "LoopStarted",
        "TurnStarted",
        "PermissionDecided",
        "StepDone",
        "TurnFailed",
        "LoopIdle",
    ]
    assert enduring_types(live) == expected
    failed = next(e for e in live if isinstance(e, TurnFailed))
    assert failed.error.kind.value == "provider"
    journal = await lane.session.replay(loop_id)
    assert [e.type_name for e in journal] == expected
    step = next(e for e in journal if isinstance(e, StepDone))
    assert [m.role for m in step.messages] == ["assistant", "tool"]


@pytest.mark.parametrize(
    ("tool", "policy", "reason", "result"),
    [
        pytest.param(
            "lookup",
            None,
            "access_gate_missing",
            "error: permission denied [unavailable]: no access policy",
            id="no-policy",
        ),
        pytest.param(
            "remove",
            StaticAccessPolicy(per_tool={"remove": "deny"}),
            "access_denied",
            "error: permission denied [not authorized]: denied by policy",
            id="policy-denies-an-approval-tool",
        ),
    ],
)
async def test_access_holes_are_closed_on_the_kafka_path(
    lane: Lane, tool: str, policy: AccessPolicy | None, reason: str, result: str
) -> None:
    """Contract §6.1/§6.2: a ``LoopSetup`` without a policy denies every call,
    and a policy's deny is final even for a tool that asks for approval: one
    durable ``PermissionDecided{deny}``, no gate, the tool never runs.
    """
    model = ScriptedModel([tool_step(call(tool, "{}", id="u1")), text_step("ok")])
    runs = {t.spec.name: t for t in lane.models.tools}[tool].calls  # type: ignore[attr-defined]
    ran_before = len(runs)
    loop_id = new_loop(lane, model)
    lane.models.policy_by_loop[loop_id] = policy
    subscription = lane.session.subscribe_events(loop_filter(loop_id))
    await lane.session.submit("go", loop_id=loop_id)

    live = await collect_until(subscription, count_type("LoopIdle"))

    expected = [
        "LoopStarted",
        "TurnStarted",
        "PermissionDecided",
        "StepDone",
        "StepDone",
        "TurnDone",
        "LoopIdle",
    ]
    assert enduring_types(live) == expected
    decided = next(e for e in live if isinstance(e, PermissionDecided))
    assert (decided.effect, decided.reason, decided.subject) == ("deny", reason, tool)
    completed = [e for e in live if isinstance(e, ToolCallCompleted)]
    assert [(c.is_error, c.result_preview) for c in completed] == [(True, result)]
    journal = await lane.session.replay(loop_id)
    assert [e.type_name for e in journal] == expected
    step = next(e for e in journal if isinstance(e, StepDone))
    assert step.messages[1].blocks[0].text == result  # type: ignore[union-attr]
    assert len(runs) == ran_before  # the tool never ran


async def test_a_model_refused_first_input_binds_no_loop(lane: Lane) -> None:
    """A new loop's first input naming a model outside the agent's list is
    ``TurnRejected{model_not_allowed}`` and nothing else: no ``LoopStarted``
    binds the loop; the next input starts it.
    """
    loop_id = new_loop(lane, ScriptedModel([text_step("hi")]))
    refused = await lane.session.submit_and_wait(
        "hi", loop_id=loop_id, model="not-allowed", timeout=60
    )
    assert isinstance(refused.answer, TurnRejected)
    assert refused.answer.reason is RejectReason.MODEL_NOT_ALLOWED
    assert [e.type_name for e in await lane.session.replay(loop_id)] == ["TurnRejected"]

    done = await lane.session.submit_and_wait("hi", loop_id=loop_id, timeout=60)

    assert done.status is TurnStatus.DONE
    assert [e.type_name for e in await lane.session.replay(loop_id)] == [
        "TurnRejected",
        "LoopStarted",
        "TurnStarted",
        "StepDone",
        "TurnDone",
        "LoopIdle",
    ]


async def test_sequence_e1_two_inputs_queued_behind_a_text_turn(lane: Lane) -> None:
    """E1: queued inputs chain as turns; one LoopIdle at the very end."""
    pause = Pause()
    model = ScriptedModel(
        [
            [TextChunk(text="one"), pause, StreamEnd()],
            text_step("two"),
            text_step("three"),
        ]
    )
    loop_id = new_loop(lane, model)
    subscription = lane.session.subscribe_events(loop_filter(loop_id))
    first = await lane.session.submit("first", loop_id=loop_id)
    await collect_until(subscription, count_type("TurnStarted"))
    await pause.wait_reached(within=10)
    a = await lane.session.submit("A", loop_id=loop_id)
    b = await lane.session.submit("B", loop_id=loop_id)
    queued = await collect_until(subscription, count_type("InputQueued", 2))
    assert [e.reply_to() for e in queued if e.type_name == "InputQueued"] == [a, b]
    pause.release()

    live = await collect_until(subscription, count_type("LoopIdle"))

    turn = ["TurnStarted", "StepDone", "TurnDone"]
    assert enduring_types(live) == [*turn[1:], *turn, *turn, "LoopIdle"]
    journal = await lane.session.replay(loop_id)
    assert [e.type_name for e in journal] == ["LoopStarted", *turn * 3, "LoopIdle"]
    starts = [e for e in journal if isinstance(e, TurnStarted)]
    assert [s.reply_to() for s in starts] == [first, a, b]
    assert [s.turn_index for s in starts] == [1, 2, 3]


async def test_sequence_e2_inputs_fold_into_a_tool_turn(lane: Lane) -> None:
    """E2: inputs queued before the drain after a tool step fold into the turn."""
    pause = Pause()
    step0 = tool_step(call("lookup", "{}"))
    model = ScriptedModel([[*step0[:-1], pause, step0[-1]], text_step("done")])
    loop_id = new_loop(lane, model)
    subscription = lane.session.subscribe_events(loop_filter(loop_id))
    await lane.session.submit("first", loop_id=loop_id)
    await collect_until(subscription, count_type("TurnStarted"))
    await pause.wait_reached(within=10)
    a = await lane.session.submit("A", loop_id=loop_id)
    b = await lane.session.submit("B", loop_id=loop_id)
    await collect_until(subscription, count_type("InputQueued", 2))
    pause.release()

    live = await collect_until(subscription, count_type("LoopIdle"))

    expected = [
        "PermissionDecided",
        "StepDone",
        "TurnFoldedInto",
        "TurnFoldedInto",
        "StepDone",
        "TurnDone",
        "LoopIdle",
    ]
    assert enduring_types(live) == expected
    folds = [e for e in live if isinstance(e, TurnFoldedInto)]
    assert [f.reply_to() for f in folds] == [a, b]
    assert all(f.turn_index == 1 for f in folds)
    last_request = model.requests[-1].messages
    assert [m.role for m in last_request[-2:]] == ["user", "user"]
    journal = await lane.session.replay(loop_id)
    assert [e.type_name for e in journal] == ["LoopStarted", "TurnStarted", *expected]


async def test_invalid_input_is_rejected_and_retract_cancels(lane: Lane) -> None:
    """An empty message gets TurnRejected{invalid_input}; a retract InputCancelled."""
    pause = Pause()
    model = ScriptedModel([[TextChunk(text="x"), pause, StreamEnd()], text_step("y")])
    loop_id = new_loop(lane, model)
    subscription = lane.session.subscribe_events(loop_filter(loop_id))
    await lane.session.submit("start", loop_id=loop_id)
    await pause.wait_reached(within=10)
    empty = await lane.session.submit(UserMessage(blocks=()), loop_id=loop_id)
    queued = await lane.session.submit("later", loop_id=loop_id)
    live = await collect_until(subscription, count_type("InputQueued"))
    await lane.session.retract(queued, loop_id=loop_id)
    live += await collect_until(subscription, count_type("InputCancelled"))
    pause.release()
    live += await collect_until(subscription, count_type("LoopIdle"))

    rejected = next(e for e in live if e.type_name == "TurnRejected")
    assert rejected.reply_to() == empty
    assert rejected.reason.value == "invalid_input"  # type: ignore[attr-defined]
    cancelled = next(e for e in live if isinstance(e, InputCancelled))
    assert cancelled.reply_to() == queued
    assert cancelled.reason.value == "client_retracted"
    async with asyncio.timeout(30):
        await lane.session.wait_idle(loop_id)
