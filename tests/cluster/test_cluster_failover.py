"""kill -9 of brokers under load: the journal stays clean and every submit is answered.

On the local 3-node cluster (topics RF 3, min ISR 2) an in-process loop-actor
service runs 30 loops while a submitter sends a steady stream of inputs. The leader
of the busiest events partition is killed with SIGKILL, restarted, and later a
second broker is killed and restarted. A submit whose send times out is retried
with the SAME command (same id). Afterwards the journal read back
``read_committed`` must show no duplicate event id, exactly one terminal per
``TurnStarted``, contiguous turn indexes per loop and every submitted command
answered exactly once; each loop's latest state record must agree with its journal
(as many turns, none open); the actor must still be running; and every answer must
become visible ``read_committed`` (a hanging transaction would hold the last stable
offset back and hide them).

The stall per kill (the longest gap between committed events after it, and the
slowest submit-to-answer time) is printed, for docs/cluster.md's figures.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID, uuid4

import pytest
from tests.support.eventually import assert_eventually
from tests.support.kafka_harness import (  # noqa: F401 - autouse fixtures
    ANSWERS,
    Models,
    apply_topic_set,
    check_journal,
    check_snapshots,
    clients_for,
    collect_garbage,
    collect_garbage_late,
    delete_topic_set,
    read_all,
    running,
    service_for,
    unique_prefix,
)

from turnstream.commands import SubmitInput
from turnstream.content import TextBlock, UserMessage
from turnstream.devbroker import DevCluster
from turnstream.errors import TransportError
from turnstream.events import Agency, AnyEvent, EnduringEvent, TurnStarted
from turnstream.ids import LoopId
from turnstream.kafka import KafkaConnection, admin_session
from turnstream.kafka.client.session import KafkaSession
from turnstream.kafka.reader import JournalEntry
from turnstream.kafka.topology import TopicNames
from turnstream.runtime.subscription import EventFilter, LoopScope

RESULT = Path(__file__).resolve().parents[2] / "var" / "cluster-lane.txt"
LOOPS = 30
PARTITIONS = 3
SUBMIT_INTERVAL = 0.3  # seconds between submits (round robin over the loops)
SEND_TIMEOUT = 5.0  # per attempt: shorter than a failover, so retries happen
PROMPTS = ("add 1 2 3", "count these four words", "add 10 20", "hello there")
WARM_UP = 10.0
DOWN_FOR = 20.0  # a killed broker stays down this long under load
SETTLE = 10.0  # after a restart, before the next kill
STALL_WINDOW = 45.0


@dataclass
class Timeline:
    """What the test saw, with monotonic times."""

    started: float = field(default_factory=time.monotonic)
    arrivals: list[tuple[float, int]] = field(default_factory=list)  # (t, partition)
    answered_at: dict[UUID, float] = field(default_factory=dict)
    submitted_at: dict[UUID, float] = field(default_factory=dict)
    acked_at: dict[UUID, float] = field(default_factory=dict)
    retries: dict[UUID, int] = field(default_factory=dict)
    kills: list[tuple[float, int, str]] = field(default_factory=list)
    restarts: list[tuple[float, int, float]] = field(default_factory=list)

    def stall_after(self, at: float) -> float:
        """Longest gap between committed events in the window after ``at``."""
        times = [t for t, _ in self.arrivals if at <= t <= at + STALL_WINDOW]
        edges = [at, *times]
        return max(b - a for a, b in itertools.pairwise(edges)) if times else -1

    def partition_stall_after(self, at: float) -> float:
        """The same, per partition; the worst partition."""
        per: dict[int, list[float]] = defaultdict(list)
        for t, p in self.arrivals:
            if at <= t <= at + STALL_WINDOW:
                per[p].append(t)
        worst = 0.0
        for times in per.values():
            edges = [at, *times]
            worst = max(worst, *(b - a for a, b in itertools.pairwise(edges)))
        return worst

    def slowest_answer_after(self, at: float) -> float:
        """Longest submit-to-answer time of the submits sent in the window."""
        waits = [
            self.answered_at[c] - t
            for c, t in self.submitted_at.items()
            if at - 2 <= t <= at + STALL_WINDOW and c in self.answered_at
        ]
        return max(waits, default=-1)


async def _watch(session: KafkaSession, timeline: Timeline) -> None:
    """Record the arrival of every committed (enduring) event."""
    subscription = session.subscribe_events(
        EventFilter(ephemeral=LoopScope(), enduring=LoopScope.every())
    )
    while True:
        try:
            event: AnyEvent = await subscription.next(timeout=1.0)
        except TimeoutError:
            continue
        now = time.monotonic()
        loop_id = event.header.loop_id
        if loop_id is not None:
            timeline.arrivals.append((now, session.partition_of(loop_id)))
        if event.type_name in ANSWERS:
            reply = event.reply_to()
            if reply is not None:
                timeline.answered_at.setdefault(reply, now)


def _command(session: KafkaSession, loop_id: LoopId, text: str) -> SubmitInput:
    """A submit built once, so a retry resends the same command id."""
    return SubmitInput.model_validate(
        {
            "command_id": uuid4(),
            "session_id": session.session_id,
            "loop_id": loop_id,
            "created_at": datetime.now(UTC),
            "agency": Agency.USER,
            "message": UserMessage(blocks=(TextBlock(text=text),)),
            "no_fold": False,
        }
    )


async def _submit(
    session: KafkaSession, command: SubmitInput, timeline: Timeline
) -> None:
    timeline.submitted_at[command.command_id] = time.monotonic()
    for attempt in range(20):
        try:
            await session.send(command)
        except TransportError:
            timeline.retries[command.command_id] = attempt + 1
            continue
        timeline.acked_at[command.command_id] = time.monotonic()
        return
    raise AssertionError(f"submit {command.command_id} never acknowledged")


async def _load(
    session: KafkaSession, loops: list[LoopId], timeline: Timeline, stop: asyncio.Event
) -> list[UUID]:
    submitted: list[UUID] = []
    pending: set[asyncio.Task[None]] = set()
    i = 0
    while not stop.is_set():
        command = _command(session, loops[i % len(loops)], PROMPTS[i % len(PROMPTS)])
        submitted.append(command.command_id)
        # Each submit on its own task: one stuck in a failover does not stop the rest.
        task = asyncio.create_task(_submit(session, command, timeline))
        pending.add(task)
        task.add_done_callback(pending.discard)
        i += 1
        await asyncio.sleep(SUBMIT_INTERVAL)
    if pending:
        await asyncio.gather(*pending)
    return submitted


async def _leaders(bootstrap: str, topic: str) -> tuple[dict[int, int], int]:
    """Partition -> leader node of ``topic``, and the active controller's node."""
    conn = KafkaConnection(bootstrap=bootstrap, request_timeout=20.0)
    async with admin_session(conn) as admin:
        (entry,) = await admin.describe_topics([topic])
        cluster = await admin.describe_cluster()
        leaders = {int(p["partition"]): int(p["leader"]) for p in entry["partitions"]}
        return leaders, int(cluster["controller_id"])


async def _busiest_leader(
    bootstrap: str, topics: TopicNames, timeline: Timeline, avoid: int | None
) -> tuple[int, str]:
    counts: dict[int, int] = defaultdict(int)
    for _, partition in timeline.arrivals:
        counts[partition] += 1
    leaders, controller = await _leaders(bootstrap, topics.events)
    led = {n: sorted(p for p, lead in leaders.items() if lead == n) for n in (1, 2, 3)}
    for partition in sorted(counts, key=lambda p: -counts[p]):
        node = leaders[partition]
        if node != avoid and node >= 0:
            role = ", the active controller" if node == controller else ""
            return node, (
                f"leader of events{led[node]}, busiest events[{partition}] "
                f"({counts[partition]} events){role}"
            )
    node = next(n for n in (1, 2, 3) if n != avoid)
    return node, "another broker"


async def _kill_and_restart(
    cluster: DevCluster, node: int, why: str, timeline: Timeline
) -> None:
    at = time.monotonic()
    await asyncio.to_thread(cluster.kill_node, node)
    timeline.kills.append((at, node, why))
    await asyncio.sleep(DOWN_FOR)
    back = await asyncio.to_thread(cluster.start_node, node)
    timeline.restarts.append((time.monotonic(), node, back.seconds))


@pytest.mark.timeout(600)
async def test_broker_kills_under_load_lose_nothing(kafka_cluster: DevCluster) -> None:
    bootstrap = kafka_cluster.settings.bootstrap
    prefix = unique_prefix("cluster-failover")
    lane_started = time.monotonic()
    topics = await apply_topic_set(bootstrap, prefix, partitions=PARTITIONS)
    session = await KafkaSession.connect(
        bootstrap, topics=topics, capacity=100_000, request_timeout=SEND_TIMEOUT
    )
    timeline = Timeline()
    loops = [LoopId(uuid4()) for _ in range(LOOPS)]
    watcher = asyncio.create_task(_watch(session, timeline))
    try:
        service = service_for(
            bootstrap, topics, group_id=f"{prefix}actors", models=Models()
        )
        async with running(service):
            stop = asyncio.Event()
            load = asyncio.create_task(_load(session, loops, timeline, stop))
            await asyncio.sleep(WARM_UP)
            first, why = await _busiest_leader(bootstrap, topics, timeline, None)
            await _kill_and_restart(kafka_cluster, first, why, timeline)
            await asyncio.sleep(SETTLE)
            second, why = await _busiest_leader(bootstrap, topics, timeline, first)
            await _kill_and_restart(kafka_cluster, second, why, timeline)
            await asyncio.sleep(SETTLE)
            stop.set()
            submitted = await load

            def all_answered() -> None:
                missing = [c for c in submitted if c not in timeline.answered_at]
                assert not missing, f"{len(missing)} of {len(submitted)} unanswered"

            await assert_eventually(all_answered, timeout=120, interval=0.5)
            assert service.ready, "the actor stopped serving"

        entries = await read_all(bootstrap, topics, PARTITIONS)
        per_loop = check_journal(entries, submitted)
        assert set(per_loop) == set(loops)
        await _check_snapshots(bootstrap, topics, per_loop, entries)
        lane = time.monotonic() - lane_started
        _report(timeline, submitted, len(entries), lane)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        await session.close()
        await delete_topic_set(bootstrap, prefix)


async def _check_snapshots(
    bootstrap: str,
    topics: TopicNames,
    per_loop: dict[UUID, list[EnduringEvent]],
    entries: Sequence[JournalEntry],
) -> None:
    """Each loop's latest state record agrees with its journal: as many turns, none
    open, and its journal offset just past one of the loop's own events (broker
    kills make the writers lose their offset predictions and start over)."""
    states = await check_snapshots(bootstrap, topics, PARTITIONS, entries)
    assert set(states) == set(per_loop)
    for loop_id, events in per_loop.items():
        turns = sum(isinstance(e, TurnStarted) for e in events)
        assert states[loop_id].turn_index == turns, loop_id
        assert states[loop_id].open_turn is None, loop_id


def _report(
    timeline: Timeline, submitted: list[UUID], events: int, lane: float
) -> None:
    t0 = timeline.started
    lines = [
        f"cluster lane: {len(submitted)} submits over {LOOPS} loops, {events} "
        f"journal events, {sum(1 for c in submitted if c in timeline.retries)} "
        f"submits retried with their id ({sum(timeline.retries.values())} "
        f"retries), scenario {lane:.0f} s",
    ]
    for at, node, why in timeline.kills:
        lines.append(
            f"kill -9 node {node} ({why}) at t+{at - t0:.1f} s: longest gap between "
            f"committed events {timeline.stall_after(at):.1f} s (worst partition "
            f"{timeline.partition_stall_after(at):.1f} s), slowest submit->answer "
            f"{timeline.slowest_answer_after(at):.1f} s"
        )
    for at, node, seconds in timeline.restarts:
        lines.append(
            f"node {node} back at t+{at - t0:.1f} s (rejoined in {seconds:.1f} s)"
        )
    waits = sorted(
        timeline.answered_at[c] - timeline.submitted_at[c] for c in submitted
    )
    acks = sorted(timeline.acked_at[c] - timeline.submitted_at[c] for c in submitted)
    lines.append(
        f"submit->answer: median {waits[len(waits) // 2]:.2f} s, "
        f"max {waits[-1]:.1f} s; "
        f"submit->broker ack (retries included): median {acks[len(acks) // 2]:.2f} s, "
        f"max {acks[-1]:.1f} s"
    )
    text = "\n".join(lines)
    print("\n" + text)
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(text + "\n", encoding="utf-8")
