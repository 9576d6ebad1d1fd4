"""Two agents of a user's own package, hosted by `turnstream actor run --agent`.

Run them (from examples/agents, with a broker and topics up):

    turnstream actor run --agent acme.agents:support --agent acme.agents:auditor

and drive them with `turnstream chat "add 2 3" --agent support`. The model is
turnstream's offline demo model, which calls ``add`` for a question with numbers
and ``word_count`` otherwise, so everything here runs without a network.

- ``add`` and ``word_count`` are plain typed functions made tools by ``@tool``:
  the JSON schema the model sees comes from their signatures.
- ``support`` may run ``add`` without asking, must ask a person before
  ``word_count`` (an approval gate: answer it with RespondGate), and denies
  anything else.
- ``auditor`` runs ``word_count`` but is denied ``add``.
- ``tool_log`` is a hook around every tool call: it logs the tool name and how
  the call ended (never its arguments).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from turnstream.runtime import (
    AccessRules,
    Agent,
    Around,
    HookCall,
    HookResult,
    HookSet,
    Operation,
    ToolContext,
    tool,
)

log = logging.getLogger("acme")


@tool
def add(a: float, b: float) -> str:
    """Add two numbers and return their sum."""
    return f"{a + b:g}"


@tool
async def word_count(text: str, ctx: ToolContext) -> str:
    """Count the whitespace-separated words in a text."""
    return str(len(text.split()))


def tool_log(call: HookCall) -> Callable[[HookResult], None]:
    """Log each tool call's name and outcome (never its arguments)."""
    return lambda result: log.info("%s: %s", call.tool_name, result.outcome.value)


support = Agent(
    name="support",
    model="demo",  # or "openai:gpt-4o-mini", "anthropic:claude-…"
    models=("demo-large",),  # what `chat --model` may choose besides it
    system_prompt="You are acme's support agent.",
    tools=[add, word_count],
    hooks=HookSet(around=(Around(Operation.TOOL_CALL, tool_log),)),
    access=AccessRules(allow=["add"], ask=["word_count"]),  # anything else: deny
)

auditor = Agent(
    name="auditor",
    model="demo",
    tools=[add, word_count],
    access=AccessRules(allow=["word_count"], deny=["add"]),
)


careless = Agent(name="careless", model="demo", tools=[add])
"""No access policy: the service warns at start-up and denies every call."""
