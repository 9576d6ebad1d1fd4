"""Agents: @tool, access rules, binding, model choice, shutdown, restore of gates."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from uuid import UUID, uuid4

import pytest
from pydantic import BaseModel
from tests.support.eventually import assert_eventually

from turnstream.commands import DeleteLoop, Shutdown, SubmitInput
from turnstream.content import TextBlock, UserMessage
from turnstream.errors import ConfigError
from turnstream.events import (
    CancelReason,
    EnduringEvent,
    GateCloseReason,
    GateOpened,
    GateResolved,
    InputCancelled,
    LoopDeleted,
    LoopStarted,
    LoopStopped,
    PermissionDecided,
    RejectReason,
    StepDone,
    TurnInterrupted,
    TurnRejected,
    TurnStarted,
)
from turnstream.ids import LoopId, SessionId
from turnstream.memory.hub import InMemoryHub
from turnstream.memory.journal import InMemoryJournal
from turnstream.runtime import (
    AccessRules,
    Agent,
    AgentHost,
    LoopActor,
    ToolContext,
    ToolOutput,
    ToolSpec,
    restore_loop,
    tool,
)
from turnstream.runtime.ports import AccessRequest
from turnstream.testing import (
    FixedClock,
    ScriptedModel,
    SequentialIds,
    call,
    text_step,
    tool_step,
)

SESSION = SessionId(UUID(int=1))
CTX = ToolContext(
    session_id=SESSION,
    loop_id=LoopId(UUID(int=2)),
    turn_id=UUID(int=3),  # type: ignore[arg-type]
    step_id=UUID(int=4),  # type: ignore[arg-type]
    tool_execution_id=UUID(int=5),  # type: ignore[arg-type]
    tool_use_id="u",
)


# ---------------------------------------------------------------- @tool


@tool
def add(a: int, b: int = 2) -> int:
    """Add two integers.

    Longer text the model is not shown.
    """
    return a + b


class Refund(BaseModel):
    order_id: str
    amount_cents: int


seen_contexts: list[ToolContext] = []


@tool(name="refund", sequential=True, audit=lambda _j: "refund an order")
async def refund_order(request: Refund, ctx: ToolContext) -> str:
    """Refund one order."""
    seen_contexts.append(ctx)
    return f"refunded {request.order_id}"


def test_tool_schema_comes_from_the_signature() -> None:
    """A typed function's parameters are the schema; the docstring's first
    paragraph is the description.
    """
    assert add.spec.name == "add"
    assert add.spec.description == "Add two integers."
    assert json.loads(add.spec.input_schema) == {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "a": {"type": "integer"},
            "b": {"type": "integer", "default": 2},
        },
        "required": ["a"],
    }


def test_tool_schema_of_a_pydantic_model_skips_the_context() -> None:
    """One pydantic-model parameter is the schema; ToolContext is not in it."""
    assert refund_order.spec.name == "refund"
    assert json.loads(refund_order.spec.input_schema) == {
        "type": "object",
        "properties": {
            "order_id": {"type": "string"},
            "amount_cents": {"type": "integer"},
        },
        "required": ["order_id", "amount_cents"],
    }
    assert refund_order.sequential() is True
    assert refund_order.audit_summary("{}") == "refund an order"


async def test_tool_runs_sync_and_async_functions() -> None:
    """Sync functions run (in a thread), async ones are awaited; the context is
    passed; results are shaped to text.
    """
    assert await add.run('{"a": 1}', CTX) == ToolOutput.text("3")
    out = await refund_order.run('{"order_id": "o-7", "amount_cents": 5}', CTX)
    assert out == ToolOutput.text("refunded o-7")
    assert seen_contexts[-1] is CTX


async def test_tool_invalid_input_names_fields_never_values() -> None:
    """Bad input is an error result naming the field, without the value sent."""
    out = await add.run('{"a": "secret-value"}', CTX)
    assert out.is_error
    text = out.content[0].text  # type: ignore[union-attr]
    assert text.startswith("invalid arguments: a: ")
    assert "secret-value" not in text
    extra = await add.run('{"a": 1, "c": 2}', CTX)
    assert extra.is_error


def test_tool_without_annotations_is_a_config_error() -> None:
    """Every parameter needs a type (the schema is derived from it)."""

    def untyped(x):  # type: ignore[no-untyped-def]
        return x

    with pytest.raises(ConfigError):
        tool(untyped)


# ---------------------------------------------------------------- policies


async def test_access_rules_allow_ask_deny_and_default() -> None:
    """Each list maps to its effect; a tool in no list gets the default (deny)."""
    rules = AccessRules(allow=["a"], ask=["b"], deny=["c"])

    async def decide(name: str) -> str:
        return await rules.decide(
            AccessRequest(tool_name=name, summary="", tool_execution_id=UUID(int=1))  # type: ignore[arg-type]
        )

    assert [await decide(n) for n in ("a", "b", "c", "other")] == [
        "approve",
        "ask",
        "deny",
        "deny",
    ]
    with pytest.raises(ConfigError):
        AccessRules(allow=["a"], deny=["a"])


def test_agent_validates_its_name_and_configuration() -> None:
    """A bad name or duplicate tool names fail at definition time."""
    with pytest.raises(ConfigError):
        Agent(name="no spaces", model="demo")
    with pytest.raises(ConfigError):
        Agent(name="a", model="demo", tools=[add, add])
    agent = Agent(name="a", model="openai:gpt-4o-mini", models=("openai:gpt-4o",))
    assert agent.loop_config().allowed_models() == ("gpt-4o-mini", "gpt-4o")


# ---------------------------------------------------------------- loops


def submit(loop_id: LoopId, text: str = "hi", **kw: object) -> SubmitInput:
    return SubmitInput(
        command_id=uuid4(),
        session_id=SESSION,
        loop_id=loop_id,
        created_at=datetime.now(UTC),
        message=UserMessage(blocks=(TextBlock(text=text),)),
        **kw,  # type: ignore[arg-type]
    )


def shutdown(loop_id: LoopId) -> Shutdown:
    return Shutdown(
        command_id=uuid4(),
        session_id=SESSION,
        loop_id=loop_id,
        created_at=datetime.now(UTC),
    )


class Loop:
    """One loop actor of an AgentHost, over an in-memory journal."""

    def __init__(self, host: AgentHost, journal: InMemoryJournal | None = None):
        self.host = host
        self.journal = journal or InMemoryJournal()
        self.loop_id = LoopId(uuid4())
        self.ids = SequentialIds()

    async def start(self, agent: str = "", *, restore: bool = False) -> LoopActor:
        setup = self.host.setup_for(self.loop_id, agent)
        if restore:
            state = await restore_loop(
                self.journal, self.loop_id, clock=FixedClock(), ids=self.ids
            )
            if state.model:
                setup = self.host.setup_for(self.loop_id, state.agent_name)
            actor = LoopActor.from_state(
                state,
                config=setup.config,
                model=setup.model,
                journal=self.journal,
                hub=InMemoryHub(),
                clock=FixedClock(),
                ids=self.ids,
                hooks=setup.hooks,
                access_policy=setup.access_policy,
                announce=not state.model,
            )
        else:
            actor = LoopActor(
                session_id=SESSION,
                loop_id=self.loop_id,
                config=setup.config,
                model=setup.model,
                journal=self.journal,
                hub=InMemoryHub(),
                clock=FixedClock(),
                ids=self.ids,
                hooks=setup.hooks,
                access_policy=setup.access_policy,
            )
        self.actor = actor
        return actor

    def events(self) -> tuple[EnduringEvent, ...]:
        return self.journal.events(self.loop_id)

    def of(self, kind: type[EnduringEvent]) -> list[EnduringEvent]:
        return [e for e in self.events() if isinstance(e, kind)]


async def run_until_idle(actor: LoopActor, *commands: object) -> None:
    """Run the actor, post each command once the loop is idle, then stop it."""
    task = asyncio.create_task(actor.run())
    try:
        await actor.started()
        for command in commands:
            actor.post(command)  # type: ignore[arg-type]
            await actor.wait_idle()
    finally:
        if not task.done():
            await actor.shutdown(shutdown(actor.loop_id), urgent=True)
        await task


calls_made: list[str] = []


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    calls_made.append(key)
    return f"value of {key}"


def host_of(*agents: Agent, model: ScriptedModel) -> AgentHost:
    return AgentHost(agents, lambda _a: model)


async def test_no_policy_denies_every_call_with_permission_decided() -> None:
    """Contract §6.1: no access policy denies every call; each denial is a durable
    PermissionDecided{deny, access_gate_missing}; the tool never runs.
    """
    calls_made.clear()
    model = ScriptedModel(
        [tool_step(call("lookup", '{"key": "k"}', id="u1")), text_step("x")]
    )
    agent = Agent(name="bare", model="m", tools=[lookup])
    host = host_of(agent, model=model)
    assert host.warnings() == [
        "agent 'bare' has no access policy: every tool call is denied "
        "(give it access=AccessRules(...))"
    ]
    loop = Loop(host)
    await run_until_idle(await loop.start(), submit(loop.loop_id))
    decided = loop.of(PermissionDecided)
    assert [(d.effect, d.reason, d.subject) for d in decided] == [  # type: ignore[attr-defined]
        ("deny", "access_gate_missing", "lookup")
    ]
    step = loop.of(StepDone)[0]
    result = step.messages[1]  # type: ignore[attr-defined]
    assert result.is_error
    assert result.blocks[0].text == (
        "error: permission denied [unavailable]: no access policy"
    )
    assert calls_made == []


async def test_allowed_call_is_decided_then_runs() -> None:
    """An allowed tool gets PermissionDecided{approve, access_evaluated} first."""
    calls_made.clear()
    model = ScriptedModel(
        [tool_step(call("lookup", '{"key": "k"}', id="u1")), text_step("x")]
    )
    agent = Agent(
        name="a", model="m", tools=[lookup], access=AccessRules(allow=["lookup"])
    )
    loop = Loop(host_of(agent, model=model))
    await run_until_idle(await loop.start(), submit(loop.loop_id))
    decided = loop.of(PermissionDecided)
    assert [(d.effect, d.reason) for d in decided] == [("approve", "access_evaluated")]  # type: ignore[attr-defined]
    assert calls_made == ["k"]


async def test_first_submit_binds_the_loop_and_another_agent_is_rejected() -> None:
    """LoopStarted carries the agent; a later submit naming another agent is
    TurnRejected{wrong_agent}; one naming none or the same runs.
    """
    model = ScriptedModel([text_step("a"), text_step("b")])
    support = Agent(name="support", model="m")
    billing = Agent(name="billing", model="m")
    loop = Loop(host_of(support, billing, model=model))
    actor = await loop.start("billing")
    other = submit(loop.loop_id, agent="support")
    await run_until_idle(
        actor,
        submit(loop.loop_id, agent="billing"),
        other,
        submit(loop.loop_id),
    )
    started = loop.of(LoopStarted)
    assert [s.header.agent_name for s in started] == ["billing"]
    rejected = loop.of(TurnRejected)
    assert [(r.reason, r.detail, r.reply_to()) for r in rejected] == [  # type: ignore[attr-defined]
        (
            RejectReason.WRONG_AGENT,
            "the loop is bound to agent 'billing'",
            other.command_id,
        )
    ]
    assert len(loop.of(TurnStarted)) == 2


async def test_unhosted_agent_is_refused_and_binds_nothing() -> None:
    """A submit for an agent the host lacks (or none while it hosts several) is
    TurnRejected{unknown_agent}; no LoopStarted, so a later submit can bind it.
    """
    model = ScriptedModel([text_step("a")])
    host = host_of(Agent(name="a", model="m"), Agent(name="b", model="m"), model=model)
    loop = Loop(host)
    await run_until_idle(await loop.start("ghost"), submit(loop.loop_id, agent="ghost"))
    await run_until_idle(await loop.start("", restore=True), submit(loop.loop_id))
    rejected = loop.of(TurnRejected)
    assert [(r.reason, r.detail) for r in rejected] == [  # type: ignore[attr-defined]
        (RejectReason.UNKNOWN_AGENT, "agent 'ghost' is not hosted by this service"),
        (RejectReason.UNKNOWN_AGENT, "name an agent: this service hosts several"),
    ]
    assert loop.of(LoopStarted) == []
    await run_until_idle(
        await loop.start("b", restore=True), submit(loop.loop_id, agent="b")
    )
    assert [s.header.agent_name for s in loop.of(LoopStarted)] == ["b"]
    assert len(loop.of(TurnStarted)) == 1


async def test_model_choice_inside_allow_list_is_captured_outside_rejected() -> None:
    """A submit's model must be in the agent's allow-list: TurnStarted records it
    and every step asks it; another model is TurnRejected{model_not_allowed}.
    """
    model = ScriptedModel([text_step("a"), text_step("b")])
    agent = Agent(
        name="a", model="openai:small", models=("openai:large",), max_tokens=100
    )
    loop = Loop(host_of(agent, model=model))
    bad = submit(loop.loop_id, model="huge")
    await run_until_idle(
        await loop.start(),
        submit(loop.loop_id, model="large", max_tokens=7),
        bad,
        submit(loop.loop_id),
    )
    started = loop.of(TurnStarted)
    assert [(s.model, s.max_tokens) for s in started] == [("large", 7), ("small", 100)]  # type: ignore[attr-defined]
    assert [(r.model, r.max_tokens) for r in model.requests] == [
        ("large", 7),
        ("small", 100),
    ]
    rejected = loop.of(TurnRejected)
    assert [(r.reason, r.detail, r.reply_to()) for r in rejected] == [  # type: ignore[attr-defined]
        (RejectReason.MODEL_NOT_ALLOWED, "allowed models: small, large", bad.command_id)
    ]


async def test_shutdown_is_durable_and_refuses_later_input_after_restore() -> None:
    """A client's Shutdown ends with LoopStopped; a restored loop (any owner)
    answers a later submit TurnRejected{shutting_down}.
    """
    model = ScriptedModel([text_step("a")])
    loop = Loop(host_of(Agent(name="a", model="m"), model=model))
    await run_until_idle(
        await loop.start(), submit(loop.loop_id), shutdown(loop.loop_id)
    )
    assert [type(e).__name__ for e in loop.events()][-3:] == [
        "TurnDone",
        "LoopIdle",
        "LoopStopped",
    ]
    late = submit(loop.loop_id)
    await run_until_idle(await loop.start(restore=True), late)
    rejected = loop.of(TurnRejected)
    assert [(r.reason, r.detail, r.reply_to()) for r in rejected] == [  # type: ignore[attr-defined]
        (RejectReason.SHUTTING_DOWN, "the loop was shut down", late.command_id)
    ]
    assert len(loop.of(LoopStopped)) == 1


def delete_loop(loop_id: LoopId) -> DeleteLoop:
    return DeleteLoop(
        command_id=uuid4(),
        session_id=SESSION,
        loop_id=loop_id,
        created_at=datetime.now(UTC),
    )


async def test_delete_interrupts_the_turn_returns_queued_input_and_forgets() -> None:
    """DeleteLoop during a turn: TurnInterrupted, the queued input returned
    InputCancelled{loop_deleted}, then LoopDeleted (the delete's answer); the
    loop stops and its fold keeps no history.
    """
    model = ScriptedModel([], hang=True)  # the turn runs until it is cancelled
    loop = Loop(host_of(Agent(name="a", model="m"), model=model))
    actor = await loop.start()
    task = asyncio.create_task(actor.run())
    first, queued = submit(loop.loop_id), submit(loop.loop_id, "later")
    delete = delete_loop(loop.loop_id)
    actor.post(first)
    await assert_eventually(lambda: len(model.requests) == 1)
    actor.post(queued)
    actor.post(delete)
    async with asyncio.timeout(5):
        await task
    assert [type(e).__name__ for e in loop.events()] == [
        "LoopStarted",
        "TurnStarted",
        "TurnInterrupted",
        "InputCancelled",
        "LoopDeleted",
    ]
    (cancelled,) = loop.of(InputCancelled)
    assert (cancelled.reason, cancelled.reply_to()) == (  # type: ignore[attr-defined]
        CancelReason.LOOP_DELETED,
        queued.command_id,
    )
    assert loop.of(LoopDeleted)[0].reply_to() == delete.command_id
    state = await restore_loop(
        loop.journal, loop.loop_id, clock=FixedClock(), ids=loop.ids
    )
    assert (state.deleted, state.stopped, state.messages) == (True, True, ())
    assert state.turn_index == 1


async def test_deleted_loop_refuses_input_and_a_second_delete_after_restore() -> None:
    """Any later owner answers a submit, and another DeleteLoop,
    TurnRejected{loop_deleted}; an agent that reopens stopped loops does not
    reopen a deleted one; a redelivered delete is not answered twice.
    """
    model = ScriptedModel([text_step("a"), text_step("b")])
    agent = Agent(name="a", model="m", reopen_after_shutdown=True)
    loop = Loop(host_of(agent, model=model))
    delete = delete_loop(loop.loop_id)
    await run_until_idle(await loop.start(), submit(loop.loop_id), delete)
    assert [type(e).__name__ for e in loop.events()][-3:] == [
        "TurnDone",
        "LoopIdle",
        "LoopDeleted",
    ]
    late, again = submit(loop.loop_id), delete_loop(loop.loop_id)
    await run_until_idle(await loop.start(restore=True), late, again, delete)
    rejected = loop.of(TurnRejected)
    assert [(r.reason, r.reply_to()) for r in rejected] == [  # type: ignore[attr-defined]
        (RejectReason.LOOP_DELETED, late.command_id),
        (RejectReason.LOOP_DELETED, again.command_id),
    ]
    assert len(loop.of(LoopDeleted)) == 1
    assert len(loop.of(TurnStarted)) == 1
    assert len(loop.of(LoopStarted)) == 1  # a deleted loop is never announced again


async def test_delete_right_after_a_shutdown_still_deletes() -> None:
    """A DeleteLoop queued behind a client's Shutdown of an idle loop is taken
    after the loop stopped: LoopStopped, then LoopDeleted.
    """
    model = ScriptedModel([text_step("a")])
    loop = Loop(host_of(Agent(name="a", model="m"), model=model))
    actor = await loop.start()
    await run_until_idle(actor, submit(loop.loop_id))
    actor = await loop.start(restore=True)
    task = asyncio.create_task(actor.run())
    await actor.started()
    delete = delete_loop(loop.loop_id)
    actor.post(shutdown(loop.loop_id))
    actor.post(delete)
    async with asyncio.timeout(5):
        await task
    assert [type(e).__name__ for e in loop.events()][-2:] == [
        "LoopStopped",
        "LoopDeleted",
    ]
    assert loop.of(LoopDeleted)[0].reply_to() == delete.command_id


async def test_shutdown_reopens_when_the_agent_allows_it() -> None:
    """reopen_after_shutdown: the next submit starts a turn and clears the stop."""
    model = ScriptedModel([text_step("a"), text_step("b")])
    agent = Agent(name="a", model="m", reopen_after_shutdown=True)
    loop = Loop(host_of(agent, model=model))
    await run_until_idle(
        await loop.start(), submit(loop.loop_id), shutdown(loop.loop_id)
    )
    actor = await loop.start(restore=True)
    await run_until_idle(actor, submit(loop.loop_id))
    assert len(loop.of(TurnStarted)) == 2
    assert loop.of(TurnRejected) == []
    state = await restore_loop(
        loop.journal, loop.loop_id, clock=FixedClock(), ids=loop.ids
    )
    assert state.stopped is False


async def test_restore_closes_open_gates_abandoned_then_interrupts() -> None:
    """Contract §8.2 steps 4-5: a crash with a gate open is closed by
    GateResolved{abandoned} for that gate, then TurnInterrupted, in that order.
    """

    model = ScriptedModel([tool_step(call("lookup", '{"key": "k"}', id="u1"))])
    agent = Agent(
        name="a", model="m", tools=[lookup], access=AccessRules(ask=["lookup"])
    )
    loop = Loop(host_of(agent, model=model))
    actor = await loop.start()
    task = asyncio.create_task(actor.run())
    await actor.started()
    actor.post(submit(loop.loop_id))
    await assert_eventually(lambda: bool(loop.of(GateOpened)))
    opened = loop.of(GateOpened)[0]
    task.cancel()  # the process dies with the gate open
    with pytest.raises(asyncio.CancelledError):
        await task
    before = len(loop.events())
    await restore_loop(loop.journal, loop.loop_id, clock=FixedClock(), ids=loop.ids)
    tail = loop.events()[before:]
    assert [type(e).__name__ for e in tail] == ["GateResolved", "TurnInterrupted"]
    resolved = tail[0]
    assert isinstance(resolved, GateResolved)
    assert (resolved.gate_id, resolved.reason) == (
        opened.gate_id,  # type: ignore[attr-defined]
        GateCloseReason.ABANDONED,
    )
    assert resolved.header.step_id == opened.header.step_id
    assert isinstance(tail[1], TurnInterrupted)


async def test_local_session_hosts_an_agent_with_its_policy() -> None:
    """In process too, an agent's loop runs with its hooks and access policy:
    an agent without one denies the call.
    """
    from turnstream.runtime import LocalSession

    calls_made.clear()
    model = ScriptedModel(
        [tool_step(call("lookup", '{"key": "k"}', id="u1")), text_step("x")]
    )
    journal = InMemoryJournal()
    session = LocalSession(journal=journal, hub=InMemoryHub(), clock=FixedClock())
    async with session:
        loop_id = await session.create_agent_loop(
            Agent(name="bare", model="m", tools=[lookup]), model
        )
        await session.submit("go")
        await session.wait_idle()
    decided = [e for e in journal.events(loop_id) if isinstance(e, PermissionDecided)]
    assert [(d.effect, d.reason) for d in decided] == [("deny", "access_gate_missing")]
    started = [e for e in journal.events(loop_id) if isinstance(e, LoopStarted)]
    assert started[0].header.agent_name == "bare"
    assert calls_made == []


def test_build_service_uses_an_agents_own_client() -> None:
    """Agent(client=...) is used as is; other agents get one built from model."""
    from turnstream.loop_actor import ActorSettings, build_service

    own = ScriptedModel([])
    mine = Agent(name="mine", model="custom-model", client=own)
    demo = Agent(name="demo", model="demo")
    built = build_service(ActorSettings(bootstrap="127.0.0.1:1"), agents=[mine, demo])
    assert built.host.setup_for(LoopId(uuid4()), "mine").model is own
    assert len(built.models) == 1
    assert own not in built.models


class _Resource:
    """A tool resource that records its opens and closes in a shared log."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    async def open(self) -> None:
        self.log.append(f"open {self.name}")

    async def aclose(self) -> None:
        self.log.append(f"close {self.name}")


class _OpenedTool:
    def __init__(self, name: str, resource: _Resource) -> None:
        self._resource = resource
        self.spec = ToolSpec(name=name)

    def resource(self) -> _Resource:
        return self._resource

    async def run(self, input_json: str, ctx: ToolContext) -> ToolOutput:
        return ToolOutput.text("ok")


async def test_host_opens_tool_resources_once_in_order_and_closes_in_reverse() -> None:
    """Tools sharing a resource open it once; resources close in reverse order,
    also when the body raises.
    """
    log: list[str] = []
    first, second = _Resource("a", log), _Resource("b", log)
    one = Agent(
        name="one",
        model="m",
        tools=[_OpenedTool("t1", first), _OpenedTool("t2", first)],
    )
    two = Agent(
        name="two",
        model="m",
        tools=[_OpenedTool("t3", second), _OpenedTool("t4", first)],
    )
    host = AgentHost([one, two], lambda _a: ScriptedModel([]))
    assert host.tool_resources() == (first, second)
    seen: list[str] = []

    async def body() -> None:
        async with host.tools_open():
            seen.extend(log)
            raise RuntimeError("body failed")

    with pytest.raises(RuntimeError, match="body failed"):
        await body()
    assert seen == ["open a", "open b"]
    assert log == ["open a", "open b", "close b", "close a"]
