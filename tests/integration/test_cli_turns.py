"""The turn commands on a real broker: actor run + chat + tail, metrics, errors.

Each test gets its own topic set (a unique prefix) and consumer group. The
actor and the clients run as real processes (`python -m turnstream.cli.main
…`), exactly as a person would start them; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import re
import signal
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.support.eventually import assert_eventually
from tests.support.kafka_harness import (
    apply_topic_set,
    delete_topic_set,
    unique_prefix,
)
from typer.testing import CliRunner

from turnstream.cli.main import app
from turnstream.kafka.admin.topics import apply_topics, load_topic_set, resolve_topics
from turnstream.kafka.connection import KafkaConnection

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PROJECT_DIR = Path(__file__).resolve().parents[2]
EXAMPLE_DIR = PROJECT_DIR / "examples" / "agents"
CLI = [sys.executable, "-m", "turnstream.cli.main"]
WAIT = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cli_env(bootstrap: str, prefix: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
    env.update(
        KAFKA_BOOTSTRAP_SERVERS=bootstrap,
        TURNSTREAM_TOPIC_PREFIX=prefix,
        PYTHONUNBUFFERED="1",
        COLUMNS="200",
    )
    return env


async def http_get(port: int, path: str) -> tuple[int, str]:
    async with asyncio.timeout(5):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        await writer.drain()
        raw = await reader.read()
        writer.close()
        await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body.decode()


async def run_cli(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *CLI,
        *args,
        env=env,
        cwd=PROJECT_DIR,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(WAIT):
        out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@dataclasses.dataclass
class Actor:
    process: asyncio.subprocess.Process
    metrics_port: int
    env: dict[str, str]


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """In-process CLI runs configure the root logger: put it back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


@pytest.fixture
async def topic_prefix(kafka_bootstrap: str) -> AsyncIterator[str]:
    prefix = unique_prefix("cli")
    await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    try:
        yield prefix
    finally:
        await delete_topic_set(kafka_bootstrap, prefix)


@contextlib.asynccontextmanager
async def actor_run(
    bootstrap: str, prefix: str, *extra: str, cwd: Path = PROJECT_DIR
) -> AsyncIterator[Actor]:
    """`turnstream actor run` on a topic set, stopped with SIGTERM."""
    port = free_port()
    env = cli_env(bootstrap, prefix)
    process = await asyncio.create_subprocess_exec(
        *CLI,
        "actor",
        "run",
        "--group",
        f"{prefix}actors",
        "--metrics-port",
        str(port),
        "--chunk-delay",
        "0.05",
        "--log-format",
        "json",
        *extra,
        env=env,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        yield Actor(process, port, env)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(WAIT):
            await process.wait()


@pytest.fixture
async def actor(kafka_bootstrap: str, topic_prefix: str) -> AsyncIterator[Actor]:
    """`turnstream actor run` (the built-in agent) on the test's topic set."""
    async with actor_run(kafka_bootstrap, topic_prefix) as running:
        yield running


@pytest.fixture
async def support_actor(
    kafka_bootstrap: str, topic_prefix: str
) -> AsyncIterator[Actor]:
    """`actor run --agent acme.agents:support`: it asks before ``word_count``."""
    async with actor_run(
        kafka_bootstrap,
        topic_prefix,
        "--agent",
        "acme.agents:support",
        cwd=EXAMPLE_DIR,
    ) as running:
        yield running


async def wait_ready(actor: Actor) -> None:
    async def ready() -> None:
        assert actor.process.returncode is None, "the actor exited"
        try:
            status, _ = await http_get(actor.metrics_port, "/ready")
        except OSError as exc:
            raise AssertionError(f"endpoint not up: {exc}") from exc
        assert status == 200, f"/ready answered {status}"

    await assert_eventually(ready, timeout=WAIT, interval=0.2)


def scrape(body: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }


async def test_actor_run_chat_tail_and_metrics(actor: Actor) -> None:
    """A chat streams a tool-using turn (exit 0); tail replays it; metrics count it."""
    await wait_ready(actor)

    code, out, err = await run_cli("chat", "What is 12 + 30 + 8?", env=actor.env)

    assert code == 0, f"{out}\n{err}"
    assert "ToolCallStarted" in out
    assert "TokenDelta" in out
    assert re.search(r"^TurnDone .* #1 answer=", out, re.M), out
    assert "The total is 50." in out
    match = re.search(r"loop ([0-9a-f-]{36})", err)
    assert match, err
    loop_id = match.group(1)

    code, replay, err = await run_cli(
        "tail", "--loop", loop_id, "--from-beginning", "--no-follow", env=actor.env
    )
    assert code == 0, f"{replay}\n{err}"
    kinds = [line.split(" ", 1)[0] for line in replay.splitlines()]
    # The built-in agent's policy allows the demo tools: each call is decided
    # durably (PermissionDecided) before its step commits.
    assert kinds[:8] == [
        "LoopStarted",
        "TurnStarted",
        "PermissionDecided",
        "StepDone",
        "PermissionDecided",
        "StepDone",
        "StepDone",
        "TurnDone",
    ]
    assert kinds[8:] in ([], ["LoopIdle"])  # the idle edge commits right after

    status, body = await http_get(actor.metrics_port, "/metrics")
    assert status == 200
    metrics = scrape(body)
    assert metrics[("turnstream_turns_started_total", ())] >= 1
    assert metrics[("turnstream_steps_total", ())] >= 3
    assert metrics[("turnstream_turn_terminals_total", (("kind", "TurnDone"),))] >= 1
    assert metrics[("turnstream_commit_latency_seconds_count", ())] >= 1
    assert ("turnstream_delta_drops_total", ()) in metrics
    assert metrics[("turnstream_ready", ())] == 1

    actor.process.send_signal(signal.SIGTERM)
    async with asyncio.timeout(WAIT):
        _, logs = await actor.process.communicate()
    assert actor.process.returncode == 0, logs.decode()
    records = [json.loads(line) for line in logs.decode().splitlines() if line]
    assert {r["level"] for r in records} <= {"debug", "info", "warning"}
    assert all("What is 12" not in json.dumps(r) for r in records)


async def test_chat_ctrl_c_interrupts_the_turn_and_exits_130(
    support_actor: Actor,
) -> None:
    """SIGINT during a turn: an Interrupt is sent, TurnInterrupted, exit 130.

    The turn is held, not raced: the agent asks before ``word_count``, so the
    turn waits on its approval gate (nobody answers) until the SIGINT lands.
    """
    actor = support_actor
    await wait_ready(actor)
    process = await asyncio.create_subprocess_exec(
        *CLI,
        "chat",
        "count these four words",
        "--agent",
        "support",
        env=actor.env,
        cwd=PROJECT_DIR,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    seen = b""
    async with asyncio.timeout(WAIT):
        while b"PermissionRequested" not in seen:
            chunk = await process.stdout.read(256)
            assert chunk, f"chat ended early: {seen.decode()}"
            seen += chunk
        process.send_signal(signal.SIGINT)
        rest, err = await process.communicate()

    output = (seen + rest).decode()
    assert process.returncode == 130, f"{output}\n{err.decode()}"
    assert re.search(r"^TurnInterrupted ", output, re.M), output
    assert "ToolCallCompleted" not in output  # the gated call never ran


def test_chat_on_missing_topics_names_the_fix(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No topic set under the prefix: exit 2, 'topic X does not exist; run …'."""
    prefix = f"missing-{uuid.uuid4().hex[:8]}."
    monkeypatch.setenv("TURNSTREAM_TOPIC_PREFIX", prefix)

    result = CliRunner().invoke(app, ["chat", "hi", "--bootstrap", kafka_bootstrap])

    assert result.exit_code == 2, result.output
    assert f"topic {prefix}turnstream." in result.output
    assert "does not exist; run `turnstream topics apply`" in result.output
    assert "Traceback" not in result.output


async def test_wrong_topic_config_is_the_typed_mismatch(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compacted journal topic stops `actor run --ensure-topics` and `demo` (1)."""
    prefix = unique_prefix("cli-mismatch")
    spec = resolve_topics(
        load_topic_set(PROJECT_DIR / "infra" / "topics.yaml"), prefix=prefix
    )
    wrong = [
        dataclasses.replace(t, config={**t.config, "cleanup.policy": "compact"})
        if t.name.endswith("turnstream.events.v1")
        else t
        for t in spec
    ]
    await apply_topics(KafkaConnection(bootstrap=kafka_bootstrap), wrong)
    monkeypatch.setenv("TURNSTREAM_TOPIC_PREFIX", prefix)
    try:
        for args in (
            [
                "actor",
                "run",
                "--ensure-topics",
                "infra/topics.yaml",
                "--metrics-port",
                "0",
            ],
            ["demo"],
        ):
            result = await asyncio.to_thread(
                CliRunner().invoke, app, [*args, "--bootstrap", kafka_bootstrap]
            )
            assert result.exit_code == 1, result.output
            assert "cleanup.policy is 'compact', expected 'delete'" in result.output
            assert "fix or recreate" in result.output
            assert "topic_config_mismatch" in result.output
    finally:
        await delete_topic_set(kafka_bootstrap, prefix)
