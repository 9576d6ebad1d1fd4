"""A side-effect ledger agent for kill -9 churn, hosted by real loop-actor processes.

``python -m turnstream.loop_actor --agent tests.support.ledger_agents:ledger``
(from the project root). Every turn's input is an id of the caller's choosing;
the model, deterministic on the turn's committed messages, asks for
``LEDGER_STEPS`` tool steps, one call per step with ``{"input": id, "step": k}``
(the call's logical identity), alternating the idempotent ``refund``
(odd ``k``) and the non-idempotent ``notify`` (even ``k``), then answers. A
resumed turn therefore asks exactly what the crashed one would have asked next.

Both tools write to the SQLite ledger ``$LEDGER_DB`` outside the actors (it
survives a kill -9), then wait ``$LEDGER_TOOL_DELAY`` seconds so kills land
mid-step:

- ``refund`` applies its effect once per idempotency key, as a payment API
  with idempotency keys does (``INSERT OR IGNORE`` keyed by the key);
- ``notify`` sends every time it runs (one row per run), as a plain API does.

With ``$LEDGER_EFFECT_TOPIC`` set, each call also stages one Kafka record for
that topic first (``ToolContext.stage_record``; key: its idempotency key,
value: ``{"tool", "input", "step"}``): committed with the call's step or never.

:class:`Ledger` opens the same file and counts what happened.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from turnstream.content import (
    TextChunk,
    ToolResultMessage,
    ToolUseChunk,
    UserMessage,
    text_of,
)
from turnstream.runtime import AccessRules, Agent, ToolContext
from turnstream.runtime.model_client import ModelEvent, ModelRequest, StreamEnd
from turnstream.testing import FunctionTool

__all__ = ["LEDGER_STEPS", "Ledger", "ledger", "ledger_interrupting"]

LEDGER_STEPS = 4
ANSWER = "ledger steps done"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS refunds (
    key TEXT PRIMARY KEY, input TEXT NOT NULL, step INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS notifications (
    input TEXT NOT NULL, step INTEGER NOT NULL, key TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS attempts (
    tool TEXT NOT NULL, input TEXT NOT NULL, step INTEGER NOT NULL, key TEXT NOT NULL
);
"""


def _connect(path: Path) -> sqlite3.Connection:
    # Several actor processes write at once: wait for the lock, never fail on it.
    db = sqlite3.connect(path, timeout=60, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(_SCHEMA)
    return db


def _db() -> Path:
    return Path(os.environ["LEDGER_DB"])


def _write(statements: list[tuple[str, tuple[object, ...]]]) -> None:
    db = _connect(_db())
    try:
        db.execute("BEGIN IMMEDIATE")
        for sql, params in statements:
            db.execute(sql, params)
        db.execute("COMMIT")
    finally:
        db.close()


async def _effect(tool: str, input_json: str, ctx: ToolContext, sql: str) -> None:
    call = json.loads(input_json)
    input_id, step = str(call["input"]), int(call["step"])
    key = ctx.idempotency_key
    topic = os.environ.get("LEDGER_EFFECT_TOPIC")
    if topic:
        record = {"tool": tool, "input": input_id, "step": step}
        ctx.stage_record(topic, key.encode(), json.dumps(record).encode())
    attempt = "INSERT INTO attempts VALUES (?, ?, ?, ?)"
    await asyncio.to_thread(
        _write,
        [(attempt, (tool, input_id, step, key)), (sql, (key, input_id, step))],
    )
    await asyncio.sleep(float(os.environ.get("LEDGER_TOOL_DELAY", "0.2")))


async def _refund(input_json: str, ctx: ToolContext) -> str:
    insert = "INSERT OR IGNORE INTO refunds (key, input, step) VALUES (?, ?, ?)"
    await _effect("refund", input_json, ctx, insert)
    return "refunded"


async def _notify(input_json: str, ctx: ToolContext) -> str:
    insert = "INSERT INTO notifications (key, input, step) VALUES (?, ?, ?)"
    await _effect("notify", input_json, ctx, insert)
    return "notified"


def tool_for(step: int) -> str:
    """The tool step ``step`` (from 1) calls."""
    return "refund" if step % 2 else "notify"


class LedgerModel:
    """Asks for the next step from the turn's committed messages alone."""

    @property
    def name(self) -> str:
        return "ledger"

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        return self._play(request)

    async def _play(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        start = max(
            i for i, m in enumerate(request.messages) if isinstance(m, UserMessage)
        )
        first = request.messages[start]
        assert isinstance(first, UserMessage)
        done = sum(
            isinstance(m, ToolResultMessage) for m in request.messages[start + 1 :]
        )
        if done < LEDGER_STEPS:
            step = done + 1
            call = {"input": text_of(first.blocks), "step": step}
            yield ToolUseChunk(index=0, id=f"call_{step}", name=tool_for(step))
            yield ToolUseChunk(index=0, input_json=json.dumps(call))
            yield StreamEnd(stop_reason="tool_use")
            return
        yield TextChunk(text=ANSWER)
        yield StreamEnd(stop_reason="end_turn")


@dataclass(frozen=True)
class LedgerCounts:
    """What the ledger saw, per logical call ``(input, step)``."""

    refund_calls: int
    refund_effects: int
    refund_attempts: int
    duplicate_refunds: int
    notify_calls: int
    notify_runs: int
    notify_reruns: int


class Ledger:
    """The ledger file, read after a run (the actors write it)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        _connect(path).close()

    def _rows(self, sql: str, *params: object) -> list[tuple[object, ...]]:
        db = _connect(self.path)
        try:
            return list(db.execute(sql, params).fetchall())
        finally:
            db.close()

    def runs(self, tool: str) -> dict[tuple[str, int], int]:
        """How often each logical call of ``tool`` ran (attempts, keys alike)."""
        rows = self._rows(
            "SELECT input, step, COUNT(*) FROM attempts "
            "WHERE tool = ? GROUP BY input, step",
            tool,
        )
        return {(str(i), int(str(s))): int(str(n)) for i, s, n in rows}

    def counts(self) -> LedgerCounts:
        refunds = self._rows(
            "SELECT input, step, COUNT(*) FROM refunds GROUP BY input, step"
        )
        notes = self._rows(
            "SELECT input, step, COUNT(*) FROM notifications GROUP BY input, step"
        )
        attempts = self.runs("refund")
        return LedgerCounts(
            refund_calls=len(refunds),
            refund_effects=sum(int(str(n)) for *_, n in refunds),
            refund_attempts=sum(attempts.values()),
            # A logical call applied more than once: under two keys, say.
            duplicate_refunds=sum(int(str(n)) - 1 for *_, n in refunds),
            notify_calls=len(notes),
            notify_runs=sum(int(str(n)) for *_, n in notes),
            notify_reruns=sum(int(str(n)) - 1 for *_, n in notes),
        )


def _agent(on_restore: str) -> Agent:
    return Agent(
        name="ledger",
        model="ledger",
        client=LedgerModel(),
        tools=[
            FunctionTool("refund", _refund, retry_safe=True),
            FunctionTool("notify", _notify),
        ],
        access=AccessRules(allow=["refund", "notify"]),
        on_restore=on_restore,  # type: ignore[arg-type]
        max_resumes=int(os.environ.get("LEDGER_MAX_RESUMES", "3")),
    )


ledger = _agent("continue")
ledger_interrupting = _agent("interrupt")
"""The same agent with the default restore rule (its crashed turns are lost)."""
