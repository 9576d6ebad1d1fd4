"""``turnstream respond`` on a real broker: short ids, closed and unknown gates."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from uuid import uuid4

import pytest
import pytest_asyncio
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    Models,
    apply_topic_set,
    collect_garbage,
    collect_until,
    connect,
    count_type,
    delete_topic_set,
    loop_filter,
    running,
    service_for,
    unique_prefix,
)
from typer.testing import CliRunner, Result

from turnstream.cli.main import app
from turnstream.events import GateCloseReason, GateOpened, GateResolved
from turnstream.ids import LoopId
from turnstream.kafka.client.session import KafkaSession
from turnstream.testing import FunctionTool, ScriptedModel, call, text_step, tool_step

pytestmark = [pytest.mark.kafka]


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


@pytest_asyncio.fixture
async def lane(kafka_bootstrap: str) -> AsyncIterator[tuple[str, Models, KafkaSession]]:
    prefix = unique_prefix("respond")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=1)
    remove = FunctionTool("rm", lambda _i, _c: "removed", approval=True)
    models = Models(tools=(remove,))
    service = service_for(
        kafka_bootstrap, topics, group_id=f"{prefix}actors", models=models
    )
    try:
        async with running(service):
            session = await connect(kafka_bootstrap, topics)
            try:
                yield prefix, models, session
            finally:
                await session.close()
    finally:
        await delete_topic_set(kafka_bootstrap, prefix)


async def _respond(bootstrap: str, prefix: str, *args: str) -> Result:
    env = {"KAFKA_BOOTSTRAP_SERVERS": bootstrap, "TURNSTREAM_TOPIC_PREFIX": prefix}
    # The command runs its own event loop: give it a thread of its own.
    return await asyncio.to_thread(CliRunner().invoke, app, ["respond", *args], env=env)


async def test_respond_takes_the_short_id_and_refuses_a_closed_gate(
    kafka_bootstrap: str, lane: tuple[str, Models, KafkaSession]
) -> None:
    """The 8-digit id chat prints is enough; answering the gate again (now
    closed) or a gate the loop never opened sends nothing and exits 1.
    """
    prefix, models, session = lane
    loop_id = LoopId(uuid4())
    models.by_loop[loop_id] = ScriptedModel(
        [tool_step(call("rm", id="u1")), text_step("ok")]
    )
    watch = session.subscribe_events(loop_filter(loop_id))
    await session.submit("clean up", loop_id=loop_id)
    seen = await collect_until(watch, count_type("GateOpened"))
    gate_id = next(e for e in seen if isinstance(e, GateOpened)).gate_id

    first = await _respond(
        kafka_bootstrap, prefix, gate_id.hex[:8], "--loop", str(loop_id)
    )
    assert first.exit_code == 0, first.output
    assert f"sent approve for gate {gate_id}" in first.output
    rest = await collect_until(watch, count_type("LoopIdle"))
    resolved = [e for e in rest if isinstance(e, GateResolved)]
    assert [(r.reason, r.action) for r in resolved] == [
        (GateCloseReason.ANSWERED, "approve")
    ]

    again = await _respond(
        kafka_bootstrap, prefix, str(gate_id), "--deny", "--loop", str(loop_id)
    )
    assert again.exit_code == 1, again.output
    assert "already closed (answered approve)" in again.output
    assert "sent" not in again.output.replace("not sent", "")

    unknown = await _respond(
        kafka_bootstrap, prefix, str(uuid4()), "--loop", str(loop_id)
    )
    assert unknown.exit_code == 1, unknown.output
    assert "has no gate" in unknown.output

    journal = await session.replay(loop_id)
    assert sum(isinstance(e, GateResolved) for e in journal) == 1
