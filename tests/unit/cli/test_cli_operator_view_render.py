"""The operator commands' rendering, pure: loop lines, state JSON, dead letters."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

import pytest

from turnstream.cli.dlq import dead_letter_line
from turnstream.cli.loops import loop_line, loop_summary
from turnstream.content import TextBlock, UserMessage
from turnstream.kafka.reader import DeadLetterEntry
from turnstream.state import LoopState, OpenTurn

LOOP = uuid4()
TURN = uuid4()
AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def state(**extra: object) -> LoopState:
    return LoopState(
        session_id=uuid4(),
        loop_id=LOOP,
        agent_name="support",
        turn_index=3,
        updated_at=AT,
        messages=(UserMessage(blocks=(TextBlock(text="secret question"),)),),
        **extra,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("extra", "status"),
    [
        pytest.param({}, "idle", id="idle"),
        pytest.param({"stopped": True}, "stopped", id="stopped"),
        pytest.param(
            {"open_turn": OpenTurn(turn_id=TURN, turn_index=3)},
            f"open turn {TURN}",
            id="open-turn",
        ),
    ],
)
def test_loop_line_names_turns_status_and_updated_at(
    extra: dict[str, object], status: str
) -> None:
    """One line: id, agent, turns started, status, last state write."""
    assert loop_line(state(**extra)) == (
        f"{LOOP}  agent=support  turns=3  {status}  "
        "updated_at=2026-01-02T03:04:05+00:00"
    )


def test_loop_summary_counts_messages_unless_asked() -> None:
    """Without --messages the conversation is a count; with it, the messages."""
    hidden = loop_summary(state(), messages=False)
    assert hidden["messages"] == 1
    assert "secret question" not in str(hidden)
    shown = loop_summary(state(), messages=True)
    assert "secret question" in str(shown["messages"])


def test_dead_letter_line_prints_headers_in_order() -> None:
    """Time, where it sits, then kind, reason and origin; unknown headers left out."""
    entry = DeadLetterEntry(
        partition=1,
        offset=7,
        timestamp_ms=int(AT.timestamp() * 1000),
        headers={
            "ts-dlq-offset": "42",
            "ts-dlq-kind": "undecodable",
            "ts-dlq-reason": "not a command",
            "ts-dlq-topic": "turnstream.commands.v1",
            "ts-dlq-partition": "1",
            "ts-dlq-other": "x",
        },
    )
    assert dead_letter_line(entry) == (
        "2026-01-02T03:04:05.000+00:00  dlq[1]@7  kind=undecodable  "
        "reason=not a command  topic=turnstream.commands.v1  partition=1  offset=42"
    )
