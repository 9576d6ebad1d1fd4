"""Every Python sample of the client guide runs, in order, against the real broker.

The ```python blocks are extracted from ``docs/client.md`` and executed one after the
other in one namespace (as a reader pasting them into one file would), in a
worker thread (each calls ``asyncio.run``) while an in-process loop actor with the
demo model serves a fresh topic set. The samples read ``KAFKA_BOOTSTRAP_SERVERS``
and ``TURNSTREAM_TOPIC_PREFIX``, which the test points at that set. What they
print is checked, so a sample that silently does nothing fails too.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
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

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(240)]

GUIDE = Path(__file__).resolve().parents[2] / "docs/client.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_blocks() -> list[str]:
    return _BLOCK.findall(GUIDE.read_text(encoding="utf-8"))


def test_client_guide_has_the_python_samples() -> None:
    """The section exists: produce, retry, stream, consume, decode."""
    blocks = python_blocks()
    assert len(blocks) >= 5
    joined = "\n".join(blocks)
    for needle in (
        "submit_and_wait",
        "submit_turn",
        "attach(",
        "JournalConsumer",
        "unmarshal_event",
        "tool_timings",
    ):
        assert needle in joined


@pytest.fixture
async def lane(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[str]:
    prefix = unique_prefix("readme")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("TURNSTREAM_TOPIC_PREFIX", prefix)
    service = service_for(
        kafka_bootstrap, topics, group_id=f"{prefix}actors", models=Models()
    )
    try:
        async with running(service):
            yield prefix
    finally:
        await delete_topic_set(kafka_bootstrap, prefix)


def _run_all(blocks: list[str]) -> str:
    namespace: dict[str, object] = {"__name__": "readme"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for number, block in enumerate(blocks, 1):
            code = compile(block, f"docs/client.md python block {number}", "exec")
            exec(code, namespace)  # noqa: S102 - the guide's own samples
    return out.getvalue()


async def test_readme_python_samples_run(lane: str) -> None:
    printed = await asyncio.to_thread(_run_all, python_blocks())
    lines = printed.splitlines()
    assert lines[0].startswith("done 1 "), printed[:500]  # status, turn index, text
    assert "[TurnStarted]" in printed
    assert "[TurnDone]" in printed
    assert "done" in lines
    consumed = [line.split() for line in lines if re.match(r"^0 \d+ [A-Z]", line)]
    types = [parts[2] for parts in consumed]
    assert re.search(r"^\[resumed to TurnDone\] e0-[0-9a-f]+-[0-9a-f]+$", printed, re.M)
    assert types.count("TurnDone") == 3, printed  # every turn, every event once
    assert types[0] == "LoopStarted"
    decoded = [line.split() for line in lines if re.match(r"^[0-9a-f-]{36} \d+ ", line)]
    assert [parts[2] for parts in decoded] == types  # same journal, same order
    # Tool latency from the durable per-call timings: "add 2 3" and "add 4 5".
    latency = re.search(
        r"^tool add: (\d+) calls, p50 [0-9.]+ ms, max [0-9.]+ ms$", printed, re.M
    )
    assert latency is not None, printed[-500:]
    assert int(latency.group(1)) == 2, latency.group(0)
