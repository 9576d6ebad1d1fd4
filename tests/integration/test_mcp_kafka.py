"""An agent using a stdio MCP server's tools, hosted by a real loop actor on the broker.

A ``python -m turnstream.loop_actor --agent mcp_agent:calc`` child process hosts an
agent (written to a fresh directory, as a user would) whose ``add`` tool is the
test MCP server's (``tests/support/mcp_server.py``), with turnstream's offline demo
model. Checked: the server process starts with the actor (before any turn), a turn
calls it end to end through Kafka, the server killed between turns is started again
by the next call, and SIGTERM stops the actor and its server. Every tool result is
read back from the committed journal.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
from pathlib import Path
from uuid import uuid4

import pytest
from tests.integration.test_agents_kafka import ActorProcess, results
from tests.support.eventually import assert_eventually
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    apply_topic_set,
    collect_garbage,
    collect_garbage_late,
    connect,
    delete_topic_set,
)

from turnstream.ids import LoopId
from turnstream.kafka.client.turns import TurnStatus

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(240)]

SERVER_SCRIPT = Path(__file__).resolve().parents[1] / "support" / "mcp_server.py"
WAIT = 60.0

AGENT_MODULE = """
import sys

from turnstream.mcp import StdioServer, mcp_tools
from turnstream.runtime import AccessRules, Agent

server = StdioServer(
    name="calc", command=sys.executable, args=({script!r}, "stdio"), call_timeout=20
)
calc = Agent(
    name="calc",
    model="demo",
    tools=[*mcp_tools(server, include=["add"])],
    access=AccessRules(allow=["add"]),
)
"""


def mcp_children(parent: int) -> list[int]:
    """The pids of ``parent``'s child processes running the test MCP server."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(encoding="utf-8")
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue  # gone meanwhile
        fields = stat.rsplit(")", 1)[1].split()
        state, ppid = fields[0], int(fields[1])
        if ppid == parent and state != "Z" and "mcp_server.py" in cmdline:
            found.append(int(entry.name))
    return found


async def test_actor_hosts_an_agent_with_mcp_tools(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = f"it-mcp-{uuid4().hex[:10]}."
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    session = await connect(kafka_bootstrap, topics)
    (tmp_path / "mcp_agent.py").write_text(
        textwrap.dedent(AGENT_MODULE.format(script=str(SERVER_SCRIPT))),
        encoding="utf-8",
    )
    argv = [
        sys.executable,
        "-m",
        "turnstream.loop_actor",
        "--bootstrap",
        kafka_bootstrap,
        "--group-id",
        f"{prefix}actors",
        "--topic-prefix",
        prefix,
        "--txn-prefix",
        "mcp",
        "--session-timeout-ms",
        "6000",
        "--agent",
        "mcp_agent:calc",
    ]
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=tmp_path,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    actor = ActorProcess(process)
    actor.reader = asyncio.create_task(actor.follow())
    try:
        await assert_eventually(
            lambda: actor.partitions == {0},
            timeout=WAIT,
            message=f"actor not ready: {actor.lines[-5:]}",
        )
        # The server runs with the actor, before any turn.
        (first,) = await assert_eventually(
            lambda: mcp_children(process.pid) or False, timeout=WAIT
        )

        loop_id = LoopId(uuid4())
        outcome = await session.submit_and_wait(
            "add 2 3", loop_id=loop_id, agent="calc", timeout=WAIT
        )
        assert outcome.status is TurnStatus.DONE, outcome
        assert outcome.text.endswith("The total is 5.")
        assert results(await session.replay(loop_id)) == [(False, "5")]
        assert mcp_children(process.pid) == [first]

        # Killed between turns: the next call starts a new server.
        os.kill(first, signal.SIGKILL)
        await assert_eventually(
            lambda: any(
                "mcp server closed the session" in line for line in actor.lines
            ),
            timeout=WAIT,
            message="the actor did not notice its server's exit",
        )
        outcome = await session.submit_and_wait(
            "add 1 1", loop_id=loop_id, agent="calc", timeout=WAIT
        )
        assert outcome.status is TurnStatus.DONE, outcome
        assert results(await session.replay(loop_id)) == [(False, "5"), (False, "2")]
        (second,) = mcp_children(process.pid)
        assert second != first

        # SIGTERM: the actor stops, and its server with it.
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(WAIT):
            assert await process.wait() == 0, actor.lines[-5:]
        with pytest.raises(ProcessLookupError):
            os.kill(second, 0)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        actor.reader.cancel()
        await asyncio.gather(actor.reader, return_exceptions=True)
        await session.close()
        await delete_topic_set(kafka_bootstrap, prefix)
