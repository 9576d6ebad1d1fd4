"""Shared helpers of the Kafka lane (no tests here): topic sets, services, journals.

Every helper talks to a real broker; every wait is bounded (``assert_eventually`` or
``asyncio.timeout``). Topic sets are applied with a unique name prefix, so tests never
see each other's records; ``delete_topic_set`` removes them again.
"""

from __future__ import annotations

import asyncio
import gc
import re
import sys
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from tests.support.eventually import assert_eventually
from tests.support.kafka import delete_topics, list_topics, wait_for_topic

from turnstream.events import AnyEvent, EnduringEvent, TurnStarted
from turnstream.ids import LoopId
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.actor.service import LoopActorService, ServiceSettings
from turnstream.kafka.actor.writer import WriterSettings
from turnstream.kafka.admin.topics import apply_topics, load_topic_set, resolve_topics
from turnstream.kafka.client.session import KafkaSession
from turnstream.kafka.clients import KafkaClients
from turnstream.kafka.connection import KafkaConnection
from turnstream.kafka.reader import JournalEntry, read_journal, read_latest_states
from turnstream.kafka.topology import TopicNames
from turnstream.loop_actor.tools import tool_set
from turnstream.models import DemoModel
from turnstream.runtime.config import LoopConfig
from turnstream.runtime.fold import fold_loop
from turnstream.runtime.model_client import ModelClient
from turnstream.runtime.ports import AccessPolicy, Tool
from turnstream.runtime.session import LoopSetup
from turnstream.runtime.subscription import EventFilter, LoopScope, Subscription
from turnstream.state import LoopState
from turnstream.testing import StaticAccessPolicy
from turnstream.wire import default_codec

PROJECT_DIR = Path(__file__).resolve().parents[2]
TOPICS_YAML = PROJECT_DIR / "infra" / "topics.yaml"
TIMEOUT = 30.0
TERMINALS = {"TurnDone", "TurnFailed", "TurnInterrupted"}
ANSWERS = {"TurnStarted", "TurnFoldedInto", "InputCancelled", "TurnRejected"}


@pytest.fixture(autouse=True)
async def collect_garbage() -> AsyncIterator[None]:
    """Collect garbage after each test, while its event loop still runs.

    A fenced aiokafka producer leaves failed internal futures nobody awaits; their
    "exception was never retrieved" report belongs to the test that caused it, not
    to whatever code (e.g. pytest's own ``ast.parse``) runs when the collector
    happens to find them later (CPython 3.11.7 cannot parse while a finalizer runs).
    """
    yield
    _collect_and_report()


@pytest.fixture(autouse=True)
def collect_garbage_late() -> Iterator[None]:
    """The same after the test's event loop closed (torn down after it)."""
    yield
    _collect_and_report()


def _collect_and_report() -> None:
    """Collect garbage; fail naming each object whose finalizer raised.

    pytest would report them too, as "multiple unraisable exception warnings"
    with the details far up in the output: this names them in the one line a
    summary shows (e.g. an unclosed connection and the client it belonged to).
    """
    found: list[str] = []

    def note(unraisable: Any) -> None:
        exc = unraisable.exc_value
        where = repr(unraisable.object)[:120]
        found.append(f"{type(exc).__name__}: {str(exc)[:160]} (in {where})")

    previous = sys.unraisablehook
    sys.unraisablehook = note
    try:
        gc.collect()
    finally:
        sys.unraisablehook = previous
    if found:
        pytest.fail(
            f"{len(found)} finalizer(s) raised after the test: " + " | ".join(found),
            pytrace=False,
        )


def unique_prefix(stem: str) -> str:
    """A fresh topic-name prefix such as ``it-seq-1a2b3c4d.``."""
    clean = re.sub(r"[^A-Za-z0-9-]+", "-", stem)[:40].strip("-") or "t"
    return f"it-{clean}-{uuid.uuid4().hex[:10]}."


async def apply_topic_set(
    bootstrap: str, prefix: str, *, partitions: int
) -> TopicNames:
    """Create the whole turnstream topic set under ``prefix``."""
    spec = load_topic_set(TOPICS_YAML)
    desired = resolve_topics(spec, prefix=prefix, partitions=partitions)
    await apply_topics(KafkaConnection(bootstrap=bootstrap), desired)
    for topic in desired:  # created is not yet visible in every metadata cache
        await wait_for_topic(bootstrap, topic.name, partitions=topic.partitions)
    return TopicNames.with_affixes(prefix=prefix)


async def delete_topic_set(bootstrap: str, prefix: str) -> None:
    """Delete every topic whose name starts with ``prefix``."""
    existing = await list_topics(bootstrap)
    await delete_topics(bootstrap, [t for t in existing if t.startswith(prefix)])


def clients_for(bootstrap: str) -> KafkaClients:
    """A client factory with test-friendly timeouts."""
    return KafkaClients(
        connection=KafkaConnection(
            bootstrap=bootstrap, request_timeout=15.0, connect_timeout=15.0
        ),
        client_id="turnstream-it",
    )


@dataclass
class Models:
    """Per-loop model clients for an in-process service (DemoModel by default).

    Every tool call is approved (each with its ``PermissionDecided``) unless
    ``policy_by_loop`` gives a loop another policy, or ``None`` (none: every
    call denied).
    """

    default: ModelClient = field(default_factory=DemoModel)
    by_loop: dict[UUID, ModelClient] = field(default_factory=dict)
    tools: tuple[Tool, ...] = field(default_factory=lambda: tool_set("demo"))
    policy: AccessPolicy = field(default_factory=StaticAccessPolicy)
    policy_by_loop: dict[UUID, AccessPolicy | None] = field(default_factory=dict)

    def setup_for(self, loop_id: LoopId, _agent: str = "") -> LoopSetup:
        config = LoopConfig(
            model="test-model",
            tools=self.tools,
            commit_timeout=45.0,
            agent_name="it",
        )
        return LoopSetup(
            config=config,
            model=self.by_loop.get(loop_id, self.default),
            access_policy=self.access_for(loop_id),
        )

    def access_for(self, loop_id: LoopId) -> AccessPolicy | None:
        """The access policy of ``loop_id``'s loop."""
        return self.policy_by_loop.get(loop_id, self.policy)


def service_for(
    bootstrap: str,
    topics: TopicNames,
    *,
    group_id: str,
    models: Models,
    txn_prefix: str = "it",
    metrics: ServiceMetrics | None = None,
    writer: WriterSettings | None = None,
    instance_id: str | None = None,
    max_resident_loops: int = 10_000,
    clients: KafkaClients | None = None,
) -> LoopActorService:
    """An in-process loop-actor service with short timeouts.

    ``clients`` replaces the default client factory (:func:`clients_for`).
    """
    settings = ServiceSettings(
        group_id=group_id,
        group_instance_id=instance_id,
        topics=topics,
        txn_prefix=txn_prefix,
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
        rebalance_timeout_ms=20_000,
        poll_timeout_ms=100,
        writer=writer or WriterSettings(offset_flush_interval=0.2),
        stop_timeout=10.0,
        lag_interval=0.5,
        max_resident_loops=max_resident_loops,
    )
    return LoopActorService(
        clients=clients or clients_for(bootstrap),
        settings=settings,
        codec=default_codec(),
        setup_for=models.setup_for,
        metrics=metrics,
    )


@asynccontextmanager
async def running(service: LoopActorService) -> AsyncIterator[LoopActorService]:
    """Run ``service`` in the background until the block ends; wait until ready."""
    async with service:
        await assert_eventually(
            lambda: service.ready, timeout=TIMEOUT, message="service not ready"
        )
        yield service


async def connect(bootstrap: str, topics: TopicNames) -> KafkaSession:
    """A Kafka session client with a large subscription buffer."""
    return await KafkaSession.connect(
        bootstrap, topics=topics, capacity=10_000, request_timeout=15.0
    )


def loop_filter(loop_id: UUID) -> EventFilter:
    """Every event (live and journal) of one loop."""
    scope = LoopScope.only(loop_id)
    return EventFilter(ephemeral=scope, enduring=scope)


async def collect_until(
    subscription: Subscription,
    done: Callable[[list[AnyEvent]], bool],
    *,
    timeout: float = TIMEOUT,
) -> list[AnyEvent]:
    """Read events until ``done(events so far)`` holds."""
    seen: list[AnyEvent] = []
    async with asyncio.timeout(timeout):
        while not done(seen):
            seen.append(await subscription.next(timeout=timeout))
    return seen


def enduring_types(events: Iterable[AnyEvent]) -> list[str]:
    """Type names of the enduring events, in order."""
    return [e.type_name for e in events if e.is_enduring()]


def count_type(name: str, times: int = 1) -> Callable[[list[AnyEvent]], bool]:
    """``done`` predicate: ``name`` seen ``times`` times."""
    return lambda events: sum(e.type_name == name for e in events) >= times


async def committed_state_records(
    bootstrap: str, topic: str, partition: int = 0
) -> list[tuple[bytes, LoopState]]:
    """Every committed record of a loops partition, in order: key and state."""
    placed = await committed_state_records_at(bootstrap, topic, partition)
    return [(key, state) for _, key, state in placed]


async def committed_state_records_at(
    bootstrap: str,
    topic: str,
    partition: int = 0,
    *,
    key_prefix: bytes = b"",
) -> list[tuple[int, bytes, LoopState]]:
    """Every committed record of a loops partition, in order: offset, key, state.

    ``key_prefix``: only records whose key starts with it (others, such as a
    test's foreign records, are not decoded).
    """
    from aiokafka import AIOKafkaConsumer, TopicPartition

    codec = default_codec()
    reader = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
    )
    await reader.start()
    found: list[tuple[int, bytes, LoopState]] = []
    try:
        tp = TopicPartition(topic, partition)
        reader.assign([tp])
        await reader.seek_to_beginning(tp)
        end = (await reader.end_offsets([tp]))[tp]
        async with asyncio.timeout(TIMEOUT):
            while await reader.position(tp) < end:
                for records in (await reader.getmany(tp, timeout_ms=1000)).values():
                    found += [
                        (r.offset, r.key, codec.unmarshal_state(r.value))
                        for r in records
                        if (r.key or b"").startswith(key_prefix)
                    ]
    finally:
        await reader.stop()
    return found


async def read_all(
    bootstrap: str, topics: TopicNames, partitions: int
) -> list[JournalEntry]:
    """Every committed journal record of every partition."""
    clients = clients_for(bootstrap)
    entries: list[JournalEntry] = []
    from aiokafka import TopicPartition

    for partition in range(partitions):
        entries.extend(
            await read_journal(
                clients, default_codec(), TopicPartition(topics.events, partition)
            )
        )
    return entries


async def check_snapshots(
    bootstrap: str,
    topics: TopicNames,
    partitions: int,
    entries: Sequence[JournalEntry],
) -> dict[UUID, LoopState]:
    """Assert each loop's latest snapshot points just past one of its own events.

    State records are written on offsets predicted before their events land; a
    snapshot naming anything else (a foreign record, a marker, nothing) would
    send restore to the wrong journal tail. Returns the snapshots by loop.
    """
    from aiokafka import TopicPartition

    offsets: dict[UUID, set[int]] = defaultdict(set)
    for entry in entries:
        offsets[entry.loop_id].add(entry.offset)
    states: dict[UUID, LoopState] = {}
    for partition in range(partitions):
        read = await read_latest_states(
            clients_for(bootstrap),
            default_codec(),
            TopicPartition(topics.loops, partition),
            TopicPartition(topics.history, partition),
        )
        assert not read.unreadable, read.unreadable
        states.update(read.states)
    for loop_id, state in states.items():
        assert state.journal_offset - 1 in offsets[loop_id], (
            f"loop {loop_id}: snapshot names offset {state.journal_offset - 1}, "
            "not one of its events"
        )
        # Assembled from its head and history records, the state is the fold
        # of the loop's journal up to the offset it names, whatever crashed
        # or interleaved while its records were written.
        folded = fold_loop(
            [
                e.event
                for e in entries
                if e.loop_id == loop_id and e.offset < state.journal_offset
            ]
        )
        assert layout_free(state) == layout_free(folded), f"loop {loop_id}"
    return states


def layout_free(state: LoopState) -> LoopState:
    """What a journal's fold knows: no offsets, progress or storage layout."""
    return state.model_copy(
        update={
            "journal_offset": -1,
            "command_offset": -1,
            "applied_command_offset": -1,
            "pending_command_offsets": (),
            "history_length": -1,
            "history_records": 0,
            "history_first_offset": -1,
            "history_last_offset": -1,
        }
    )


def check_journal(
    entries: Sequence[JournalEntry], submitted: Iterable[UUID]
) -> dict[UUID, list[EnduringEvent]]:
    """Assert the journal invariants; return the events per loop.

    No duplicate event id; exactly one terminal per TurnStarted, right after its
    turn; turn indexes contiguous from 1 per loop; every submitted command answered
    by exactly one of TurnStarted/TurnFoldedInto/InputCancelled/TurnRejected.
    """
    ids = Counter(e.event.header.event_id for e in entries)
    duplicates = [i for i, n in ids.items() if n > 1]
    assert not duplicates, f"duplicate event ids: {duplicates}"
    per_loop: dict[UUID, list[EnduringEvent]] = defaultdict(list)
    for entry in entries:
        per_loop[entry.loop_id].append(entry.event)
    for loop_id, events in per_loop.items():
        open_turn: TurnStarted | None = None
        index = 0
        for event in events:
            if isinstance(event, TurnStarted):
                assert open_turn is None, f"loop {loop_id}: turn started inside a turn"
                index += 1
                assert event.turn_index == index, (
                    f"loop {loop_id}: turn index {event.turn_index}, expected {index}"
                )
                open_turn = event
            elif event.ends_turn():
                assert open_turn is not None, f"loop {loop_id}: terminal without turn"
                assert event.header.turn_id == open_turn.header.turn_id
                open_turn = None
        assert open_turn is None, f"loop {loop_id}: turn {index} never ended"
    answers = Counter(
        e.event.reply_to()
        for e in entries
        if e.event.type_name in ANSWERS and e.event.reply_to() is not None
    )
    for command_id in submitted:
        assert answers[command_id] == 1, (
            f"command {command_id} answered {answers[command_id]} times"
        )
    return per_loop
