"""Java and Go write commands a real loop actor answers, and read its journal.

Each example program submits a ``SubmitInput`` to its own loop; the record
must land on the partition Kafka's Java default partitioner picks for the loop
id, and the actor must answer with ``TurnStarted`` and ``TurnDone``. Both
readers then decode every committed record of the run's journal and commands
topic and must agree with the Python codec on partition, offset, key, type and
id.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import pytest_asyncio
from aiokafka.partitioner import murmur2
from tests.interop.programs import (
    CODEC,
    PROJECT_DIR,
    READERS,
    SCHEMAS,
    WRITER_PROGRAMS,
    Program,
    python_view,
    run,
)
from tests.support.eventually import assert_eventually
from tests.support.kafka import consume_all, delete_topics, list_topics

from turnstream.events import LoopDeleted, TurnDone, TurnStarted
from turnstream.ids import LoopId
from turnstream.kafka.client.session import KafkaSession
from turnstream.kafka.topology import TopicNames
from turnstream.wire import Topic

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.slow,
    pytest.mark.asyncio(loop_scope="module"),
]

PARTITIONS = 3  # infra/topics.yaml
WAIT = 60.0


# ------------------------------------------------------------ a real actor run


@dataclass
class ActorRun:
    bootstrap: str
    prefix: str
    process: asyncio.subprocess.Process

    def topic(self, topic: Topic) -> str:
        return f"{self.prefix}{topic.value}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def ready(port: int) -> None:
    try:
        async with asyncio.timeout(5):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /ready HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            head = await reader.readline()
            writer.close()
            await writer.wait_closed()
    except OSError as exc:
        raise AssertionError(f"/ready not up: {exc}") from exc
    assert head.split(b" ")[1] == b"200", head


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def actor_run(kafka_bootstrap: str) -> AsyncIterator[ActorRun]:
    """`turnstream actor run` (demo model) on its own topic set, stopped by SIGTERM."""
    prefix = f"it19-{uuid.uuid4().hex[:10]}."
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
    env.update(KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap, PYTHONUNBUFFERED="1")
    # This checkout's code and schemas, whatever the venv's install points at.
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PROJECT_DIR / "services"), env.get("PYTHONPATH")) if p
    )
    process = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "turnstream.cli.main", "actor", "run"],
        *["--model", "demo", "--topic-prefix", prefix, "--group", f"{prefix}actors"],
        *["--ensure-topics", "infra/topics.yaml", "--metrics-port", str(port)],
        env=env,
        cwd=PROJECT_DIR,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:

        async def up() -> None:
            assert process.returncode is None, "the actor exited"
            await ready(port)

        await assert_eventually(up, timeout=WAIT, interval=0.3)
        yield ActorRun(kafka_bootstrap, prefix, process)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            async with asyncio.timeout(WAIT):
                await process.communicate()
        topics = await list_topics(kafka_bootstrap)
        await delete_topics(
            kafka_bootstrap, [t for t in topics if t.startswith(prefix)]
        )


@dataclass(frozen=True)
class Submitted:
    writer: str
    loop_id: str
    command_id: str
    partition: int


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def submitted(actor_run: ActorRun) -> list[Submitted]:
    """Each writer submits one message to its own new loop."""
    out = []
    for name, factory in WRITER_PROGRAMS.items():
        loop_id, session_id = str(uuid.uuid4()), str(uuid.uuid4())
        argv = [
            *factory(),
            str(SCHEMAS),
            actor_run.bootstrap,
            actor_run.topic(Topic.COMMANDS),
            loop_id,
            session_id,
            "What is 12 + 30?",
        ]
        (line,) = await asyncio.to_thread(run, argv)
        out.append(Submitted(name, loop_id, line["command_id"], line["partition"]))
    return out


def expected_partition(loop_id: str) -> int:
    """Kafka's Java default partitioner: positive murmur2 of the key, mod n."""
    hashed: int = murmur2(loop_id.encode())
    return (hashed & 0x7FFFFFFF) % PARTITIONS


async def test_writers_land_on_the_java_default_partition(
    submitted: list[Submitted],
) -> None:
    assert [s.partition for s in submitted] == [
        expected_partition(s.loop_id) for s in submitted
    ]


async def assert_answered(actor_run: ActorRun, submitted: list[Submitted]) -> None:
    """TurnStarted caused by each written command, then TurnDone for that turn."""
    records = await consume_all(
        actor_run.bootstrap,
        actor_run.topic(Topic.EVENTS),
        isolation_level="read_committed",
    )
    events = [CODEC.unmarshal_event(r.value) for r in records]
    for s in submitted:
        started = [
            e
            for e in events
            if isinstance(e, TurnStarted)
            and e.header.cause is not None
            and str(e.header.cause.command_id) == s.command_id
        ]
        assert started, f"no TurnStarted for the {s.writer} writer's command"
        turn = started[0].header.turn_id
        done = [e for e in events if isinstance(e, TurnDone)]
        assert any(e.header.turn_id == turn for e in done), (
            f"no TurnDone for the {s.writer} writer's turn"
        )
        assert {str(e.header.loop_id) for e in started} == {s.loop_id}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def finished(actor_run: ActorRun, submitted: list[Submitted]) -> ActorRun:
    """The run once every turn is done, one loop deleted, and the actor stopped.

    The deletion puts a ``DeleteLoop`` on the commands topic, ``LoopDeleted``
    in the journal and a deleted marker on the loops topic, which every reader
    must decode too. Stopping the actor first makes the topics quiescent, so
    the readers and Python see the very same records.
    """
    await assert_eventually(
        lambda: assert_answered(actor_run, submitted), timeout=WAIT, interval=0.5
    )
    topics = TopicNames.with_affixes(prefix=actor_run.prefix)
    async with await KafkaSession.connect(
        actor_run.bootstrap, topics=topics
    ) as session:
        async with asyncio.timeout(WAIT):
            answer = await session.delete_loop(LoopId(uuid.UUID(submitted[0].loop_id)))
    assert isinstance(answer, LoopDeleted), answer
    actor_run.process.send_signal(signal.SIGTERM)
    async with asyncio.timeout(WAIT):
        _, logs = await actor_run.process.communicate()
    assert actor_run.process.returncode == 0, logs.decode()[-4000:]
    return actor_run


async def test_actor_answers_each_writer_with_a_turn(
    finished: ActorRun, submitted: list[Submitted]
) -> None:
    """Both writers' SubmitInput became a turn: TurnStarted, then TurnDone."""
    await assert_answered(finished, submitted)


@pytest.mark.parametrize("topic", list(Topic))
@pytest.mark.parametrize("reader", READERS)
async def test_reader_decodes_the_actor_run_like_python(
    finished: ActorRun, reader: Program, topic: Topic
) -> None:
    """Every committed record of the run: same partition, offset, type, id, key."""
    actor_run = finished
    records = await consume_all(
        actor_run.bootstrap, actor_run.topic(topic), isolation_level="read_committed"
    )
    assert len(records) >= (10 if topic is Topic.EVENTS else 2), len(records)
    want = []
    for r in records:
        _, kind, ident = python_view(r.value)
        want.append((r.partition, r.offset, kind, ident, r.key.decode()))
    argv = [
        *reader(),
        str(SCHEMAS),
        "kafka",
        actor_run.bootstrap,
        actor_run.topic(topic),
        str(len(records)),
        "30",
    ]
    lines = await asyncio.to_thread(run, argv)
    got = [
        (line["partition"], line["offset"], line["type"], line["id"], line["key"])
        for line in lines
    ]
    assert sorted(got) == sorted(want)
    assert all(line["ts_type"] == line["type"] for line in lines)
