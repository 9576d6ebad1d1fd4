"""Agents for the kill -9 resume tests, hosted by real loop-actor processes.

``python -m turnstream.loop_actor --agent tests.support.resume_agents:continuing``
(from the project root). The model is deterministic on the committed history, so
a resumed turn asks exactly what the crashed one would have asked next:

- a turn whose input is ``gate`` calls ``confirm`` (access ``ask``: an approval
  gate), then answers;
- any other turn calls ``record`` with ``{"n": k}`` for k = 1 … 5, one call per
  step, then answers ``five steps done``.

``record`` appends ``k`` and its call's idempotency key to
``$RESUME_LEDGER_DIR/ledger`` (outside the actor, so it survives a kill -9),
stages the record ``key = idempotency key, value = k`` for
``$RESUME_EFFECT_TOPIC`` when that is set, and, the first time it runs with
``k == $RESUME_HOLD_AT``, leaves ``held`` beside it and waits: for ever, or,
with ``$RESUME_RELEASE`` set, until a ``release`` file appears beside it. A
test kills or stops the process while step ``k`` is held (steps before it
committed, step ``k`` not). ``confirm`` appends ``confirm`` to the ledger.
``continuing`` declares ``record`` not idempotent (a call approved before the
crash is not run again), ``continuing_idempotent`` declares it idempotent.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
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

__all__ = ["continuing", "continuing_idempotent", "interrupting"]

STEPS = 5


def _ledger_dir() -> Path:
    return Path(os.environ["RESUME_LEDGER_DIR"])


def _append(line: str) -> None:
    with (_ledger_dir() / "ledger").open("a") as ledger:
        ledger.write(line + "\n")


async def _record(input_json: str, ctx: ToolContext) -> str:
    n = int(json.loads(input_json)["n"])
    _append(f"{n} {ctx.idempotency_key}")
    effects = os.environ.get("RESUME_EFFECT_TOPIC")
    if effects:
        # Staged before any hold: a kill while held falls between the staging
        # and the step's commit.
        ctx.stage_record(effects, ctx.idempotency_key.encode(), str(n).encode())
    held = _ledger_dir() / "held"
    if n == int(os.environ.get("RESUME_HOLD_AT", "0")) and not held.exists():
        held.touch()
        if not os.environ.get("RESUME_RELEASE"):
            await asyncio.Event().wait()  # held until the process is killed
        # A file another process creates: nothing here to wait on but polling.
        while not (_ledger_dir() / "release").exists():  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    return f"recorded {n}"


def _confirm(_input_json: str, _ctx: ToolContext) -> str:
    _append("confirm")
    return "confirmed"


class StepsModel:
    """Asks for the next step from the turn's committed messages alone."""

    @property
    def name(self) -> str:
        return "steps"

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        return self._play(request)

    async def _play(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        start = max(
            i for i, m in enumerate(request.messages) if isinstance(m, UserMessage)
        )
        first = request.messages[start]
        done = sum(
            isinstance(m, ToolResultMessage) for m in request.messages[start + 1 :]
        )
        gate = isinstance(first, UserMessage) and text_of(first.blocks) == "gate"
        if (gate and done == 0) or (not gate and done < STEPS):
            name = "confirm" if gate else "record"
            yield ToolUseChunk(index=0, id=f"call_{done + 1}", name=name)
            yield ToolUseChunk(index=0, input_json=json.dumps({"n": done + 1}))
            yield StreamEnd(stop_reason="tool_use")
            return
        yield TextChunk(text="confirmed" if gate else "five steps done")
        yield StreamEnd(stop_reason="end_turn")


def _agent(*, idempotent: bool = False, **kw: object) -> Agent:
    return Agent(
        name="resumer",
        model="steps",
        client=StepsModel(),
        tools=[
            FunctionTool("record", _record, retry_safe=idempotent),
            FunctionTool("confirm", _confirm),
        ],
        access=AccessRules(allow=["record"], ask=["confirm"]),
        **kw,  # type: ignore[arg-type]
    )


continuing = _agent(on_restore="continue")
continuing_idempotent = _agent(on_restore="continue", idempotent=True)
interrupting = _agent()
