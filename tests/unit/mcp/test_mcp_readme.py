"""The agents guide's "MCP tools" samples run as written.

The first sample is written to ``calc_server.py`` in a fresh directory, the
second is executed there; the agent it defines then runs a turn on the
in-memory runtime whose model calls the server's ``add`` (allowed) and
``multiply`` (gated) tools, with the server started and stopped by the agent
host.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from turnstream.events import PermissionRequested, StepDone
from turnstream.mcp import McpConnection
from turnstream.runtime import Agent, AgentHost
from turnstream.testing import ScriptedModel, call, open_rig, text_step, tool_step

GUIDE = Path(__file__).resolve().parents[3] / "docs/agents.md"
_SECTION = re.compile(r"^## MCP tools\n(.*?)(?=^## |\Z)", re.DOTALL | re.MULTILINE)
_BLOCK = re.compile(r"^```py\n(.*?)^```", re.DOTALL | re.MULTILINE)


def samples() -> list[str]:
    section = _SECTION.search(GUIDE.read_text(encoding="utf-8"))
    assert section is not None, "docs/agents.md has no '## MCP tools' section"
    return _BLOCK.findall(section.group(1))


async def test_readme_mcp_samples_run_a_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server_code, agent_code = samples()
    (tmp_path / "calc_server.py").write_text(server_code, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "readme_mcp"}
    exec(compile(agent_code, "docs/agents.md MCP tools sample", "exec"), namespace)  # noqa: S102 - the guide's own sample
    agent = namespace["support"]
    assert isinstance(agent, Agent)
    assert [t.spec.name for t in agent.tools] == ["add", "multiply"]

    host = AgentHost([agent], lambda _a: ScriptedModel([]))
    (connection,) = host.tool_resources()
    assert isinstance(connection, McpConnection)
    steps = [
        tool_step(call("add", '{"a":2,"b":3}', id="u1")),
        tool_step(call("multiply", '{"a":5,"b":4}', id="u2")),
        text_step("20"),
    ]
    async with (
        host.tools_open(),
        open_rig(
            *steps, config=agent.loop_config(), access_policy=agent.access_policy()
        ) as rig,
    ):
        assert connection.connected  # started with the host, before any call
        await rig.submit("(2 + 3) * 4")
        requested = await rig.recorder.wait_for_type(PermissionRequested)
        assert requested.tool_name == "multiply"
        await rig.session.respond_gate(requested.gate_id, "approve")
        await rig.idle()
        texts = [
            [getattr(b, "text", "") for m in step.messages[1:] for b in m.blocks]
            for step in rig.recorder.of_type(StepDone)[:2]
        ]
        assert texts == [["5"], ["20"]]
    assert not connection.connected
