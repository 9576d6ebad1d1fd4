"""Exactly-once effects of a Kafka-native tool under kill -9, on the real broker.

Two ``python -m turnstream.loop_actor`` processes host
``tests.support.resume_agents`` with ``$RESUME_EFFECT_TOPIC`` set: every
``record`` call stages one record (key: its idempotency key, value: its step's
``n``) through ``ToolContext.stage_record``, then step 3's call holds. The test
kills the owner with SIGKILL while it holds -- after step 3 staged its record,
before its ``StepDone`` committed -- and the standby resumes the turn:

- an idempotent ``record``: step 3 runs again and stages again; the effect
  topic holds, for ``read_committed`` consumers, exactly one record per
  committed step (1-5), each keyed by its call's idempotency key;
- a non-idempotent ``record``: step 3's outcome is unknown and it does not run
  again; its first attempt's staged record is never visible (1, 2, 4, 5).

Every effect record belongs to a committed ``StepDone`` of the turn, and every
committed call that ran has exactly one.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from uuid import UUID, uuid4

import pytest
from tests.support.actors import ActorFleet, ActorProcess
from tests.support.eventually import assert_eventually
from tests.support.kafka import consume_all, create_topic
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    apply_topic_set,
    check_journal,
    collect_garbage,
    collect_garbage_late,
    connect,
    delete_topic_set,
    read_all,
    unique_prefix,
)

from turnstream.content import ToolResultMessage, text_of
from turnstream.events import EnduringEvent, StepDone, TurnDone, TurnResumed
from turnstream.ids import LoopId
from turnstream.kafka.topology import TopicNames
from turnstream.runtime.tools import OUTCOME_UNKNOWN

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(300)]

AGENTS = "tests.support.resume_agents"


@contextlib.asynccontextmanager
async def _fleet(bootstrap: str, prefix: str) -> AsyncIterator[ActorFleet]:
    fleet = ActorFleet(
        bootstrap,
        prefix,
        extra=("--session-timeout-ms", "6000", "--commit-deadline", "20"),
    )
    try:
        yield fleet
    finally:
        await fleet.close()


async def _owner_and_standby(
    fleet: ActorFleet, agent: str, env: dict[str, str]
) -> tuple[ActorProcess, ActorProcess]:
    first = await fleet.spawn("--agent", f"{AGENTS}:{agent}", env=env)

    async def ready() -> None:
        assert first.partitions == {0}, fleet.tails()

    await assert_eventually(ready, timeout=90, message="first actor not ready")
    second = await fleet.spawn("--agent", f"{AGENTS}:{agent}", env=env)

    async def joined() -> None:
        fleet.note_exits()
        assert fleet.self_exits == [], fleet.self_exits
        assert second.partitions == set(), fleet.tails()

    await assert_eventually(joined, timeout=90, message="the standby never joined")
    return first, second


async def _loop_events(
    bootstrap: str, topics: TopicNames, loop_id: UUID
) -> list[EnduringEvent]:
    entries = await read_all(bootstrap, topics, 1)
    return [e.event for e in entries if e.loop_id == loop_id]


async def _killed_between_staging_and_commit(
    kafka_bootstrap: str, tmp_path: Path, agent: str
) -> tuple[list[EnduringEvent], list[tuple[str, str]], list[str]]:
    """Run the turn, kill -9 at step 3's hold; (journal, effects, ledger)."""
    prefix = unique_prefix(f"effects-{agent}")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    effect_topic = f"{prefix}effects"
    await create_topic(kafka_bootstrap, effect_topic, partitions=3)
    session = await connect(kafka_bootstrap, topics)
    env = {
        "RESUME_LEDGER_DIR": str(tmp_path),
        "RESUME_HOLD_AT": "3",
        "RESUME_EFFECT_TOPIC": effect_topic,
    }
    try:
        async with _fleet(kafka_bootstrap, prefix) as fleet:
            owner, _ = await _owner_and_standby(fleet, agent, env)
            loop_id = LoopId(uuid4())
            command = await session.submit("go", loop_id=loop_id)

            async def held() -> None:
                assert (tmp_path / "held").exists(), fleet.tails()
                events = await _loop_events(kafka_bootstrap, topics, loop_id)
                assert sum(isinstance(e, StepDone) for e in events) == 2

            await assert_eventually(held, timeout=60, interval=0.2)
            await fleet.kill(owner)  # step 3 staged its record; nothing committed

            async def ended() -> list[EnduringEvent]:
                events = await _loop_events(kafka_bootstrap, topics, loop_id)
                assert any(e.ends_turn() for e in events), fleet.tails()
                return events

            events = await assert_eventually(ended, timeout=120, interval=0.5)
        check_journal(await read_all(kafka_bootstrap, topics, 1), [command])
        committed = await consume_all(
            kafka_bootstrap, effect_topic, isolation_level="read_committed"
        )
        effects = [
            ((r.key or b"").decode(), (r.value or b"").decode()) for r in committed
        ]
        ledger = (tmp_path / "ledger").read_text().splitlines()
        return events, effects, [line.split()[1] for line in ledger]
    finally:
        await session.close()
        await delete_topic_set(kafka_bootstrap, prefix)


def _committed_calls(events: list[EnduringEvent]) -> list[tuple[str, str]]:
    """(idempotency key, n) of each committed call that ran, from the journal."""
    done = next(e for e in events if isinstance(e, TurnDone))
    calls: list[tuple[str, str]] = []
    index = 0
    for event in events:
        if not isinstance(event, StepDone):
            continue
        for message in event.messages[1:]:
            assert isinstance(message, ToolResultMessage)
            text = text_of(message.blocks)
            if text != OUTCOME_UNKNOWN:
                calls.append(
                    (f"{done.header.turn_id}:{index}:record:0", text.split()[1])
                )
        index += 1
    return calls


async def test_idempotent_effect_is_committed_once_per_step_across_kill_nine(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    events, effects, keys = await _killed_between_staging_and_commit(
        kafka_bootstrap, tmp_path, "continuing_idempotent"
    )
    assert [type(e) for e in events if e.ends_turn()] == [TurnDone]
    assert [r.steps for r in events if isinstance(r, TurnResumed)] == [2]
    assert keys[2] == keys[3]  # step 3 ran twice, staged twice, with one key
    assert sorted(effects, key=lambda e: e[1]) == _committed_calls(events)
    assert sorted(v for _, v in effects) == ["1", "2", "3", "4", "5"]


async def test_an_uncommitted_steps_effect_is_never_visible(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    events, effects, keys = await _killed_between_staging_and_commit(
        kafka_bootstrap, tmp_path, "continuing"
    )
    assert [type(e) for e in events if e.ends_turn()] == [TurnDone]
    assert len(keys) == 5  # step 3 ran (and staged) once, before the kill
    assert sorted(effects, key=lambda e: e[1]) == _committed_calls(events)
    assert sorted(v for _, v in effects) == ["1", "2", "4", "5"]
