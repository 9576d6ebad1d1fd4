"""OpenAI Agents SDK: ``Agent`` + ``Runner`` with a scripted ``Model``.

:class:`ScriptedAgentModel` implements the SDK's ``Model`` interface
(``get_response`` and ``stream_response``, Responses-API items): in a tool
turn it returns a ``function_call`` for ``add(a=2, b=3)`` unless the last
input item is that call's output, else the answer (``stream_response``
streams it as ``CHUNKS`` ``response.output_text.delta`` events, then
``response.completed``). ``add`` is a ``function_tool`` that counts its runs
in the run context (the conversation).

Variants:

* ``run``: ``await Runner.run(agent, history + [message])``; the history is
  kept in memory with ``result.to_input_list()``; nothing is streamed to the
  caller (the model assembles the same 20-chunk answer);
* ``run_streamed``: ``Runner.run_streamed``; the caller counts the text
  deltas from ``stream_events()``;
* ``sqlite``: ``Runner.run`` with an ``SQLiteSession`` on a file in a temp dir
  (the SDK's own durable conversation memory).

Tracing is off: ``set_tracing_disabled(True)``, ``RunConfig(tracing_disabled=
True)`` and ``OPENAI_AGENTS_DISABLE_TRACING=1``; no OpenAI client is created.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from agents import (
    Agent,
    Model,
    ModelResponse,
    ModelSettings,
    RunConfig,
    RunContextWrapper,
    Runner,
    SQLiteSession,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseTextDeltaEvent,
)
from workload import ANSWER_CHUNKS, TOOL_ARGS, TOOL_NAME, ServerProcess, TurnSeen

set_tracing_disabled(True)


def _answer_item() -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=f"msg_{uuid.uuid4().hex[:12]}",
        type="message",
        role="assistant",
        status="completed",
        content=[
            ResponseOutputText(
                text="".join(ANSWER_CHUNKS),
                type="output_text",
                annotations=[],
                logprobs=[],
            )
        ],
    )


def _call_item() -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        id=f"fc_{uuid.uuid4().hex[:12]}",
        call_id=f"call_{uuid.uuid4().hex[:12]}",
        name=TOOL_NAME,
        arguments=json.dumps(TOOL_ARGS),
        type="function_call",
        status="completed",
    )


def _item_type(item: Any) -> str | None:
    if isinstance(item, dict):
        return item.get("type")
    return getattr(item, "type", None)


class ScriptedAgentModel(Model):
    """A zero-latency ``Model`` playing the workload's script."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.calls = 0

    def _output(self, input: str | list[Any]) -> list[Any]:
        self.calls += 1
        last = input[-1] if isinstance(input, list) and input else None
        if self.kind == "tool" and _item_type(last) != "function_call_output":
            return [_call_item()]
        return [_answer_item()]

    async def get_response(  # noqa: PLR0917 - the SDK's signature
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> ModelResponse:
        """The whole response at once."""
        return ModelResponse(
            output=self._output(input), usage=Usage(), response_id=None
        )

    async def stream_response(  # noqa: PLR0917 - the SDK's signature
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> AsyncIterator[Any]:
        """Text deltas, then ``response.completed`` with the full output."""
        output = self._output(input)
        seq = 0
        first = output[0]
        if isinstance(first, ResponseOutputMessage):
            for text in ANSWER_CHUNKS:
                yield ResponseTextDeltaEvent(
                    type="response.output_text.delta",
                    item_id=first.id,
                    output_index=0,
                    content_index=0,
                    delta=text,
                    logprobs=[],
                    sequence_number=seq,
                )
                seq += 1
        yield ResponseCompletedEvent(
            type="response.completed",
            sequence_number=seq,
            response=Response(
                id=f"resp_{uuid.uuid4().hex[:12]}",
                created_at=0,
                model="scripted-model",
                object="response",
                output=output,
                tool_choice="auto",
                tools=[],
                top_p=None,
                parallel_tool_calls=False,
                status="completed",
            ),
        )


@dataclass
class RunState:
    """The run context: counts the tool's runs."""

    tool_runs: int = 0


@function_tool(name_override=TOOL_NAME)
def add(ctx: RunContextWrapper[RunState], a: int, b: int) -> str:
    """Add two integers."""
    ctx.context.tool_runs += 1
    return str(a + b)


RUN_CONFIG = RunConfig(tracing_disabled=True)


class AgentConversation:
    """One conversation: history in memory, or in an ``SQLiteSession``."""

    def __init__(self, agent: Agent[Any], mode: str, db: Path | None) -> None:
        self._agent = agent
        self._mode = mode
        self._history: list[Any] = []
        self._state = RunState()
        self._session = SQLiteSession(uuid.uuid4().hex, db) if db is not None else None

    async def turn(self, text: str) -> TurnSeen:
        """One user message through ``Runner``."""
        runs0 = self._state.tool_runs
        if self._session is not None:
            result = await Runner.run(
                self._agent,
                text,
                context=self._state,
                session=self._session,
                run_config=RUN_CONFIG,
            )
            return TurnSeen(0, result.final_output, self._state.tool_runs - runs0)
        items = [*self._history, {"role": "user", "content": text}]
        chunks = 0
        if self._mode == "run":
            result = await Runner.run(
                self._agent, items, context=self._state, run_config=RUN_CONFIG
            )
        else:
            result = Runner.run_streamed(
                self._agent, items, context=self._state, run_config=RUN_CONFIG
            )
            async for event in result.stream_events():
                if event.type == "raw_response_event" and isinstance(
                    event.data, ResponseTextDeltaEvent
                ):
                    chunks += 1
        self._history = result.to_input_list()
        return TurnSeen(chunks, result.final_output, self._state.tool_runs - runs0)


@dataclass
class AgentSystem:
    """An agent with one runner mode."""

    name: str
    agent: Agent[Any]
    mode: str
    streamed: bool
    db: Path | None = None
    concurrent: bool = True

    async def conversation(self, index: int) -> AgentConversation:
        """A new conversation."""
        return AgentConversation(self.agent, self.mode, self.db)

    def server_pids(self) -> Sequence[ServerProcess]:
        """No server."""
        return ()


def _agent(kind: str) -> Agent[Any]:
    return Agent(
        name="bench",
        instructions="Answer the question.",
        model=ScriptedAgentModel(kind),
        tools=[add],
    )


@contextlib.asynccontextmanager
async def open_run(kind: str, _turns: int, **_: Any) -> AsyncIterator[AgentSystem]:
    """``Runner.run``, history in memory."""
    yield AgentSystem("OpenAI Agents SDK (Runner.run)", _agent(kind), "run", False)


@contextlib.asynccontextmanager
async def open_streamed(kind: str, _turns: int, **_: Any) -> AsyncIterator[AgentSystem]:
    """``Runner.run_streamed``, history in memory."""
    yield AgentSystem(
        "OpenAI Agents SDK (Runner.run_streamed)", _agent(kind), "streamed", True
    )


@contextlib.asynccontextmanager
async def open_sqlite(kind: str, _turns: int, **_: Any) -> AsyncIterator[AgentSystem]:
    """``Runner.run`` with an ``SQLiteSession`` file."""
    with tempfile.TemporaryDirectory(prefix="peers-agents-") as tmp:
        yield AgentSystem(
            "OpenAI Agents SDK + SQLiteSession (Runner.run, file)",
            _agent(kind),
            "run",
            False,
            db=Path(tmp) / "sessions.sqlite",
        )
