"""LangGraph: a hand-built ReAct graph (agent node + ``ToolNode``) per checkpointer.

The graph is ``START -> agent -> (tools -> agent)* -> END`` over
``MessagesState``, routed by ``tools_condition``: what ``create_react_agent``
builds (deprecated in LangGraph 1.x, so built by hand here). The agent node
calls :class:`ScriptedChatModel`, a ``BaseChatModel`` with ``_generate``,
``_stream``, ``_astream`` and ``bind_tools``: it asks for ``add(a=2, b=3)``
in a tool turn unless the last message is the tool's result, else it answers
in ``CHUNKS`` chunks. The tool is a LangChain ``@tool`` that counts its runs
per thread. Each conversation is one ``thread_id``.

Variants:

* ``astream``: ``graph.astream(..., stream_mode=["messages", "updates"])``;
  the caller counts the answer's text chunks (``messages``) and takes the
  final answer from the agent node's update. Conversations run concurrently.
* ``invoke``: ``graph.invoke(...)`` (sync, so one conversation at a time);
  nothing is streamed to the caller, the model's ``_generate`` runs.

Checkpointers: ``InMemorySaver``; ``AsyncSqliteSaver`` on a file in a temp
dir; ``AsyncPostgresSaver`` over a ``psycopg_pool.AsyncConnectionPool`` when a
DSN is given (server CPU: the postmaster, its live backends and its reaped
children).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("LANGSMITH_TRACING", "false")
os.environ.setdefault("LANGCHAIN_TRACING_V2", "false")
os.environ.pop("LANGSMITH_API_KEY", None)
os.environ.pop("LANGCHAIN_API_KEY", None)

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from workload import (
    ANSWER_CHUNKS,
    TOOL_ARGS,
    TOOL_NAME,
    BenchFailure,
    ServerProcess,
    TurnSeen,
)


class ScriptedChatModel(BaseChatModel):
    """A zero-latency chat model playing the workload's script."""

    kind: str = "text"
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "turnstream-bench-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        """Accept the tools (the script knows what to ask for)."""
        return self.bind(tools=[getattr(t, "name", str(t)) for t in tools], **kwargs)

    def _wants_tool(self, messages: list[BaseMessage]) -> bool:
        return self.kind == "tool" and not isinstance(messages[-1], ToolMessage)

    def _chunks(self, messages: list[BaseMessage]) -> Iterator[AIMessageChunk]:
        self.calls += 1
        if self._wants_tool(messages):
            yield AIMessageChunk(
                content="",
                tool_call_chunks=[
                    {
                        "name": TOOL_NAME,
                        "args": json.dumps(TOOL_ARGS),
                        "id": f"call_{uuid.uuid4().hex[:12]}",
                        "index": 0,
                    }
                ],
            )
            return
        for text in ANSWER_CHUNKS:
            yield AIMessageChunk(content=text)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls += 1
        if self._wants_tool(messages):
            message = AIMessage(
                content="",
                tool_calls=[
                    {
                        "name": TOOL_NAME,
                        "args": dict(TOOL_ARGS),
                        "id": f"call_{uuid.uuid4().hex[:12]}",
                        "type": "tool_call",
                    }
                ],
            )
        else:
            message = AIMessage(content="".join(ANSWER_CHUNKS))
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        for chunk in self._chunks(messages):
            generation = ChatGenerationChunk(message=chunk)
            if run_manager is not None:
                run_manager.on_llm_new_token(str(chunk.content), chunk=generation)
            yield generation

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in self._chunks(messages):
            generation = ChatGenerationChunk(message=chunk)
            if run_manager is not None:
                await run_manager.on_llm_new_token(str(chunk.content), chunk=generation)
            yield generation


@dataclass
class ToolRuns:
    """``add`` runs per thread id."""

    runs: Counter[str] = field(default_factory=Counter)

    def tool(self) -> Any:
        """The LangChain tool."""

        @tool(TOOL_NAME)
        def add(a: int, b: int, config: RunnableConfig) -> str:
            """Add two integers."""
            self.runs[config["configurable"]["thread_id"]] += 1
            return str(a + b)

        return add


def build_graph(kind: str, checkpointer: Any, runs: ToolRuns) -> Any:
    """The compiled ReAct graph."""
    add = runs.tool()
    model = ScriptedChatModel(kind=kind).bind_tools([add])

    def agent(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"], config)]}

    async def aagent(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"], config)]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", RunnableLambda(agent, afunc=aagent))
    builder.add_node("tools", ToolNode([add]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer)


class GraphConversation:
    """One thread of the graph."""

    def __init__(self, graph: Any, runs: ToolRuns, *, stream: bool) -> None:
        self._graph = graph
        self._runs = runs
        self._stream = stream
        self.thread = uuid.uuid4().hex
        self._config: RunnableConfig = {"configurable": {"thread_id": self.thread}}

    async def turn(self, text: str) -> TurnSeen:
        """One user message through the graph."""
        runs0 = self._runs.runs[self.thread]
        payload = {"messages": [HumanMessage(content=text)]}
        if not self._stream:
            state = self._graph.invoke(payload, self._config)
            answer = state["messages"][-1].content
            return TurnSeen(0, answer, self._runs.runs[self.thread] - runs0)
        chunks = 0
        answer = ""
        async for mode, data in self._graph.astream(
            payload, self._config, stream_mode=["messages", "updates"]
        ):
            if mode == "messages":
                message, meta = data
                if (
                    isinstance(message, AIMessageChunk)
                    and meta.get("langgraph_node") == "agent"
                    and message.content
                ):
                    chunks += 1
            elif "agent" in data:
                answer = data["agent"]["messages"][-1].content
        return TurnSeen(chunks, answer, self._runs.runs[self.thread] - runs0)


@dataclass
class GraphSystem:
    """A compiled graph with one checkpointer."""

    name: str
    graph: Any
    runs: ToolRuns
    streamed: bool
    concurrent: bool
    servers: Sequence[ServerProcess] = ()

    async def conversation(self, index: int) -> GraphConversation:
        """A new thread."""
        return GraphConversation(self.graph, self.runs, stream=self.streamed)

    def server_pids(self) -> Sequence[ServerProcess]:
        """The database server, if any."""
        return self.servers


@contextlib.asynccontextmanager
async def open_memory(kind: str, _turns: int, **_: Any) -> AsyncIterator[GraphSystem]:
    """LangGraph + ``InMemorySaver``, ``astream``."""
    runs = ToolRuns()
    yield GraphSystem(
        "LangGraph + InMemorySaver (astream)",
        build_graph(kind, InMemorySaver(), runs),
        runs,
        streamed=True,
        concurrent=True,
    )


@contextlib.asynccontextmanager
async def open_memory_invoke(
    kind: str, _turns: int, **_: Any
) -> AsyncIterator[GraphSystem]:
    """LangGraph + ``InMemorySaver``, sync ``invoke`` (no streaming to the caller)."""
    runs = ToolRuns()
    yield GraphSystem(
        "LangGraph + InMemorySaver (invoke)",
        build_graph(kind, InMemorySaver(), runs),
        runs,
        streamed=False,
        concurrent=False,
    )


@contextlib.asynccontextmanager
async def open_sqlite(kind: str, _turns: int, **_: Any) -> AsyncIterator[GraphSystem]:
    """LangGraph + ``AsyncSqliteSaver`` on a temp file, ``astream``."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    with tempfile.TemporaryDirectory(prefix="peers-sqlite-") as tmp:
        path = Path(tmp) / "checkpoints.sqlite"
        async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
            await saver.setup()
            runs = ToolRuns()
            yield GraphSystem(
                "LangGraph + AsyncSqliteSaver (astream, file)",
                build_graph(kind, saver, runs),
                runs,
                streamed=True,
                concurrent=True,
            )


async def _postgres_server(pool: Any) -> Sequence[ServerProcess]:
    """The postmaster of the pool's server, if it runs on this machine."""
    async with pool.connection() as conn:
        row = await (await conn.execute("SELECT pg_backend_pid() AS pid")).fetchone()
    return _postmaster_of(int(row["pid"]))


def _postmaster_of(backend: int) -> Sequence[ServerProcess]:
    """The parent of a local backend process (none if it is not local)."""
    try:
        stat = Path(f"/proc/{backend}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return ()
    return (ServerProcess("postgres", int(stat[1]), tree=True),)


@contextlib.asynccontextmanager
async def open_postgres(
    kind: str, _turns: int, *, postgres: str | None = None, **_: Any
) -> AsyncIterator[GraphSystem]:
    """LangGraph + ``AsyncPostgresSaver`` over a connection pool, ``astream``."""
    if not postgres:
        raise BenchFailure("no Postgres DSN")
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    pool = AsyncConnectionPool(
        conninfo=postgres,
        min_size=4,
        max_size=8,
        open=False,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
    )
    await pool.open(wait=True)
    try:
        saver = AsyncPostgresSaver(pool)
        await saver.setup()
        runs = ToolRuns()
        yield GraphSystem(
            "LangGraph + AsyncPostgresSaver (astream)",
            build_graph(kind, saver, runs),
            runs,
            streamed=True,
            concurrent=True,
            servers=await _postgres_server(pool),
        )
    finally:
        await pool.close()
