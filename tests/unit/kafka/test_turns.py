"""The ``Turn`` handle's bookkeeping, without a broker.

A fake session feeds the live subscription and the journal by hand: the answer is
matched by ``reply_to()``, the turn by ``header.turn_id``; journal and live copies
of an event count once; a subscription that fell behind hands over to the journal;
``follow`` finds an outcome already committed.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from uuid import UUID, uuid4

import pytest

from turnstream.content import AIMessage, TextBlock, TextChunk, UserMessage
from turnstream.errors import SessionError
from turnstream.events import (
    AnyEvent,
    Cause,
    EnduringEvent,
    Header,
    RejectReason,
    StepDone,
    TokenDelta,
    TurnDone,
    TurnFoldedInto,
    TurnRejected,
    TurnStarted,
)
from turnstream.ids import CommandId, LoopId
from turnstream.kafka.client.turns import Turn, TurnStatus
from turnstream.kafka.reader import JournalEntry
from turnstream.runtime.subscription import EventFilter, Subscription

LOOP = LoopId(uuid4())


class FakeSession:
    def __init__(self, capacity: int = 100) -> None:
        self.subscriptions: list[Subscription] = []
        self.journal: list[EnduringEvent] = []
        self.capacity = capacity
        self.reads = 0

    def subscribe_events(self, event_filter: EventFilter) -> Subscription:
        subscription = Subscription(event_filter, self.capacity)
        self.subscriptions.append(subscription)
        return subscription

    async def replay_entries(
        self, loop_id: UUID, *, from_: int = 0
    ) -> list[JournalEntry]:
        self.reads += 1
        return [
            JournalEntry(offset, LOOP, event)
            for offset, event in enumerate(self.journal)
            if offset >= from_
        ]

    def commit(self, event: EnduringEvent, *, live: bool = True) -> None:
        self.journal.append(event)
        if live:
            for subscription in self.subscriptions:
                subscription.offer(event)


def _header(turn: UUID | None = None, command: UUID | None = None) -> Header:
    return Header(
        event_id=uuid4(),
        session_id=LOOP,
        loop_id=LOOP,
        turn_id=turn,
        created_at=datetime.now(UTC),
        cause=None if command is None else Cause(command_id=command),
    )


def _started(turn: UUID, command: UUID, index: int = 1) -> TurnStarted:
    message = UserMessage(blocks=(TextBlock(text="hi"),))
    return TurnStarted(header=_header(turn, command), turn_index=index, message=message)


def _done(turn: UUID, text: str, index: int = 1) -> TurnDone:
    message = AIMessage(blocks=(TextBlock(text=text),))
    return TurnDone(header=_header(turn), turn_index=index, message=message)


def _step(turn: UUID) -> StepDone:
    return StepDone(
        header=_header(turn), messages=(AIMessage(blocks=(TextBlock(text="s"),)),)
    )


def _delta(turn: UUID, text: str) -> TokenDelta:
    return TokenDelta(header=_header(turn), turn_index=1, chunk=TextChunk(text=text))


def _turn(
    session: FakeSession,
    command: UUID,
    *,
    from_journal: bool = False,
    tokens: bool = False,
) -> Turn:
    turn = Turn(session, LOOP, tokens=tokens, resync=0.05)  # type: ignore[arg-type]
    turn.bind(CommandId(command), from_journal=from_journal)
    return turn


async def test_folded_input_ends_with_the_running_turns_terminal() -> None:
    session = FakeSession()
    mine, other, running = uuid4(), uuid4(), uuid4()
    turn = _turn(session, mine)
    session.commit(_started(running, other))  # someone else's turn: not ours
    session.commit(_step(running))  # before our answer: not ours either
    fold = TurnFoldedInto(
        header=_header(running, mine),
        turn_index=1,
        message=UserMessage(blocks=(TextBlock(text="also"),)),
    )
    session.commit(fold)
    session.commit(_step(running))
    session.commit(_done(running, "both"))
    async with asyncio.timeout(5):
        outcome = await turn.outcome()
    assert outcome.status is TurnStatus.DONE
    assert outcome.folded
    assert outcome.turn_id == running
    assert outcome.text == "both"
    assert [e.type_name for e in outcome.events] == [
        "TurnFoldedInto",
        "StepDone",
        "TurnDone",
    ]


async def test_deltas_that_overtake_their_turn_started_are_kept() -> None:
    """Deltas come from another topic than the journal and may be read before
    the ``TurnStarted`` they follow; they belong to the turn all the same."""
    session = FakeSession()
    mine, turn_id, other = uuid4(), uuid4(), uuid4()
    turn = _turn(session, mine, tokens=True)
    live = session.subscriptions[0]
    live.offer(_delta(other, "not ours"))  # an earlier turn's late delta
    live.offer(_delta(turn_id, "Hel"))
    live.offer(_delta(turn_id, "lo"))
    session.commit(_started(turn_id, mine))
    live.offer(_delta(turn_id, "!"))
    session.commit(_step(turn_id))
    session.commit(_done(turn_id, "Hello!"))
    async with asyncio.timeout(5):
        seen = [event async for event in turn]
    assert [e.type_name for e in seen] == [
        "TurnStarted",
        "TokenDelta",
        "TokenDelta",
        "TokenDelta",
        "StepDone",
        "TurnDone",
    ]
    chunks = [e.chunk for e in seen if isinstance(e, TokenDelta)]
    assert [c.text for c in chunks if isinstance(c, TextChunk)] == ["Hel", "lo", "!"]


async def test_rejected_input_has_no_turn() -> None:
    session = FakeSession()
    mine = uuid4()
    turn = _turn(session, mine)
    rejected = TurnRejected(header=_header(None, mine), reason=RejectReason.QUEUE_FULL)
    session.commit(rejected)
    async with asyncio.timeout(5):
        outcome = await turn.outcome()
    assert outcome.status is TurnStatus.REJECTED
    assert outcome.turn_id is None
    assert outcome.turn_index is None
    assert outcome.terminal is None


async def test_journal_and_live_copies_count_once_and_loss_falls_back() -> None:
    """A lost subscription hands over to the journal; nothing is seen twice."""
    session = FakeSession(capacity=2)
    mine, running = uuid4(), uuid4()
    turn = _turn(session, mine)
    session.commit(_started(running, mine))
    session.commit(_step(running))
    session.commit(_step(running))  # overflows the two-slot buffer: LOST
    session.commit(_done(running, "end"), live=False)
    async with asyncio.timeout(5):
        outcome = await turn.outcome()
    assert outcome.status is TurnStatus.DONE
    assert [e.type_name for e in outcome.events] == [
        "TurnStarted",
        "StepDone",
        "StepDone",
        "TurnDone",
    ]
    assert session.reads >= 1


async def test_quiet_live_feed_reads_the_journal() -> None:
    """An event the live feed never delivers is found in the journal on resync."""
    session = FakeSession()
    mine, running = uuid4(), uuid4()
    turn = _turn(session, mine)
    session.commit(_started(running, mine))
    session.commit(_done(running, "end"), live=False)
    async with asyncio.timeout(5):
        outcome = await turn.outcome()
    assert outcome.text == "end"


async def test_follow_reads_an_outcome_committed_before_it() -> None:
    session = FakeSession()
    mine, running = uuid4(), uuid4()
    session.commit(_started(running, mine))
    session.commit(_done(running, "old"))
    turn = _turn(session, mine, from_journal=True)
    seen: list[AnyEvent] = [event async for event in turn]
    assert [e.type_name for e in seen] == ["TurnStarted", "TurnDone"]
    assert (await turn.outcome()).text == "old"


async def test_a_closed_session_ends_the_wait_with_session_error() -> None:
    session = FakeSession()
    turn = _turn(session, uuid4())
    session.subscriptions[0].end()  # what KafkaSession.close does
    with pytest.raises(SessionError):
        await turn.outcome()
