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

from pathlib import Path
from uuid import uuid4

import pytest
from tests.support.kafka import consume_all, create_topic
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    check_journal,
    collect_garbage,
    collect_garbage_late,
    read_all,
)
from tests.support.resume_fleet import (
    held_at_step,
    ledger_column,
    owner_and_standby,
    resume_fleet,
    resume_topics,
    turn_ended,
)

from turnstream.content import ToolResultMessage, text_of
from turnstream.events import EnduringEvent, StepDone, TurnDone, TurnResumed
from turnstream.ids import LoopId
from turnstream.runtime.tools import OUTCOME_UNKNOWN

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(300)]

AGENTS = "tests.support.resume_agents"


async def _killed_between_staging_and_commit(
    kafka_bootstrap: str, tmp_path: Path, agent: str
) -> tuple[list[EnduringEvent], list[tuple[str, str]], list[str]]:
    """Run the turn, kill -9 at step 3's hold; (journal, effects, ledger)."""
    async with resume_topics(kafka_bootstrap, f"effects-{agent}") as topics:
        effect_topic = f"{topics.prefix}effects"
        await create_topic(kafka_bootstrap, effect_topic, partitions=3)
        env = {
            "RESUME_LEDGER_DIR": str(tmp_path),
            "RESUME_HOLD_AT": "3",
            "RESUME_EFFECT_TOPIC": effect_topic,
        }
        async with resume_fleet(kafka_bootstrap, topics.prefix) as fleet:
            owner, _ = await owner_and_standby(fleet, f"{AGENTS}:{agent}", env)
            loop_id = LoopId(uuid4())
            command = await topics.session.submit("go", loop_id=loop_id)
            await held_at_step(
                fleet, kafka_bootstrap, topics.names, loop_id, tmp_path, step=3
            )
            await fleet.kill(owner)  # step 3 staged its record; nothing committed
            events = await turn_ended(kafka_bootstrap, topics.names, loop_id, fleet)
        check_journal(await read_all(kafka_bootstrap, topics.names, 1), [command])
        committed = await consume_all(
            kafka_bootstrap, effect_topic, isolation_level="read_committed"
        )
        effects = [
            ((r.key or b"").decode(), (r.value or b"").decode()) for r in committed
        ]
        return events, effects, ledger_column(tmp_path, 1)


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
