"""The operations guide's traces sample runs as written, against a real Jaeger.

A fresh Jaeger all-in-one (free ports) and a topic set of the test's own;
``docs/operations.md``'s ``sh`` block marked for this test runs in bash with
``$OTLP`` and ``$JAEGER`` naming that Jaeger: ``turnstream actor run`` exporting
spans, one ``turnstream chat`` turn, the trace read back from Jaeger's query
API into ``trace.json``, the actor stopped with SIGTERM (exit 0), then
``turnstream traces export`` from the journal alone. What it wrote is checked:
one trace whose spans are the turn, its three steps, their model requests and
two tool calls, each under its parent; the export sent as many spans, of one
turn.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tests.support.jaeger import jaeger_binary, running_jaeger
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    apply_topic_set,
    collect_garbage,
    collect_garbage_late,
    delete_topic_set,
    unique_prefix,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(240)]

GUIDE = Path(__file__).resolve().parents[2] / "docs/operations.md"
_BLOCK = re.compile(
    r"<!-- run by tests/integration/test_traces_docs.py[^>]*-->\n```sh\n(.*?)^```",
    re.DOTALL | re.MULTILINE,
)
_EXPORTED = re.compile(r"exported (\d+) span\(s\) of (\d+) turn\(s\)")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _parents(spans: list[dict[str, Any]]) -> dict[str, str]:
    """Each span's operation name -> its parent's, for every span with a parent."""
    names = {span["spanID"]: span["operationName"] for span in spans}
    found: dict[str, str] = {}
    for span in spans:
        for ref in span.get("references", []):
            if ref.get("refType") == "CHILD_OF" and ref["spanID"] in names:
                found.setdefault(span["operationName"], names[ref["spanID"]])
    return found


async def test_the_traces_sample_runs_as_written(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    (block,) = _BLOCK.findall(GUIDE.read_text(encoding="utf-8"))
    binary = jaeger_binary()
    if binary is None:
        reason = "no Jaeger binary and no Go to build it (infra/jaeger/build.sh)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    prefix = unique_prefix("docs-traces")
    await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    try:
        with running_jaeger(binary, tmp_path) as jaeger:
            venv_bin = Path(sys.executable).parent
            env = {
                **os.environ,
                "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}",
                "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
                "TURNSTREAM_TOPIC_PREFIX": prefix,
                "TURNSTREAM_GROUP_ID": f"{prefix}actors",
                "TURNSTREAM_METRICS_PORT": str(_free_port()),
                "OTLP": jaeger.otlp_endpoint,
                "JAEGER": jaeger.query_url,
            }
            shell = await asyncio.create_subprocess_exec(
                "bash",
                "-euo",
                "pipefail",
                "-c",
                block,
                cwd=tmp_path,
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            async with asyncio.timeout(180):
                out, _ = await shell.communicate()
        text = out.decode()
        assert shell.returncode == 0, text[-3000:]
        assert "TurnDone" in text, text[-3000:]
        (trace,) = json.loads((tmp_path / "trace.json").read_text())["data"]
        spans = trace["spans"]
        assert Counter(span["operationName"] for span in spans) == {
            "invoke_agent": 1,
            "step": 3,
            "chat demo": 3,
            "execute_tool add": 2,
        }
        assert _parents(spans) == {
            "step": "invoke_agent",
            "chat demo": "step",
            "execute_tool add": "step",
        }
        exported = _EXPORTED.search(text)
        assert exported is not None, text[-3000:]
        assert (int(exported[1]), int(exported[2])) == (len(spans), 1)
    finally:
        await delete_topic_set(kafka_bootstrap, prefix)
