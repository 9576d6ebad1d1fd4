"""Side-effect ledger under kill -9 churn: shared by a test and a benchmark.

:func:`run_ledger_churn` hosts :data:`tests.support.ledger_agents.ledger` (a
continuing agent whose turns call an idempotent ``refund`` and a
non-idempotent ``notify`` tool, alternately, one call per step) in ``actors``
loop-actor processes, kills one with SIGKILL every ``kill_every`` seconds and
starts a replacement at once (:func:`tests.support.churn.kill_on_schedule`),
while ``loops`` loops run turns back to back. Then it reads the journal and
the ledger the tools wrote outside the actors, and counts what must be zero:

- ``duplicate_refunds``: a logical refund call (turn input + step) applied
  more than once (under two keys, say); the keyed store applies one key once;
- ``notify_reruns``: a logical notify call run more than once;
- ``unknown_reported_twice``: a call given the outcome-unknown result in more
  than one committed step; ``unknown_for_idempotent``: a refund given it;
- ``calls_not_committed_once``: a logical call of a finished turn whose result
  is not committed exactly once;
- ``effects_without_step``: a ledger effect of a call no committed step has;
- ``turns_not_done``: a turn that ended other than ``TurnDone``;
- ``unanswered``: a submit with no outcome in time.

With ``kafka_effects`` the tools also stage a Kafka record per call (see
:mod:`tests.support.ledger_agents`) for the topic ``{prefix}effects``, read
afterwards ``read_committed``; counts that must be zero then too:

- ``kafka_effect_duplicates``: a logical call with more than one record;
- ``kafka_effects_without_step``: a record of a call that no committed step
  records as run (absent, or given the outcome-unknown result);
- ``kafka_effects_missing``: a committed call that ran without its record.

It also checks the journal invariants (:func:`check_journal`: every submit
answered exactly once, one terminal per turn) and keeps what broke them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from uuid import UUID, uuid4

from tests.support.actors import ActorFleet, ActorProcess
from tests.support.churn import kill_on_schedule, start_fleet
from tests.support.kafka import consume_all, create_topic
from tests.support.kafka_harness import check_journal, connect, read_all
from tests.support.ledger_agents import LEDGER_STEPS, Ledger, tool_for

from turnstream.content import ToolResultMessage, text_of
from turnstream.events import EnduringEvent, StepDone, TurnResumed, TurnStarted
from turnstream.ids import CommandId, LoopId
from turnstream.kafka.client.session import KafkaSession
from turnstream.kafka.topology import TopicNames
from turnstream.runtime.tools import OUTCOME_UNKNOWN

__all__ = ["AGENT", "LedgerReport", "run_ledger_churn"]

AGENT = "tests.support.ledger_agents:ledger"
PROJECT_DIR = Path(__file__).resolve().parents[2]


@dataclass
class LedgerReport:
    """What one run saw; the zero counts first, then the volume."""

    duplicate_refunds: int = 0
    notify_reruns: int = 0
    unknown_reported_twice: int = 0
    unknown_for_idempotent: int = 0
    calls_not_committed_once: int = 0
    effects_without_step: int = 0
    turns_not_done: int = 0
    unanswered: int = 0
    self_exits: int = 0
    kills: int = 0
    submits: int = 0
    turns: int = 0
    terminals: dict[str, int] = field(default_factory=dict)
    turns_resumed: int = 0
    resumes: int = 0
    max_resumes_of_a_turn: int = 0
    steps: int = 0
    refund_calls: int = 0
    refund_attempts: int = 0
    refund_effects: int = 0
    refunds_run_again_with_key: int = 0
    notify_calls: int = 0
    notify_runs: int = 0
    unknown_reported: int = 0
    unknown_not_run: int = 0
    journal_invariants: str = "ok"
    kafka_effects_checked: bool = False
    kafka_effects: int = 0
    kafka_effect_duplicates: int = 0
    kafka_effects_without_step: int = 0
    kafka_effects_missing: int = 0
    kafka_effects_uncommitted_seen: int = 0

    def zero_counts(self) -> dict[str, int]:
        """The counts that must be 0."""
        names = (
            "duplicate_refunds",
            "notify_reruns",
            "unknown_reported_twice",
            "unknown_for_idempotent",
            "calls_not_committed_once",
            "effects_without_step",
            "turns_not_done",
            "unanswered",
            "self_exits",
        )
        if self.kafka_effects_checked:
            names += (
                "kafka_effect_duplicates",
                "kafka_effects_without_step",
                "kafka_effects_missing",
            )
        counts = {n: int(getattr(self, n)) for n in names}
        counts["journal_invariants_broken"] = int(self.journal_invariants != "ok")
        return counts

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


async def _worker(
    session: KafkaSession,
    loop_id: LoopId,
    *,
    stop: asyncio.Event,
    submitted: list[UUID],
    report: LedgerReport,
    wait: float,
) -> None:
    number = 0
    while not stop.is_set():
        number += 1
        command_id = CommandId(uuid4())
        submitted.append(command_id)
        try:
            await session.submit_and_wait(
                f"{loop_id.hex[:12]}-{number}",
                loop_id=loop_id,
                no_fold=True,
                command_id=command_id,
                timeout=wait,
            )
        except TimeoutError:
            report.unanswered += 1


def _journal_calls(
    per_loop: dict[UUID, list[EnduringEvent]], report: LedgerReport
) -> dict[tuple[str, int], list[str]]:
    """Every committed call's results, by logical call; fills the turn counts."""
    results: dict[tuple[str, int], list[str]] = {}
    terminals: Counter[str] = Counter()
    resumes_per_turn: Counter[UUID] = Counter()
    for events in per_loop.values():
        for event in events:
            if isinstance(event, TurnStarted):
                report.turns += 1
            elif isinstance(event, TurnResumed):
                resumes_per_turn[event.header.turn_id] += 1
            elif isinstance(event, StepDone):
                report.steps += 1
                texts = {
                    m.tool_use_id: text_of(m.blocks)
                    for m in event.messages[1:]
                    if isinstance(m, ToolResultMessage)
                }
                for use in event.ai_message.tool_uses():
                    call = json.loads(use.input)
                    logical = (str(call["input"]), int(call["step"]))
                    results.setdefault(logical, []).append(texts.get(use.id, ""))
            if event.ends_turn():
                terminals[event.type_name] += 1
    report.terminals = dict(terminals)
    report.turns_not_done = report.turns - terminals["TurnDone"]
    report.turns_resumed = len(resumes_per_turn)
    report.resumes = sum(resumes_per_turn.values())
    report.max_resumes_of_a_turn = max(resumes_per_turn.values(), default=0)
    return results


def _count(
    results: dict[tuple[str, int], list[str]], ledger: Ledger, report: LedgerReport
) -> None:
    counts = ledger.counts()
    report.refund_calls = counts.refund_calls
    report.refund_attempts = counts.refund_attempts
    report.refund_effects = counts.refund_effects
    report.duplicate_refunds = counts.duplicate_refunds
    report.notify_calls = counts.notify_calls
    report.notify_runs = counts.notify_runs
    report.notify_reruns = counts.notify_reruns
    refund_runs = ledger.runs("refund")
    notify_runs = ledger.runs("notify")
    report.refunds_run_again_with_key = sum(n - 1 for n in refund_runs.values())
    # Each call of a turn that started must be committed once, whatever its turn
    # ended with: the steps of a finished turn are all there.
    inputs = {i for i, _ in results}
    for input_id in inputs:
        for step in range(1, LEDGER_STEPS + 1):
            if len(results.get((input_id, step), [])) != 1:
                report.calls_not_committed_once += 1
    for (input_id, step), texts in results.items():
        unknown = texts.count(OUTCOME_UNKNOWN)
        report.unknown_reported += unknown
        report.unknown_reported_twice += max(unknown - 1, 0)
        if unknown and tool_for(step) == "refund":
            report.unknown_for_idempotent += 1
        if unknown and tool_for(step) == "notify":
            report.unknown_not_run += notify_runs.get((input_id, step), 0) == 0
    ran = set(refund_runs) | set(notify_runs)
    report.effects_without_step = len(ran - set(results))


async def _count_kafka_effects(
    bootstrap: str,
    topic: str,
    results: dict[tuple[str, int], list[str]],
    report: LedgerReport,
) -> None:
    """Compare the effect topic (``read_committed``) with the committed calls."""
    committed = await consume_all(bootstrap, topic, isolation_level="read_committed")
    everything = await consume_all(bootstrap, topic)
    report.kafka_effects_checked = True
    report.kafka_effects = len(committed)
    # Records of aborted or never-committed transactions: present in the log,
    # hidden from read_committed consumers (transaction markers not counted).
    report.kafka_effects_uncommitted_seen = len(everything) - len(committed)
    records: Counter[tuple[str, int]] = Counter()
    for record in committed:
        body = json.loads(record.value or b"{}")
        records[(str(body["input"]), int(body["step"]))] += 1
    report.kafka_effect_duplicates = sum(n - 1 for n in records.values() if n > 1)
    ran = {
        call
        for call, texts in results.items()
        if any(text and text != OUTCOME_UNKNOWN for text in texts)
    }
    report.kafka_effects_without_step = sum(
        n for call, n in records.items() if call not in ran
    )
    report.kafka_effects_missing = len(ran - set(records))


async def run_ledger_churn(
    bootstrap: str,
    prefix: str,
    topics: TopicNames,
    *,
    ledger_path: Path,
    duration: float,
    partitions: int,
    kill_every: float = 3.0,
    actors: int = 3,
    loops: int = 100,
    tool_delay: float = 0.2,
    max_resumes: int = 3,
    settle: float = 120.0,
    seed: int = 11,
    log_dir: Path | None = None,
    agent: str = AGENT,
    extra: tuple[str, ...] = (),
    kafka_effects: bool = False,
) -> LedgerReport:
    """Run the churn for ``duration`` seconds, let every turn finish, count."""
    rng = random.Random(seed)
    report = LedgerReport()
    ledger = Ledger(ledger_path)
    env = {
        "LEDGER_DB": str(ledger_path),
        "LEDGER_TOOL_DELAY": str(tool_delay),
        "LEDGER_MAX_RESUMES": str(max_resumes),
        "PYTHONPATH": str(PROJECT_DIR),
    }
    effect_topic = f"{prefix}effects"
    if kafka_effects:
        await create_topic(bootstrap, effect_topic, partitions=partitions)
        env["LEDGER_EFFECT_TOPIC"] = effect_topic
    fleet = ActorFleet(bootstrap, prefix, extra=extra, log_dir=log_dir)

    async def spawn() -> ActorProcess:
        return await fleet.spawn("--agent", agent, env=env)

    session = await connect(bootstrap, topics)
    stop = asyncio.Event()
    submitted: list[UUID] = []
    try:
        await start_fleet(fleet, actors, spawn)
        workers = [
            asyncio.create_task(
                _worker(
                    session,
                    LoopId(uuid4()),
                    stop=stop,
                    submitted=submitted,
                    report=report,
                    wait=settle,
                )
            )
            for _ in range(loops)
        ]
        kills = await kill_on_schedule(
            fleet, duration=duration, kill_every=kill_every, rng=rng, spawn=spawn
        )
        report.kills = len(kills)
        stop.set()
        async with asyncio.timeout(settle + 30):
            await asyncio.gather(*workers)
        fleet.note_exits()
    finally:
        stop.set()
        await fleet.close()
        with contextlib.suppress(Exception):
            await session.close()
    report.self_exits = len(fleet.self_exits)
    report.submits = len(submitted)
    entries = await read_all(bootstrap, topics, partitions)
    try:
        check_journal(entries, submitted)
    except AssertionError as exc:
        report.journal_invariants = str(exc)
    per_loop: dict[UUID, list[EnduringEvent]] = {}
    for entry in entries:
        per_loop.setdefault(entry.loop_id, []).append(entry.event)
    results = _journal_calls(per_loop, report)
    _count(results, ledger, report)
    if kafka_effects:
        await _count_kafka_effects(bootstrap, effect_topic, results, report)
    return report
