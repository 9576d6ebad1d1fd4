"""Cursors on what a ``Turn`` and a live subscription yield, without a broker.

A fake session keeps one partition's two logs (journal and deltas) and a live
reader the test moves record by record, in the order it chooses, offering each
record with the cursor the session's reader computes. ``rest(cursor)`` is what
``attach(after=cursor)`` reads: every record at or after the cursor's offsets.
At every point of a turn, what the handle yielded so far and the rest after its
cursor must be disjoint and together hold the whole turn: no gap, no duplicate.
The orders covered are the ones a real client meets: deltas read before their
``TurnStarted``, an event found in the journal before the live reader got it,
and ``follow`` of a turn already running.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Literal
from uuid import UUID, uuid4

from turnstream.content import AIMessage, TextBlock, TextChunk, UserMessage
from turnstream.events import (
    AnyEvent,
    Cause,
    EnduringEvent,
    EphemeralEvent,
    Header,
    StepDone,
    TokenDelta,
    TurnDone,
    TurnStarted,
)
from turnstream.ids import CommandId, LoopId
from turnstream.kafka.client.cursor import Cursor
from turnstream.kafka.client.live import CursorSubscription, LivePositions, cursor_at
from turnstream.kafka.client.turns import Turn
from turnstream.kafka.reader import JournalEntry
from turnstream.runtime.subscription import EventFilter, LoopScope

LOOP = LoopId(uuid4())


class LogSession:
    """One partition's journal and deltas logs and a hand-moved live reader."""

    def __init__(self) -> None:
        self.events: list[AnyEvent] = []
        self.deltas: list[AnyEvent] = []
        self.read_to = {"e": 0, "d": 0}
        self.positions = LivePositions(1)
        self.positions.start("e", 0, 0)
        self.positions.start("d", 0, 0)
        self.subscriptions: list[CursorSubscription] = []

    def subscribe_events(self, event_filter: EventFilter) -> CursorSubscription:
        subscription = CursorSubscription(event_filter, 100, self.positions)
        self.subscriptions.append(subscription)
        return subscription

    async def replay_entries(
        self, loop_id: UUID, *, from_: int = 0
    ) -> list[JournalEntry]:
        return [
            JournalEntry(offset, LOOP, event)  # type: ignore[arg-type]
            for offset, event in enumerate(self.events)
            if offset >= from_
        ]

    def write(self, event: AnyEvent) -> None:
        (self.events if event.is_enduring() else self.deltas).append(event)

    def read(self, kind: Literal["e", "d"], count: int = 1) -> None:
        """The live reader reads the next ``count`` records of one topic."""
        log = self.events if kind == "e" else self.deltas
        for _ in range(count):
            offset = self.read_to[kind]
            self.read_to[kind] = offset + 1
            self.positions.read(kind, 0, offset)
            cursor = self.positions.here(0, kind)
            for subscription in self.subscriptions:
                subscription.offer(log[offset], cursor)

    def rest(self, cursor: Cursor) -> list[UUID]:
        """What ``attach(after=cursor)`` yields (by event id)."""
        return [_id(e) for e in self.events[cursor.events :]] + [
            _id(e) for e in self.deltas[cursor.deltas :]
        ]


def _id(event: AnyEvent) -> UUID:
    assert event.header.event_id is not None
    return event.header.event_id


def _header(turn: UUID | None, command: UUID | None = None) -> Header:
    return Header(
        event_id=uuid4(),
        session_id=LOOP,
        loop_id=LOOP,
        turn_id=turn,
        created_at=datetime.now(UTC),
        cause=None if command is None else Cause(command_id=command),
    )


def _started(turn: UUID, command: UUID) -> EnduringEvent:
    message = UserMessage(blocks=(TextBlock(text="hi"),))
    return TurnStarted(header=_header(turn, command), turn_index=1, message=message)


def _step(turn: UUID) -> EnduringEvent:
    return StepDone(
        header=_header(turn), messages=(AIMessage(blocks=(TextBlock(text="s"),)),)
    )


def _done(turn: UUID) -> EnduringEvent:
    message = AIMessage(blocks=(TextBlock(text="end"),))
    return TurnDone(header=_header(turn), turn_index=1, message=message)


def _delta(turn: UUID, text: str) -> EphemeralEvent:
    return TokenDelta(header=_header(turn), turn_index=1, chunk=TextChunk(text=text))


async def _next(turn: Turn) -> AnyEvent:
    async with asyncio.timeout(5):
        return await turn.__anext__()


def _assert_cuts(
    session: LogSession,
    seen: list[AnyEvent],
    cursors: list[Cursor | None],
    whole: set[UUID],
) -> None:
    """At each cut: yielded and rest are disjoint and together hold ``whole``."""
    for k, cursor in enumerate(cursors):
        assert cursor is not None
        before = [_id(e) for e in seen[:k]]
        rest = session.rest(cursor)
        assert not set(before) & set(rest), (k, cursor)
        assert whole <= set(before) | set(rest), (k, cursor)


async def test_turn_cursor_keeps_deltas_read_before_their_turn_started() -> None:
    """Early deltas yielded after ``TurnStarted`` are still after its cursor."""
    session = LogSession()
    mine, turn_id, earlier = uuid4(), uuid4(), uuid4()
    turn = Turn(session, LOOP, tokens=True, resync=5)  # type: ignore[arg-type]
    turn.bind(CommandId(mine), from_journal=False)
    cursors = [turn.cursor]
    assert cursors[0] == Cursor(0, 0, 0)
    ours = [
        _delta(earlier, "late"),
        _started(turn_id, mine),
        _delta(turn_id, "Hel"),
        _delta(turn_id, "lo"),
        _delta(turn_id, "!"),
        _step(turn_id),
        _done(turn_id),
    ]
    for event in ours:
        session.write(event)
    session.read("d", 3)  # the late one and two of ours, before TurnStarted
    session.read("e")
    session.read("d")
    session.read("e", 2)
    seen = []
    for _ in range(6):
        seen.append(await _next(turn))
        cursors.append(turn.cursor)
    assert [e.type_name for e in seen] == [
        "TurnStarted",
        "TokenDelta",
        "TokenDelta",
        "TokenDelta",
        "StepDone",
        "TurnDone",
    ]
    _assert_cuts(session, seen, cursors, {_id(e) for e in ours[1:]})
    assert cursors[1] == Cursor(0, 1, 1, "e")  # before "Hel", after TurnStarted
    assert cursors[-1] == Cursor(0, 3, 4, "e")


async def test_turn_cursor_after_an_event_found_in_the_journal_first() -> None:
    """The journal offset stays ahead when the live reader delivers it later."""
    session = LogSession()
    mine, turn_id = uuid4(), uuid4()
    turn = Turn(session, LOOP, tokens=True, resync=0.05)  # type: ignore[arg-type]
    turn.bind(CommandId(mine), from_journal=False)
    ours = [
        _started(turn_id, mine),
        _delta(turn_id, "a"),
        _delta(turn_id, "b"),
        _step(turn_id),
        _done(turn_id),
    ]
    for event in ours[:-1]:
        session.write(event)
    session.read("e")
    session.read("d")
    seen: list[AnyEvent] = []
    cursors = [turn.cursor]

    async def step() -> AnyEvent:
        seen.append(await _next(turn))
        cursors.append(turn.cursor)
        return seen[-1]

    await step()
    await step()
    assert (await step()).type_name == "StepDone"  # live is quiet: the journal's
    session.write(ours[-1])
    session.read("d")  # the delta the live reader had not got yet
    session.read("e", 2)  # StepDone again (a duplicate, skipped), TurnDone
    await step()
    await step()
    assert [e.type_name for e in seen] == [
        "TurnStarted",
        "TokenDelta",
        "StepDone",
        "TokenDelta",
        "TurnDone",
    ]
    _assert_cuts(session, seen, cursors, {_id(e) for e in ours})
    assert cursors[3] == Cursor(0, 2, 1, "e")  # "b" is still after it


async def test_follow_cursor_starts_at_the_journal_start() -> None:
    """``follow`` yields the turn from the journal: its cursor begins there."""
    session = LogSession()
    mine, turn_id = uuid4(), uuid4()
    early = [_started(turn_id, mine), _delta(turn_id, "gone")]
    for event in early:
        session.write(event)
    session.read("e")
    session.read("d")  # streamed before anyone followed it
    turn = Turn(session, LOOP, tokens=True, resync=0.05)  # type: ignore[arg-type]
    turn.bind(CommandId(mine), from_journal=True)
    assert turn.cursor == Cursor(0, 0, 1)
    late = [_delta(turn_id, "now"), _step(turn_id), _done(turn_id)]
    cursors = [turn.cursor]
    seen = [await _next(turn)]  # TurnStarted, from the journal
    cursors.append(turn.cursor)
    session.write(late[0])
    session.read("d")
    seen.append(await _next(turn))
    cursors.append(turn.cursor)
    session.write(late[1])
    session.write(late[2])
    session.read("e", 2)
    for _ in range(2):
        seen.append(await _next(turn))
        cursors.append(turn.cursor)
    assert [e.type_name for e in seen] == [
        "TurnStarted",
        "TokenDelta",
        "StepDone",
        "TurnDone",
    ]
    assert cursors[1] == Cursor(0, 1, 1, "e")
    # What it yields, with the rest after each cursor, is the turn but the
    # delta streamed before it began following (no handle could yield it).
    _assert_cuts(session, seen, cursors, {_id(e) for e in [early[0], *late]})


async def test_subscription_cursor_for_a_loop_is_its_start_until_it_takes_one() -> None:
    """A subscription's cursor is where it read to, not where the reader is."""
    session = LogSession()
    other = LoopId(uuid4())
    session.write(_started(uuid4(), uuid4()))
    session.read("e")
    subscription = session.subscribe_events(
        EventFilter(enduring=LoopScope.only(LOOP), ephemeral=LoopScope.only(LOOP))
    )
    assert subscription.cursor is None
    assert subscription.cursor_for(LOOP) == Cursor(0, 1, 0)
    assert subscription.cursor_for(other) == Cursor(0, 1, 0)  # one partition
    for event in (_delta(uuid4(), "x"), _step(uuid4()), _delta(uuid4(), "y")):
        session.write(event)
    session.read("d")
    session.read("e")
    session.read("d")
    assert subscription.cursor_for(LOOP) == Cursor(0, 1, 0)  # none taken yet
    first = await subscription.next_positioned(1)
    assert cursor_at(first[1]) == Cursor(0, 1, 1, "d")
    assert subscription.cursor == subscription.cursor_for(LOOP) == cursor_at(first[1])
    assert [cursor_at(p) for _, p in subscription.poll_positioned()] == [
        Cursor(0, 2, 1, "e"),
        Cursor(0, 2, 2, "d"),
    ]
    assert subscription.cursor == Cursor(0, 2, 2, "d")


async def test_turn_without_tokens_leaves_every_token_after_its_cursor() -> None:
    """A ``Turn`` not asked for tokens took none: ``attach`` yields them all."""
    session = LogSession()
    mine, turn_id = uuid4(), uuid4()
    turn = Turn(session, LOOP, tokens=False, resync=5)  # type: ignore[arg-type]
    turn.bind(CommandId(mine), from_journal=False)
    ours = [
        _started(turn_id, mine),
        _delta(turn_id, "a"),
        _delta(turn_id, "b"),
        _step(turn_id),
        _done(turn_id),
    ]
    for event in ours:
        session.write(event)
    session.read("d", 2)  # both tokens before TurnStarted
    session.read("e", 3)
    cursors = [turn.cursor]
    seen = []
    for _ in range(3):
        seen.append(await _next(turn))
        cursors.append(turn.cursor)
    assert [e.type_name for e in seen] == ["TurnStarted", "StepDone", "TurnDone"]
    _assert_cuts(session, seen, cursors, {_id(e) for e in ours})
    assert cursors[-1] == Cursor(0, 3, 0, "e")


async def test_subscription_without_a_loops_tokens_keeps_them_after_its_cursor() -> (
    None
):
    """A filter that leaves out a loop's deltas: its cursor does not pass them."""
    session = LogSession()
    subscription = session.subscribe_events(EventFilter(enduring=LoopScope.only(LOOP)))
    events = [_delta(uuid4(), "x"), _step(uuid4())]
    for event in events:
        session.write(event)
    session.read("d")
    session.read("e")
    taken = await subscription.next_positioned(1)
    assert cursor_at(taken[1]) == Cursor(0, 1, 1, "e")  # where the reader was
    assert subscription.cursor == subscription.cursor_for(LOOP) == Cursor(0, 1, 0, "e")
    assert session.rest(Cursor(0, 1, 0)) == [_id(events[0])]
