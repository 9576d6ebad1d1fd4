"""A processor written from the analytics guide gets every faust fix.

``docs/analytics.md``'s "Writing your own processor" code block is executed as
written, with only its app id and alerts topic replaced by per-test names, against
the real broker. The settings come from the environment the guide names
(``KAFKA_BOOTSTRAP_SERVERS``, ``TURNSTREAM_ANALYTICS_EVENTS_TOPIC``), and the
journal has 2 partitions, not the topic set's 3: the processor must read the
count from the topic. The journal holds committed failure streaks and an
aborted one (``read_committed`` must hide it).
"""

from __future__ import annotations

import asyncio
import gc
import json
import re
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from tests.support.eventually import assert_eventually
from tests.support.kafka import KafkaNames, consume_all, create_topic, partitions_of

from turnstream.analytics.aggregate import TerminalKind
from turnstream.analytics.sample import LoopPlan, TurnPlan, build_journal
from turnstream.analytics.transport import FixedTransport, isolation_level
from turnstream.events import EnduringEvent, FailureKind
from turnstream.wire.codec import marshal_event

pytestmark = [
    pytest.mark.kafka,
    # faust leaves sockets and a sleep task behind when an in-process app stops
    # (see test_analytics_kafka.py); they surface as warnings when collected.
    pytest.mark.filterwarnings("ignore:unclosed:ResourceWarning"),
    pytest.mark.filterwarnings(
        "ignore:coroutine 'sleep' was never awaited:RuntimeWarning"
    ),
]

GUIDE = Path(__file__).resolve().parents[2] / "docs/analytics.md"
FAILED, DONE = TerminalKind.FAILED, TerminalKind.DONE
IO_TIMEOUT = 20.0


def recipe() -> str:
    """The guide's processor code block (the one that calls ``build_app``)."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split("## Writing your own processor", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    (code,) = [b for b in blocks if "build_app(" in b]
    return str(code)


def loop(loop_id: int, *outcomes: TerminalKind) -> list[EnduringEvent]:
    turns = [TurnPlan(o, failure=FailureKind.PROVIDER) for o in outcomes]
    plan = LoopPlan(turns=turns, loop_id=uuid.UUID(int=loop_id, version=4))
    return build_journal([plan], seed=loop_id)


async def produce(
    bootstrap: str,
    topic: str,
    events: Sequence[EnduringEvent],
    transactional_id: str,
    *,
    abort: bool = False,
) -> None:
    """Write ``events`` keyed by loop id in one transaction."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=transactional_id
    )
    async with asyncio.timeout(IO_TIMEOUT):
        await producer.start()
        try:
            await producer.begin_transaction()
            for event in events:
                key = str(event.header.loop_id).encode()
                await producer.send(topic, key=key, value=marshal_event(event))
            if abort:
                await producer.abort_transaction()
            else:
                await producer.commit_transaction()
        finally:
            await producer.stop()


async def alerted_loops(bootstrap: str, topic: str, expected: int) -> list[str]:
    records = await consume_all(bootstrap, topic)
    assert len(records) >= expected, f"{len(records)} alerts so far"
    return sorted(json.loads(r.value or b"null")["loop_id"] for r in records)


@pytest.mark.timeout(180)
async def test_processor_from_the_readme_recipe_gets_every_fix(
    kafka_bootstrap: str,
    kafka_names: KafkaNames,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The recipe reads its settings, co-partitions with a 2-partition journal,
    reads committed records only, and alerts exactly for the committed streaks."""
    prefix = kafka_names.prefix()  # the app's changelog starts with it (cleanup)
    events_topic = f"{prefix}events"
    app_id, alerts_topic = f"{prefix}streaks", f"{prefix}alerts"
    await create_topic(kafka_bootstrap, events_topic, partitions=2)
    streak_a = loop(0xA1, FAILED, FAILED, FAILED)
    no_streak = loop(0xB2, FAILED, FAILED, DONE, FAILED)
    streak_c = loop(0xC3, FAILED, FAILED, FAILED, FAILED)
    await produce(
        kafka_bootstrap,
        events_topic,
        [*streak_a, *no_streak, *streak_c],
        kafka_names.transactional_id(),
    )
    await produce(
        kafka_bootstrap,
        events_topic,
        loop(0xD4, FAILED, FAILED, FAILED),
        kafka_names.transactional_id(),
        abort=True,
    )
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("TURNSTREAM_ANALYTICS_EVENTS_TOPIC", events_topic)
    monkeypatch.chdir(tmp_path)  # the example's data directory is relative
    code = recipe()
    assert '"my-streaks"' in code
    assert '"my.alerts"' in code
    code = code.replace('"my-streaks"', repr(app_id))
    code = code.replace('"my.alerts"', repr(alerts_topic))

    namespace: dict[str, Any] = {}
    exec(compile(code, str(GUIDE), "exec"), namespace)  # noqa: S102 - the guide's own code
    streak = namespace["streak"]
    assert isinstance(streak.app.transport, FixedTransport)
    assert type(streak.app.flow_control).__name__ == "_QueueKeepingFlowControl"

    stop = asyncio.Event()
    watching = asyncio.create_task(namespace["watch"](stop))
    try:

        async def two_alerts() -> list[str]:
            if watching.done():  # the processor stopped: show why, at once
                watching.result()
                raise AssertionError("the processor stopped by itself")
            return await alerted_loops(kafka_bootstrap, alerts_topic, 2)

        loops = await assert_eventually(
            two_alerts,
            timeout=90,
            message="two alerts",
        )
        assert loops == [
            str(streak_a[0].header.loop_id),
            str(streak_c[0].header.loop_id),
        ]
        assert isolation_level(streak.app) == "read_committed"
        changelog = streak.table.changelog_topic.get_topic_name()
        assert await partitions_of(kafka_bootstrap, changelog) == [0, 1]
        assert streak.app.conf.topic_partitions == 2
        stored = streak.table[str(no_streak[0].header.loop_id)]
        assert stored["kinds"] == ["provider"]  # DONE reset it, one failure after
    finally:
        stop.set()
        async with asyncio.timeout(60):
            await watching
        gc.collect()
    assert len(await alerted_loops(kafka_bootstrap, alerts_topic, 2)) == 2
