"""The client guide's gateway sample runs as written, against ``turnstream gateway``.

The ``turnstream gateway`` command runs as a child process (the console entry
point, ``--keepalive 1``) on a fresh topic set served by an in-process loop actor
with the demo model; ``docs/client.md``'s ``sh`` block marked for this test runs in bash
with ``$GATEWAY`` and ``$TOKEN`` set. What it wrote is checked: the first stream
read to ``TurnDone``; the reconnect with ``Last-Event-ID`` got exactly the events
after the third one (same ids, same order); the loop's state says one turn, idle.
SIGTERM stops the gateway with exit 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import sys
from pathlib import Path

import httpx
import pytest
from tests.support.eventually import assert_eventually
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    Models,
    apply_topic_set,
    collect_garbage,
    collect_garbage_late,
    delete_topic_set,
    running,
    service_for,
    unique_prefix,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(180)]

GUIDE = Path(__file__).resolve().parents[2] / "docs/client.md"
_BLOCK = re.compile(
    r"<!-- run by tests/integration/test_readme_gateway.py[^>]*-->\n```sh\n(.*?)^```",
    re.DOTALL | re.MULTILINE,
)
TOKEN = "readme-token-0123456789abcdef"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ids(text: str) -> list[str]:
    return [line[4:] for line in text.splitlines() if line.startswith("id: ")]


def _types(text: str) -> list[str]:
    return [line[7:] for line in text.splitlines() if line.startswith("event: ")]


async def test_readme_gateway_sample_runs(kafka_bootstrap: str, tmp_path: Path) -> None:
    (block,) = _BLOCK.findall(GUIDE.read_text(encoding="utf-8"))
    prefix = unique_prefix("readme-gw")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    (tmp_path / "tokens.txt").write_text(f"alice {TOKEN}\n", encoding="utf-8")
    port = _free_port()
    gateway_url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "TURNSTREAM_TOPIC_PREFIX": prefix,
    }
    service = service_for(
        kafka_bootstrap, topics, group_id=f"{prefix}actors", models=Models()
    )
    try:
        async with running(service):
            gateway = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "turnstream.cli",
                "gateway",
                "--tokens",
                str(tmp_path / "tokens.txt"),
                "--port",
                str(port),
                "--keepalive",
                "1",
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
            try:
                async with httpx.AsyncClient(base_url=gateway_url) as http:

                    async def ready() -> None:
                        assert gateway.returncode is None, "the gateway exited"
                        try:
                            health = await http.get("/healthz")
                        except httpx.TransportError as exc:
                            raise AssertionError("not listening yet") from exc
                        assert health.json()["ok"]

                    await assert_eventually(ready, timeout=60, message="no gateway")
                shell = await asyncio.create_subprocess_exec(
                    "bash",
                    "-eu",
                    "-c",
                    block,
                    cwd=tmp_path,
                    env={**env, "GATEWAY": gateway_url, "TOKEN": TOKEN},
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                )
                async with asyncio.timeout(90):
                    out, err = await shell.communicate()
                assert shell.returncode == 0, err.decode()
            finally:
                if gateway.returncode is None:
                    gateway.send_signal(signal.SIGTERM)
                async with asyncio.timeout(30):
                    _, log = await gateway.communicate()
            assert gateway.returncode == 0, log.decode()[-2000:]
    finally:
        await delete_topic_set(kafka_bootstrap, prefix)

    events = (tmp_path / "events.txt").read_text(encoding="utf-8")
    resumed = (tmp_path / "resumed.txt").read_text(encoding="utf-8")
    assert _types(events)[-1] == "TurnDone", events
    assert "TokenDelta" in _types(events)
    assert _ids(resumed) == _ids(events)[3:]
    assert _types(resumed) == _types(events)[3:]
    state = json.loads(out)
    created = json.loads((tmp_path / "created.json").read_text(encoding="utf-8"))
    assert state["loop_id"] == created["loop_id"]
    assert (state["status"], state["turns"]) == ("idle", 1), state
