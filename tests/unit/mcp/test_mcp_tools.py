"""MCP servers' tools in turns: a real SDK server over stdio and streamable HTTP.

Turns run on the in-memory runtime (the rig) with a scripted model; the tools
call ``tests/support/mcp_server.py`` for real. A test that acts during a call
holds the turn with the server's ``hold`` tool (the call stays in flight until
the test kills the process).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from mcp.types import Tool as McpToolInfo
from tests.support.eventually import assert_eventually
from tests.unit.mcp.conftest import HttpServerProcess, stdio_args

from turnstream.errors import ConfigError
from turnstream.events import PermissionRequested, StepDone
from turnstream.mcp import (
    HttpServer,
    McpConnection,
    McpTool,
    StdioServer,
    mcp_tools,
    result_text,
)
from turnstream.runtime import AccessRules, Agent, AgentHost, OpenedTool
from turnstream.testing import ScriptedModel, call, open_rig, text_step, tool_step

ADD = '{"a":2,"b":3}'
EXITED = "error: mcp server_exited: the tool server stopped during the call"
DENIED = "error: permission denied [not authorized]: denied by policy"


def results(step: StepDone) -> list[tuple[str, bool, str]]:
    """(tool_use_id, is_error, text) of each tool result of a step, in order."""
    out = []
    for message in step.messages[1:]:
        text = "".join(getattr(b, "text", "") for b in message.blocks)
        out.append((message.tool_use_id, message.is_error, text))  # type: ignore[union-attr]
    return out


def connection_of(tools: Sequence[McpTool]) -> McpConnection:
    return tools[0].resource()


@contextlib.asynccontextmanager
async def closing(tools: Sequence[McpTool]) -> AsyncIterator[McpConnection]:
    """The tools' connection, closed (its server stopped) at the end."""
    connection = connection_of(tools)
    try:
        yield connection
    finally:
        await connection.aclose()


def test_server_tools_become_tool_specs(stdio_server: StdioServer) -> None:
    tools = mcp_tools(stdio_server)
    assert [t.spec.name for t in tools] == [
        "add",
        "echo",
        "fail",
        "reject",
        "header",
        "pid",
        "hang",
        "hold",
    ]
    add = tools[0]
    assert add.spec.description == "Add two integers."
    schema = json.loads(add.spec.input_schema)
    assert schema["type"] == "object"
    assert schema["required"] == ["a", "b"]
    assert {k: v["type"] for k, v in schema["properties"].items()} == {
        "a": "integer",
        "b": "integer",
    }
    assert all(isinstance(t, OpenedTool) for t in tools)
    assert len({id(t.resource()) for t in tools}) == 1  # one connection per server


def test_include_and_prefix(stdio_server: StdioServer) -> None:
    tools = mcp_tools(stdio_server, include=["echo", "add"], prefix="calc_")
    assert [t.spec.name for t in tools] == ["calc_add", "calc_echo"]
    assert [t.remote_name for t in tools] == ["add", "echo"]
    with pytest.raises(ConfigError, match="no such tools: nope"):
        mcp_tools(stdio_server, include=["nope"])


def test_a_server_that_cannot_start_is_a_config_error(tmp_path: Path) -> None:
    missing = StdioServer(name="gone", command=str(tmp_path / "no-such-server"))
    with pytest.raises(ConfigError, match=r"cannot list its tools \(unavailable\)"):
        mcp_tools(missing)


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_tool_called_through_a_turn(
    transport: str, request: pytest.FixtureRequest
) -> None:
    server = request.getfixturevalue(f"{transport}_server")
    tools = mcp_tools(server, include=["add"])
    steps = [tool_step(call("add", ADD, id="u1")), text_step("5")]
    async with (
        closing(tools),
        open_rig(*steps, tools=tools, access_policy=AccessRules(allow=["add"])) as rig,
    ):
        cmd = await rig.submit("add 2 3")
        await rig.idle()
        assert rig.after_start() == [
            ("TurnStarted", 1, cmd, "User:add 2 3"),
            ("PermissionDecided", "add", "approve", "access_evaluated"),
            ("ToolCallStarted", "u1"),
            ("ToolCallCompleted", "u1", False),
            ("StepDone", ("AI:tool_use:u1", "Tool:u1:5")),
            ("StepDone", ("AI:5",)),
            ("TurnDone", 1, "AI:5"),
            ("LoopIdle",),
        ]
        request_tools = rig.model.requests[0].tools
        assert [t.name for t in request_tools] == ["add"]
        assert request_tools[0].input_schema == tools[0].spec.input_schema


async def test_http_server_headers_are_sent(http_process: HttpServerProcess) -> None:
    server = HttpServer(
        name="httpsrv",
        url=http_process.server.url,
        headers={"Authorization": "Bearer t0ken"},
    )
    assert "t0ken" not in repr(server)
    (tool,) = mcp_tools(server, include=["header"])
    async with closing([tool]) as connection:
        result = await connection.call("header", {"name": "authorization"})
    assert result_text(result) == "Bearer t0ken"


async def test_gated_mcp_tool_runs_once_approved(stdio_server: StdioServer) -> None:
    tools = mcp_tools(stdio_server, include=["add"])
    steps = [tool_step(call("add", ADD, id="u1")), text_step("5")]
    async with (
        closing(tools) as connection,
        open_rig(*steps, tools=tools, access_policy=AccessRules(ask=["add"])) as rig,
    ):
        cmd = await rig.submit("add 2 3")
        requested = await rig.recorder.wait_for_type(PermissionRequested)
        assert connection.starts == 0  # nothing ran while the gate was open
        await rig.session.respond_gate(requested.gate_id, "approve")
        await rig.idle()
        assert rig.after_start() == [
            ("TurnStarted", 1, cmd, "User:add 2 3"),
            ("GateOpened", "permission"),
            ("PermissionRequested", "add"),
            ("GateResolved", "answered", "approve"),
            ("ToolCallStarted", "u1"),
            ("ToolCallCompleted", "u1", False),
            ("StepDone", ("AI:tool_use:u1", "Tool:u1:5")),
            ("StepDone", ("AI:5",)),
            ("TurnDone", 1, "AI:5"),
            ("LoopIdle",),
        ]


async def test_denied_mcp_tool_never_reaches_the_server(
    stdio_server: StdioServer,
) -> None:
    tools = mcp_tools(stdio_server, include=["add"])
    steps = [tool_step(call("add", ADD, id="u1")), text_step("no")]
    async with (
        closing(tools) as connection,
        open_rig(*steps, tools=tools, access_policy=AccessRules(deny=["add"])) as rig,
    ):
        cmd = await rig.submit("add 2 3")
        await rig.idle()
        assert rig.after_start() == [
            ("TurnStarted", 1, cmd, "User:add 2 3"),
            ("PermissionDecided", "add", "deny", "access_denied"),
            ("ToolCallStarted", "u1"),
            ("ToolCallCompleted", "u1", True),
            (
                "StepDone",
                (
                    "AI:tool_use:u1",
                    "Tool:u1:" + DENIED,
                ),
            ),
            ("StepDone", ("AI:no",)),
            ("TurnDone", 1, "AI:no"),
            ("LoopIdle",),
        ]
        assert connection.starts == 0


async def test_timeout_is_an_error_result_and_the_session_stays(
    tmp_path: Path,
) -> None:
    server = StdioServer(
        name="slow",
        command=sys.executable,
        args=stdio_args(tmp_path),
        call_timeout=0.5,
    )
    tools = mcp_tools(server, include=["add", "hang"])
    steps = [
        tool_step(call("hang", id="u1")),
        tool_step(call("add", ADD, id="u2")),
        text_step("ok"),
    ]
    policy = AccessRules(allow=["add", "hang"])
    async with (
        closing(tools) as connection,
        open_rig(*steps, tools=tools, access_policy=policy) as rig,
    ):
        await rig.submit("go")
        await rig.idle()
        first, second = rig.recorder.of_type(StepDone)[:2]
        assert results(first) == [("u1", True, "error: mcp timeout: no answer in time")]
        assert results(second) == [("u2", False, "5")]
        assert connection.starts == 1


async def test_is_error_result_is_a_tool_error(
    stdio_server: StdioServer, caplog: pytest.LogCaptureFixture
) -> None:
    tools = mcp_tools(stdio_server, include=["fail"])
    steps = [tool_step(call("fail", '{"reason":"s3cret"}', id="u1")), text_step("x")]
    caplog.set_level(logging.INFO, logger="turnstream.mcp")
    async with (
        closing(tools),
        open_rig(*steps, tools=tools, access_policy=AccessRules(allow=["fail"])) as rig,
    ):
        await rig.submit("go")
        await rig.idle()
        assert results(rig.recorder.of_type(StepDone)[0]) == [
            (
                "u1",
                True,
                "error: mcp tool_error: Error executing tool fail: refused: s3cret",
            )
        ]
    records = [r for r in caplog.records if r.name.startswith("turnstream.mcp")]
    assert [(r.getMessage(), r.__dict__["kind"]) for r in records] == [
        ("mcp tool answered an error", "tool_error")
    ]
    assert "s3cret" not in caplog.text  # the server's text and arguments: model only


async def test_json_rpc_error_is_a_protocol_error_and_stderr_goes_to_its_file(
    tmp_path: Path,
) -> None:
    log_file = tmp_path / "server.log"
    server = StdioServer(
        name="testsrv",
        command=sys.executable,
        args=stdio_args(tmp_path),
        stderr=str(log_file),
    )
    tools = mcp_tools(server, include=["reject", "fail"])
    steps = [
        tool_step(call("reject", id="u1"), call("fail", '{"reason":"r"}', id="u2")),
        text_step("x"),
    ]
    policy = AccessRules(allow=["reject", "fail"])
    async with (
        closing(tools) as connection,
        open_rig(*steps, tools=tools, access_policy=policy) as rig,
    ):
        await rig.submit("go")
        await rig.idle()
        assert results(rig.recorder.of_type(StepDone)[0]) == [
            (
                "u1",
                True,
                "error: mcp protocol_error: the tool server answered with an error"
                " (code -32602)",
            ),
            (
                "u2",
                True,
                "error: mcp tool_error: Error executing tool fail: refused: r",
            ),
        ]
        assert connection.starts == 1  # an error answer leaves the session up
    assert "Tool 'fail' failed" in log_file.read_text(encoding="utf-8")


async def test_server_killed_mid_call_then_next_call_restarts_it(
    stdio_server: StdioServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tools = mcp_tools(stdio_server, include=["add", "hold", "pid"])
    steps = [
        tool_step(call("pid", id="u0")),
        tool_step(call("hold", id="u1")),
        tool_step(call("add", ADD, id="u2")),
        text_step("ok"),
    ]
    policy = AccessRules(allow=["add", "hold", "pid"])
    pid_file = tmp_path / "hold.pid"
    async with (
        closing(tools) as connection,
        open_rig(*steps, tools=tools, access_policy=policy) as rig,
    ):
        await rig.submit("go")
        # The turn waits in ``hold`` (its call in flight) until the kill.
        await assert_eventually(pid_file.exists, timeout=20)
        held = int(pid_file.read_text(encoding="utf-8"))
        os.kill(held, signal.SIGKILL)
        await rig.idle()
        steps_done = rig.recorder.of_type(StepDone)
        assert results(steps_done[0]) == [("u0", False, str(held))]
        assert results(steps_done[1]) == [
            (
                "u1",
                True,
                "error: mcp server_exited: the tool server stopped during the call",
            )
        ]
        assert results(steps_done[2]) == [("u2", False, "5")]
        assert connection.starts == 2  # a new process served the next call
        assert rig.recorder.described()[-2:] == [
            ("TurnDone", 1, "AI:ok"),
            ("LoopIdle",),
        ]
    kinds = [
        r.__dict__.get("kind")
        for r in caplog.records
        if r.name == "turnstream.mcp.tools"
    ]
    assert kinds == ["server_exited"]


async def test_http_server_killed_mid_call_then_back_serves_the_next_call(
    http_process: HttpServerProcess,
) -> None:
    tools = mcp_tools(http_process.server, include=["add", "hold"])
    steps = [
        tool_step(call("hold", id="u1")),
        tool_step(call("add", ADD, id="u2")),
        text_step("ok"),
    ]
    policy = AccessRules(allow=["hold"], ask=["add"])
    async with (
        closing(tools) as connection,
        open_rig(*steps, tools=tools, access_policy=policy) as rig,
    ):
        await rig.submit("go")
        # The turn waits in ``hold`` until the kill, then at the gate of ``add``
        # until the server is back.
        await assert_eventually((http_process.pid_dir / "hold.pid").exists, timeout=20)
        http_process.kill()
        requested = await rig.recorder.wait_for_type(PermissionRequested)
        http_process.start()
        await rig.session.respond_gate(requested.gate_id, "approve")
        await rig.idle()
        first, second = rig.recorder.of_type(StepDone)[:2]
        assert results(first) == [("u1", True, EXITED)]
        assert results(second) == [("u2", False, "5")]
        assert connection.starts == 2


async def test_server_died_while_idle_next_call_restarts_it(
    stdio_server: StdioServer,
) -> None:
    """A server that exits between calls is restarted by the next call."""
    tools = mcp_tools(stdio_server, include=["add", "pid"])
    steps = [
        tool_step(call("pid", id="u0")),
        tool_step(call("add", ADD, id="u1")),
        text_step("ok"),
    ]
    policy = AccessRules(allow=["pid"], ask=["add"])
    async with (
        closing(tools) as connection,
        open_rig(*steps, tools=tools, access_policy=policy) as rig,
    ):
        await rig.submit("go")
        # The turn waits at the gate of ``add`` while the idle server dies.
        requested = await rig.recorder.wait_for_type(PermissionRequested)
        first = rig.recorder.of_type(StepDone)[0]
        held = int(results(first)[0][2])
        os.kill(held, signal.SIGKILL)
        await assert_eventually(lambda: not process_alive(held), timeout=10)
        await assert_eventually(lambda: not connection.connected, timeout=10)
        await rig.session.respond_gate(requested.gate_id, "approve")
        await rig.idle()
        assert results(rig.recorder.of_type(StepDone)[1]) == [("u1", False, "5")]
        assert connection.starts == 2


async def test_interrupt_during_a_call_keeps_the_session(
    stdio_server: StdioServer, tmp_path: Path
) -> None:
    """An interrupted turn cancels its MCP call; the next turn uses the same server."""
    tools = mcp_tools(stdio_server, include=["add", "hold"])
    steps = [
        tool_step(call("hold", id="u1")),
        tool_step(call("add", ADD, id="u2")),
        text_step("5"),
    ]
    policy = AccessRules(allow=["add", "hold"])
    async with (
        closing(tools) as connection,
        open_rig(*steps, tools=tools, access_policy=policy) as rig,
    ):
        first = await rig.submit("hold")
        # The turn waits in ``hold`` (its call in flight) until the interrupt.
        await assert_eventually((tmp_path / "hold.pid").exists, timeout=20)
        assert await rig.session.interrupt() is True
        await rig.idle()
        second = await rig.submit("add")
        await rig.idle()
        assert rig.after_start() == [
            ("TurnStarted", 1, first, "User:hold"),
            ("PermissionDecided", "hold", "approve", "access_evaluated"),
            ("ToolCallStarted", "u1"),
            ("TurnInterrupted", 1),
            ("LoopIdle",),
            ("TurnStarted", 2, second, "User:add"),
            ("PermissionDecided", "add", "approve", "access_evaluated"),
            ("ToolCallStarted", "u2"),
            ("ToolCallCompleted", "u2", False),
            ("StepDone", ("AI:tool_use:u2", "Tool:u2:5")),
            ("StepDone", ("AI:5",)),
            ("TurnDone", 2, "AI:5"),
            ("LoopIdle",),
        ]
        assert connection.connected
        assert connection.starts == 1


async def test_agent_host_starts_and_stops_the_server(
    stdio_server: StdioServer,
) -> None:
    tools = mcp_tools(stdio_server, include=["add", "pid"])
    agent = Agent(
        name="calc",
        model="scripted-model",
        tools=tools,
        access=AccessRules(allow=["add"]),
    )
    host = AgentHost([agent], lambda _a: ScriptedModel([]))
    connection = connection_of(tools)
    assert host.tool_resources() == (connection,)
    async with host.tools_open():
        assert connection.connected
        assert connection.starts == 1
        result = await connection.call("pid", {})
        pid = int(result.content[0].text)  # type: ignore[union-attr]
        assert process_alive(pid)
    assert not connection.connected
    await assert_eventually(lambda: not process_alive(pid), timeout=10)


async def test_connection_as_a_context_manager(stdio_server: StdioServer) -> None:
    """Without an agent host (embedded use), ``async with`` opens and closes it."""
    (tool,) = mcp_tools(stdio_server, include=["add"])
    async with tool.resource() as connection:
        assert connection.connected
        assert result_text(await connection.call("add", {"a": 1, "b": 2})) == "3"
    assert not connection.connected


async def test_http_server_gone_is_an_error_result_not_a_crash() -> None:
    server = HttpServer(
        name="nowhere", url="http://127.0.0.1:9/mcp", connect_timeout=2.0
    )
    tool = McpTool(McpConnection(server), _info("add"))
    steps = [tool_step(call("add", ADD, id="u1")), text_step("x")]
    async with (
        closing([tool]),
        open_rig(*steps, tools=[tool], access_policy=AccessRules(allow=["add"])) as rig,
    ):
        await rig.submit("go")
        await rig.idle()
        assert results(rig.recorder.of_type(StepDone)[0]) == [
            ("u1", True, "error: mcp unavailable: the tool server is unavailable")
        ]


def _info(name: str) -> McpToolInfo:
    return McpToolInfo(name=name, input_schema={"type": "object"})


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped) still answers kill 0.
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "State:\tZ" in status.read_text(encoding="utf-8"))
