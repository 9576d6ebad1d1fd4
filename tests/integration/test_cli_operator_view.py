"""The operator's view on a real broker: `loops list|show` and `dlq tail`.

One topic set (unique prefix, two partitions) gets a finished turn from an
in-process actor and one poison command, dead-lettered by that actor; the
commands then read them as a person would, through the CLI. Content never
shows unless asked for: not the conversation (`loops show` without
`--messages`), never a dead letter's payload.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from uuid import uuid4

import pytest
from aiokafka import AIOKafkaProducer
from tests.support.eventually import assert_eventually
from tests.support.kafka_harness import (
    Models,
    apply_topic_set,
    clients_for,
    connect,
    delete_topic_set,
    running,
    service_for,
    unique_prefix,
)
from typer.testing import CliRunner

from turnstream.cli.main import app
from turnstream.events import TurnDone
from turnstream.ids import LoopId
from turnstream.kafka.client.inspection import read_dead_letter_headers
from turnstream.kafka.records import loop_key
from turnstream.kafka.topology import TopicNames
from turnstream.models import DemoModel

pytestmark = [pytest.mark.kafka]

QUESTION = "hello operator-view-secret-question"
POISON = b"operator-view-secret-payload, not a command"


@dataclass
class Finished:
    prefix: str
    names: TopicNames
    loop_id: LoopId
    turn_id: object
    turn_ends: list[dict[str, object]]


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """In-process CLI runs configure the root logger: put it back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


async def _send_poison(bootstrap: str, topic: str, loop_id: LoopId) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    async with asyncio.timeout(30):
        await producer.start()
    try:
        async with asyncio.timeout(30):
            await producer.send_and_wait(topic, POISON, key=loop_key(loop_id))
    finally:
        await producer.stop()


def _turn_ends(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    keys = ("loop_id", "turn_id", "outcome", "steps")
    return [
        {k: r.__dict__[k] for k in keys}
        for r in caplog.records
        if r.name == "turnstream.kafka.actor.journal" and r.getMessage() == "turn ended"
    ]


@pytest.fixture
async def finished(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> AsyncIterator[Finished]:
    """A loop with one finished turn, and one dead letter."""
    caplog.set_level("INFO", logger="turnstream.kafka.actor.journal")
    prefix = unique_prefix("operator-view")
    names = await apply_topic_set(kafka_bootstrap, prefix, partitions=2)
    loop_id = LoopId(uuid4())
    try:
        await _send_poison(kafka_bootstrap, names.commands, loop_id)
        session = await connect(kafka_bootstrap, names)
        try:
            async with running(
                service_for(
                    kafka_bootstrap,
                    names,
                    group_id=f"{prefix}g",
                    models=Models(default=DemoModel(), tools=()),
                )
            ):
                outcome = await session.submit_and_wait(
                    QUESTION, loop_id=loop_id, timeout=60
                )
                assert isinstance(outcome.terminal, TurnDone)

                async def dead_lettered() -> None:
                    found = await read_dead_letter_headers(
                        clients_for(kafka_bootstrap), names
                    )
                    assert len(found) == 1

                await assert_eventually(dead_lettered, timeout=60)
        finally:
            await session.close()
        yield Finished(
            prefix, names, loop_id, outcome.terminal.header.turn_id, _turn_ends(caplog)
        )
    finally:
        await delete_topic_set(kafka_bootstrap, prefix)


async def _cli(bootstrap: str, prefix: str, *args: str) -> tuple[int, str]:
    result = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        [*args, "--bootstrap", bootstrap, "--topic-prefix", prefix],
        env={"COLUMNS": "400"},
    )
    return result.exit_code, result.output


async def test_loops_list_and_show_print_state_without_content(
    kafka_bootstrap: str, finished: Finished
) -> None:
    """list: one line with turns and status; show: JSON, messages as a count."""
    code, out = await _cli(kafka_bootstrap, finished.prefix, "loops", "list")
    assert code == 0, out
    lines = [line for line in out.splitlines() if str(finished.loop_id) in line]
    assert len(lines) == 1, out
    assert "agent=it  turns=1  idle  updated_at=20" in lines[0]
    assert "1 loop(s) on" in out

    code, out = await _cli(
        kafka_bootstrap, finished.prefix, "loops", "show", str(finished.loop_id)
    )
    assert code == 0, out
    shown = json.loads(out)
    assert shown["loop_id"] == str(finished.loop_id)
    assert shown["turn_index"] == 1
    assert shown["status"] == "idle"
    assert shown["messages"] == 2  # the question and the answer
    assert "operator-view-secret-question" not in out

    code, out = await _cli(
        kafka_bootstrap,
        finished.prefix,
        *("loops", "show", str(finished.loop_id), "--messages"),
    )
    assert code == 0, out
    assert [m["role"] for m in json.loads(out)["messages"]] == ["user", "assistant"]
    assert "operator-view-secret-question" in out

    missing = uuid4()
    code, out = await _cli(
        kafka_bootstrap, finished.prefix, "loops", "show", str(missing)
    )
    assert code == 1, out
    assert f"loop {missing}: state not found on {finished.names.loops}" in " ".join(
        out.split()
    )


async def test_dlq_tail_prints_headers_never_the_payload(
    kafka_bootstrap: str, finished: Finished
) -> None:
    """One line per dead letter: kind, reason, origin topic/partition/offset."""
    code, out = await _cli(kafka_bootstrap, finished.prefix, "dlq", "tail")
    assert code == 0, out
    lines = [line for line in out.splitlines() if "kind=" in line]
    assert len(lines) == 1, out
    line = lines[0]
    assert "kind=undecodable" in line
    assert "reason=" in line
    assert f"topic={finished.names.commands}" in line
    assert "partition=" in line
    assert "offset=0" in line
    assert "operator-view-secret-payload" not in out
    assert "1 of 1 dead letter(s) on" in out


async def test_the_actor_logs_one_line_per_committed_turn_end(
    finished: Finished,
) -> None:
    """The in-process actor's turn: one `turn ended` line, ids and outcome."""
    assert finished.turn_ends == [
        {
            "loop_id": str(finished.loop_id),
            "turn_id": str(finished.turn_id),
            "outcome": "TurnDone",
            "steps": 1,
        }
    ]


async def test_tail_of_a_loop_with_no_events_says_so(
    kafka_bootstrap: str, finished: Finished
) -> None:
    """A loop with nothing in its journal gets a line, not silence."""
    quiet = uuid4()
    code, out = await _cli(
        kafka_bootstrap,
        finished.prefix,
        *("tail", "--loop", str(quiet), "--from-beginning", "--no-follow"),
    )
    assert code == 0, out
    assert f"loop {quiet}: no events in the journal yet" in " ".join(out.split())
