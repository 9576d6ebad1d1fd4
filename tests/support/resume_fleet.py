"""Two actors of one group around a held turn, for the resume and effects tests.

The kill -9, drain and Kafka-effects tests all run one partition with an owner
and a standby (6 s session timeout, 20 s commit deadline) hosting an agent of a
support module, hold the turn at a step, stop the owner and read what the
journal says of the loop. This module is their shared set-up; each test keeps
its own story and assertions.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

from tests.support.actors import ActorFleet, ActorProcess
from tests.support.eventually import assert_eventually
from tests.support.kafka_harness import (
    apply_topic_set,
    connect,
    delete_topic_set,
    read_all,
    unique_prefix,
)

from turnstream.content import ToolResultMessage, text_of
from turnstream.events import EnduringEvent, StepDone
from turnstream.kafka.client.session import KafkaSession
from turnstream.kafka.topology import TopicNames

__all__ = [
    "ResumeTopics",
    "held_at_step",
    "ledger_column",
    "loop_events",
    "owner_and_standby",
    "resume_fleet",
    "resume_topics",
    "tool_results",
    "turn_ended",
]


@dataclass(frozen=True)
class ResumeTopics:
    """A one-partition topic set of the test's own, and a client session on it."""

    prefix: str
    names: TopicNames
    session: KafkaSession


@contextlib.asynccontextmanager
async def resume_topics(bootstrap: str, stem: str) -> AsyncIterator[ResumeTopics]:
    """Create the topic set under a fresh prefix; close and delete it afterwards."""
    prefix = unique_prefix(stem)
    names = await apply_topic_set(bootstrap, prefix, partitions=1)
    session = await connect(bootstrap, names)
    try:
        yield ResumeTopics(prefix, names, session)
    finally:
        await session.close()
        await delete_topic_set(bootstrap, prefix)


@contextlib.asynccontextmanager
async def resume_fleet(
    bootstrap: str, prefix: str, *extra: str
) -> AsyncIterator[ActorFleet]:
    """A fleet: 6 s session timeout, 20 s commit deadline, then ``extra`` flags."""
    fleet = ActorFleet(
        bootstrap,
        prefix,
        extra=("--session-timeout-ms", "6000", "--commit-deadline", "20", *extra),
    )
    try:
        yield fleet
    finally:
        await fleet.close()


async def owner_and_standby(
    fleet: ActorFleet, agent: str, env: Mapping[str, str]
) -> tuple[ActorProcess, ActorProcess]:
    """Two actors of one group hosting ``agent``: the owner, then the standby."""
    first = await fleet.spawn("--agent", agent, env=dict(env))

    async def ready() -> None:
        assert first.partitions == {0}, fleet.tails()

    await assert_eventually(ready, timeout=90, message="first actor not ready")
    second = await fleet.spawn("--agent", agent, env=dict(env))

    async def split() -> tuple[ActorProcess, ActorProcess]:
        fleet.note_exits()
        assert fleet.self_exits == [], fleet.self_exits
        owned = sorted(
            (first, second), key=lambda a: a.partitions is None or not a.partitions
        )
        assert [a.partitions for a in owned] == [{0}, set()], fleet.tails()
        return owned[0], owned[1]

    return await assert_eventually(
        split, timeout=90, message="the second actor never joined the group"
    )


async def loop_events(
    bootstrap: str, topics: TopicNames, loop_id: UUID
) -> list[EnduringEvent]:
    """The loop's committed events, in journal order (one partition)."""
    entries = await read_all(bootstrap, topics, 1)
    return [e.event for e in entries if e.loop_id == loop_id]


async def held_at_step(
    fleet: ActorFleet,
    bootstrap: str,
    topics: TopicNames,
    loop_id: UUID,
    ledger: Path,
    *,
    step: int,
) -> None:
    """Wait until the agent holds in step ``step``, the steps before it committed."""

    async def held() -> None:
        assert (ledger / "held").exists(), fleet.tails()
        events = await loop_events(bootstrap, topics, loop_id)
        assert sum(isinstance(e, StepDone) for e in events) == step - 1

    await assert_eventually(
        held, timeout=60, interval=0.2, message=f"step {step} not held"
    )


async def turn_ended(
    bootstrap: str, topics: TopicNames, loop_id: UUID, fleet: ActorFleet
) -> list[EnduringEvent]:
    """The loop's events once its turn has a terminal event."""

    async def ended() -> list[EnduringEvent]:
        events = await loop_events(bootstrap, topics, loop_id)
        assert any(e.ends_turn() for e in events), fleet.tails()
        return events

    return await assert_eventually(
        ended, timeout=120, interval=0.5, message="the held turn never ended"
    )


def ledger_column(ledger: Path, column: int = 0) -> list[str]:
    """One column of the agent's ledger file, a line per tool run, in order."""
    lines = (ledger / "ledger").read_text().splitlines()
    return [line.split()[column] for line in lines]


def tool_results(events: list[EnduringEvent]) -> list[str]:
    """The text of every tool result the committed steps carry, in order."""
    return [
        text_of(m.blocks)
        for e in events
        if isinstance(e, StepDone)
        for m in e.messages[1:]
        if isinstance(m, ToolResultMessage)
    ]
