"""The peers workload as agents a loop-actor *process* hosts.

``turnstream actor run --agent bench_agent:text_agent`` (run from
``bench/peers``) hosts the workload's text agent; ``tool_agent`` the tool one.
The model is the workload's script as a stateless :class:`WorkloadModel`: one
client serves every loop of the service, so it decides from the request
itself what the in-process bench's per-loop :class:`ScriptedModel` plays in
order -- a tool turn's first step asks for ``add(a=2, b=3)``, every other step
streams the ``CHUNKS`` answer chunks. ``add`` is a plain ``@tool`` function,
allowed without asking.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from workload import ANSWER_CHUNKS, TOOL_ARGS, TOOL_NAME

from turnstream.content import UserMessage
from turnstream.runtime import AccessRules, Agent, tool
from turnstream.runtime.model_client import ModelEvent, ModelRequest
from turnstream.testing import call, text_step, tool_step

_ANSWER = tuple(text_step(*ANSWER_CHUNKS))
_ASK = tuple(tool_step(call(TOOL_NAME, json.dumps(TOOL_ARGS))))


class WorkloadModel:
    """The workload's scripted model, choosing its step from the request."""

    def __init__(self, kind: str) -> None:
        self._ask_first = kind == "tool"

    @property
    def name(self) -> str:
        """The provider label."""
        return "bench"

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """The ask step after a user message (tool kind), else the answer."""
        last = request.messages[-1] if request.messages else None
        ask = self._ask_first and isinstance(last, UserMessage)
        return _play(_ASK if ask else _ANSWER)


async def _play(items: tuple[object, ...]) -> AsyncIterator[ModelEvent]:
    for item in items:
        yield item  # type: ignore[misc]


@tool
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


def _agent(kind: str) -> Agent:
    return Agent(
        name=f"bench-{kind}",
        model="bench",
        tools=(add,),
        access=AccessRules(allow={TOOL_NAME}),
        client=WorkloadModel(kind),
    )


text_agent = _agent("text")
tool_agent = _agent("tool")
