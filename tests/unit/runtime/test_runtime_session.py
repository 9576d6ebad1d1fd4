"""Session API, filters and subscriptions: contract §3, §9.1 #16, §9.2 #20/#28, §9.7
#76-80.
"""

from __future__ import annotations

from uuid import uuid4

import pytest

from turnstream.content import TextChunk
from turnstream.errors import SessionError, SubscriptionLossError
from turnstream.events import (
    Agency,
    Header,
    InputQueued,
    LoopIdle,
    LoopStarted,
    TokenDelta,
    TurnDone,
    TurnInterrupted,
    TurnStarted,
)
from turnstream.ids import LoopId
from turnstream.memory import InMemoryHub, embedded_session
from turnstream.runtime import EventFilter, LoopConfig, LoopScope, Session, Subscription
from turnstream.testing import (
    FixedClock,
    Pause,
    ScriptedModel,
    SequentialIds,
    open_rig,
    text_step,
)


def delta(loop_id: LoopId) -> TokenDelta:
    return TokenDelta(
        header=Header(session_id=uuid4(), loop_id=loop_id, turn_id=uuid4()),
        turn_index=1,
        chunk=TextChunk(text="x"),
    )


def idle(loop_id: LoopId) -> LoopIdle:
    return LoopIdle(
        header=Header(event_id=uuid4(), session_id=uuid4(), loop_id=loop_id)
    )


@pytest.mark.parametrize(
    ("event_filter", "ephemeral", "enduring"),
    [
        pytest.param(
            EventFilter(), False, False, id="zero-filter-matches-no-loop-event"
        ),
        pytest.param(EventFilter.everything(), True, True, id="everything"),
        pytest.param(
            EventFilter(
                ephemeral=LoopScope.only(LoopId(uuid4())), enduring=LoopScope.every()
            ),
            False,
            True,
            id="enduring-all-ephemeral-other-loop",
        ),
        pytest.param(
            EventFilter(ephemeral=LoopScope.every(), enduring=LoopScope.only()),
            True,
            False,
            id="empty-set-matches-nothing",
        ),
    ],
)
def test_should_deliver(
    event_filter: EventFilter, ephemeral: bool, enduring: bool
) -> None:
    """Contract 9.1 #16 TestShouldDeliver/TestLoopScopeMatches: independent per-class
    loop scopes.
    """
    loop_id = LoopId(uuid4())
    assert event_filter.should_deliver(delta(loop_id)) is ephemeral
    assert event_filter.should_deliver(idle(loop_id)) is enduring


async def test_ephemeral_overflow_drops() -> None:
    """Contract 9.2 #20 TestEphemeralOverflowDrops: a full buffer drops ephemeral events
    for that subscriber only.
    """
    hub = InMemoryHub()
    loop_id = LoopId(uuid4())
    slow = hub.subscribe(EventFilter.everything(), capacity=2)
    fast = hub.subscribe(EventFilter.everything(), capacity=10)
    for _ in range(5):
        await hub.publish(delta(loop_id))
    assert len(slow.poll()) == 2
    assert slow.dropped == 3
    assert slow.err is None
    assert len(fast.poll()) == 5


async def test_enduring_overflow_fails_subscription() -> None:
    """Contract 9.2 #20 TestEnduringOverflowFailsSubscription: enduring overflow closes
    that subscription with a loss error.
    """
    hub = InMemoryHub()
    loop_id = LoopId(uuid4())
    slow = hub.subscribe(EventFilter.everything(), capacity=1)
    await hub.deliver([idle(loop_id), idle(loop_id)])
    assert isinstance(slow.err, SubscriptionLossError)
    assert isinstance(await slow.__anext__(), LoopIdle)  # buffered events drain first
    with pytest.raises(SubscriptionLossError):
        await slow.__anext__()
    await hub.deliver([idle(loop_id)])  # detached: publishers never see it
    slow.close()
    assert isinstance(slow.err, SubscriptionLossError)  # first terminal wins


async def test_subscription_close() -> None:
    """Contract 9.2 #28 TestEventSubscriptionClose: close is idempotent, ends iteration,
    leaves err None.
    """
    hub = InMemoryHub()
    sub = hub.subscribe(EventFilter.everything())
    await hub.deliver([idle(LoopId(uuid4()))])
    sub.close()
    sub.close()
    assert sub.err is None
    with pytest.raises(StopAsyncIteration):
        await sub.__anext__()


async def test_hub_close_drains_then_ends() -> None:
    """Session shutdown ends subscriptions after their buffered events (turnstream: no
    SessionStopped event).
    """
    hub = InMemoryHub()
    sub = hub.subscribe(EventFilter.everything())
    await hub.deliver([idle(LoopId(uuid4()))])
    hub.close()
    assert [type(e).__name__ async for e in sub] == ["LoopIdle"]
    assert hub.subscribe(EventFilter.everything()).poll() == []


async def test_end_to_end_quiescence() -> None:
    """Contract 9.7 #76 TestEndToEndQuiescence (LoopIdle form): TurnStarted … TurnDone →
    LoopIdle; wait_idle returns.
    """
    async with open_rig(text_step("x")) as rig:
        await rig.submit("a")
        await rig.idle()
        assert isinstance(rig.events[-1], LoopIdle)
        assert isinstance(rig.events[-2], TurnDone)


async def test_submit_fire_and_forget() -> None:
    """Contract 9.7 #78 TestSubmitFireAndForget: submit returns the id before the turn
    starts; the outcome is an event.
    """
    pause = Pause()
    async with open_rig([pause, *text_step("x")]) as rig:
        cmd = await rig.submit("a")
        assert rig.recorder.of_type(TurnStarted) == []
        started = await rig.recorder.wait_for_type(TurnStarted)
        assert started.reply_to() == cmd
        pause.release()
        await rig.idle()


async def test_submit_follows_active_loop_and_errors() -> None:
    """Contract 9.7 #78 TestSubmitFollowsActiveLoop: submit targets the active loop;
    unknown loops and closed sessions raise.
    """
    model_a = ScriptedModel([text_step("from a")])
    model_b = ScriptedModel([text_step("from b")])
    session = embedded_session(clock=FixedClock(), ids=SequentialIds())
    async with session:
        sub = session.subscribe_events(EventFilter.everything())
        a = await session.create_loop(LoopConfig(model="a"), model_a)
        b = await session.create_loop(LoopConfig(model="b"), model_b, activate=True)
        assert session.active_loop == b
        await session.submit("hi")
        await session.wait_idle()
        assert len(model_b.requests) == 1
        assert model_a.requests == []
        with pytest.raises(SessionError) as unknown:
            await session.submit_to_loop(LoopId(uuid4()), "x")
        assert unknown.value.reason == "loop_not_found"
        assert {e.header.loop_id for e in sub.poll() if isinstance(e, LoopStarted)} == {
            a,
            b,
        }
    with pytest.raises(SessionError) as closing:
        await session.submit("late")
    assert closing.value.reason == "session_closing"


async def test_loop_started_published_on_new_loop_and_no_replay() -> None:
    """Contract 9.7 #79 TestLoopStartedPublishedOnNewLoop: a subscriber sees only what
    happens after it attached.
    """
    session = embedded_session(clock=FixedClock(), ids=SequentialIds())
    async with session:
        early = session.subscribe_events(EventFilter.everything())
        loop_id = await session.create_loop(
            LoopConfig(model="m", agent_name="ag"), ScriptedModel()
        )
        late = session.subscribe_events(EventFilter.everything())
        started = early.poll()
        assert [type(e).__name__ for e in started] == ["LoopStarted"]
        assert started[0].header.loop_id == loop_id
        assert started[0].header.agent_name == "ag"
        assert late.poll() == []


async def test_shutdown_stops_session_and_wait_idle() -> None:
    """Contract 9.7 #79 TestShutdownStopsSessionAndWaitIdle: after shutdown, wait_idle
    returns and subscriptions end.
    """
    session = embedded_session(clock=FixedClock(), ids=SequentialIds())
    async with session:
        sub = session.subscribe_events(EventFilter.everything())
        await session.create_loop(LoopConfig(model="m"), ScriptedModel())
        await session.shutdown()
        await session.wait_idle()
        assert [type(e).__name__ async for e in sub] == ["LoopStarted"]


async def test_idle_interrupt_fail_quiet() -> None:
    """Contract 9.7 #80 TestIdleInterruptFailQuiet: interrupting idle loops appends
    nothing and returns false.
    """
    async with open_rig() as rig:
        before = rig.journal_events()
        assert await rig.session.interrupt() is False
        assert await rig.session.interrupt(rig.loop_id) is False
        assert rig.journal_events() == before


async def test_session_interrupt_concurrent_fanout() -> None:
    """Contract 9.7 #80 TestSessionInterruptConcurrentFanout: one interrupt cancels the
    running turn of every loop.
    """
    pauses = [Pause(), Pause()]
    session = embedded_session(clock=FixedClock(), ids=SequentialIds())
    async with session:
        sub = session.subscribe_events(EventFilter.everything())
        loops = [
            await session.create_loop(LoopConfig(model="m"), ScriptedModel([[p]]))
            for p in pauses
        ]
        for loop_id in loops:
            await session.submit_to_loop(loop_id, "go")
        for pause in pauses:
            await pause.wait_reached()
        idle_loop = await session.create_loop(LoopConfig(model="m"), ScriptedModel())
        assert idle_loop not in loops
        assert await session.interrupt() is True
        await session.wait_idle()
        interrupted = [
            e.header.loop_id for e in sub.poll() if isinstance(e, TurnInterrupted)
        ]
        assert sorted(map(str, interrupted)) == sorted(map(str, loops))


async def test_interrupt_retains_user_input_and_flushes_machine_input() -> None:
    """Contract 9.7 #80
    TestInterruptRetainsActiveTargetUserInputAndFlushesMachineInput.
    """
    pause = Pause()
    async with open_rig([pause], text_step("kept")) as rig:
        await rig.submit("a")
        await pause.wait_reached()
        user = await rig.submit("u")
        machine = await rig.submit("m", agency=Agency.MACHINE)
        await rig.recorder.wait_for_type(InputQueued, count=2)
        await rig.session.interrupt()
        await rig.recorder.wait_for_type(TurnDone)
        started = rig.recorder.of_type(TurnStarted)
        assert [s.reply_to() for s in started] == [started[0].reply_to(), user]
        assert machine not in [s.reply_to() for s in started]


async def test_wait_idle_covers_commands_already_sent() -> None:
    """wait_idle returns only after every earlier command is handled (no race with a
    just-sent submit).
    """
    async with open_rig(text_step("x")) as rig:
        await rig.submit("a")
        await rig.idle()  # not "already idle": the submit was handled first
        assert rig.recorder.of_type(TurnDone)


def test_local_session_satisfies_the_session_protocol() -> None:
    """The Session protocol is the surface LocalSession offers (the Kafka client will
    implement it too).
    """
    session: Session = embedded_session()
    assert isinstance(session.session_id, type(uuid4()))


async def test_subscription_next_with_timeout() -> None:
    """Subscription.next waits a bounded time."""
    sub = Subscription(EventFilter.everything(), capacity=4)
    with pytest.raises(TimeoutError):
        await sub.next(0.01)
    sub.offer(idle(LoopId(uuid4())))
    assert isinstance(await sub.next(1), LoopIdle)
    with pytest.raises(ValueError, match="capacity"):
        Subscription(EventFilter(), capacity=0)
