"""Latency seen by a subscriber: submit -> TurnStarted / turn end, chunk -> TokenDelta.

An in-process loop-actor service runs ``loops`` loops in parallel, each doing
``turns`` text turns one after the other (submit, wait for the turn's end,
submit again), on a fresh topic set; each ``--case LOOPSxTURNS`` is one such
run (by default one loop alone, then 20 loops at once). A
:class:`KafkaSession` in the same process submits and subscribes to
everything. Measured, with one monotonic clock:

* **submit -> TurnStarted**: from just before ``session.submit_to_loop`` to
  the moment the subscription yields that turn's ``TurnStarted`` (command
  produced ``acks=all``, consumed by the service, committed in a Kafka
  transaction, read ``read_committed`` by the session);
* **chunk -> TokenDelta**: from the moment the scripted model *yields* a
  chunk (stamped by :class:`StampedModel`) to the moment the subscription
  yields the ``TokenDelta`` carrying it (encoded, sent ``acks=1`` outside any
  transaction, read by the session).

* **submit -> turn end**: from just before the submit to the moment the
  subscription yields the turn's last event (``LoopIdle``, committed with the
  final ``StepDone`` and ``TurnDone``).

Kafka's own floor for the same paths is measured in the same run with plain
aiokafka (:func:`raw_latency`): a relay consumes a command, writes one record
in a transaction and commits; a ``read_committed`` reader sees it (submit
path); the same relay then writes a second record in a second transaction, as
many serial transactions as the contract needs for a text turn (``TurnStarted``
durable before the history changes, then the turn's end), and the reader sees
that one (turn-end path); and an ``acks=1`` record to a ``read_uncommitted``
reader (delta path). The relay commits the command's offset in its first
transaction, as the service does. The delta path has a second floor, for
the traffic a turn really makes: the turn's ``CHUNKS_PER_TURN`` records sent
back to back, as a zero-latency model yields them, each timed from its own
send. They leave in one batch, so a burst's records are seen together, each
about as soon as a lone record; the turnstream side is split per chunk number
(``..._by_chunk``) to show whether its later chunks wait behind the first.

Every p99 is taken over a few hundred samples (one loop x 100 turns x 3
chunks, 300 floor samples): with fewer than 100 the nearest-rank p99 is the
maximum, one stall of the shared machine. Usage::

    python bench/latency_bench.py --case 1x100 --case 20x5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _support import (
    RESULTS_DIR,
    ModelPool,
    bootstrap_servers,
    machine,
    now_iso,
    percentiles,
    quiet_kafka_logs,
    service_for,
    topic_set,
    wait_until,
    write_json,
)
from turnstream.content import TextChunk
from turnstream.events import AnyEvent, LoopIdle, TokenDelta, TurnStarted
from turnstream.ids import LoopId
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.client.session import KafkaSession
from turnstream.runtime.model_client import ModelClient, ModelEvent, ModelRequest
from turnstream.runtime.subscription import EventFilter
from turnstream.testing import ScriptedModel, text_step

RESULTS = RESULTS_DIR / "latency.json"
CHUNKS_PER_TURN = 3
# Each loop's first turn (and the raw floor's first sample) warms the clients
# up (metadata, connections, the first fetch) and is not counted.
WARMUP_TURNS = 1


class StampedModel:
    """A :class:`ScriptedModel` that records when each text chunk is yielded.

    Every chunk's text is unique (loop, turn, chunk number), so the subscriber
    finds the yield time of the ``TokenDelta`` it receives by its text.
    """

    def __init__(self, loop_id: LoopId, turns: int, stamps: dict[str, float]) -> None:
        tag = loop_id.hex[:8]
        self._inner = ScriptedModel(
            [
                text_step(*(f"[{tag}.{t}.{c}] " for c in range(CHUNKS_PER_TURN)))
                for t in range(turns)
            ]
        )
        self._stamps = stamps

    @property
    def name(self) -> str:
        """The provider label."""
        return self._inner.name

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Play the next script, stamping each text chunk as it is yielded."""
        return self._stamped(self._inner.stream(request))

    async def _stamped(
        self, events: AsyncIterator[ModelEvent]
    ) -> AsyncIterator[ModelEvent]:
        async for event in events:
            if isinstance(event, TextChunk):
                self._stamps[event.text] = time.monotonic()
            yield event


async def turnstream_latency(
    bootstrap: str, *, loops: int, turns: int, partitions: int
) -> dict[str, Any]:
    """Run the closed-loop workload; return both latency distributions."""
    stamps: dict[str, float] = {}

    def make(loop_id: LoopId) -> ModelClient:
        return StampedModel(loop_id, WARMUP_TURNS + turns, stamps)

    async with topic_set(bootstrap, "latency", partitions=partitions) as (
        prefix,
        topics,
    ):
        metrics = ServiceMetrics()
        service = service_for(
            bootstrap,
            topics,
            group_id=f"{prefix}actors",
            models=ModelPool(make=make),
            metrics=metrics,
        )
        started_lat: list[float] = []
        ended_lat: list[float] = []
        delta_lat: list[float] = []
        by_chunk: list[list[float]] = [[] for _ in range(CHUNKS_PER_TURN)]
        inboxes: dict[uuid.UUID, asyncio.Queue[tuple[AnyEvent, float]]] = defaultdict(
            asyncio.Queue
        )
        async with service:
            await wait_until(lambda: metrics.ready, timeout=60)
            session = await KafkaSession.connect(
                bootstrap, topics=topics, capacity=100_000, request_timeout=30.0
            )
            subscription = session.subscribe_events(EventFilter.everything())

            async def demux() -> None:
                async for event in subscription:
                    seen = time.monotonic()
                    if isinstance(event, TokenDelta) and isinstance(
                        event.chunk, TextChunk
                    ):
                        yielded = stamps.get(event.chunk.text)
                        if yielded is not None and event.turn_index > WARMUP_TURNS:
                            delta_lat.append(seen - yielded)
                            by_chunk[chunk_of(event.chunk.text)[1]].append(
                                seen - yielded
                            )
                    loop_id = event.header.loop_id
                    if loop_id is not None:
                        inboxes[loop_id].put_nowait((event, seen))

            async def one_loop(loop_id: LoopId) -> None:
                inbox = inboxes[loop_id]
                for turn in range(WARMUP_TURNS + turns):
                    counted = turn >= WARMUP_TURNS
                    sent = time.monotonic()
                    command = await session.submit_to_loop(
                        loop_id, f"latency probe {turn}"
                    )
                    while True:
                        event, seen = await inbox.get()
                        if (
                            counted
                            and isinstance(event, TurnStarted)
                            and event.reply_to() == command
                        ):
                            started_lat.append(seen - sent)
                        if isinstance(event, LoopIdle):
                            if counted:
                                ended_lat.append(seen - sent)
                            break

            pump = asyncio.create_task(demux())
            try:
                async with asyncio.timeout(300):
                    await asyncio.gather(
                        *(one_loop(LoopId(uuid.uuid4())) for _ in range(loops))
                    )
            finally:
                pump.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pump
                await session.close()
    return {
        "loops": loops,
        "turns_per_loop": turns,
        "submit_to_turn_started_ms": percentiles(started_lat),
        "submit_to_turn_end_ms": percentiles(ended_lat),
        "chunk_to_token_delta_ms": percentiles(delta_lat),
        "chunk_to_token_delta_ms_by_chunk": [percentiles(s) for s in by_chunk],
        "token_deltas_expected": loops * turns * CHUNKS_PER_TURN,
    }


def chunk_of(text: str) -> tuple[int, int]:
    """Turn and chunk numbers of a ``StampedModel`` text, ``"[tag.turn.chunk] "``."""
    _, turn, chunk = text.strip().strip("[]").split(".")
    return int(turn), int(chunk)


async def _relay(
    relay_in: AIOKafkaConsumer, relay_out: AIOKafkaProducer, events: str, group: str
) -> None:
    """Consume commands; per command, two serial transactions to ``events``.

    The first is the protocol path of one turnstream commit (record and the
    command's offset); the second stands for a text turn's end.
    """
    while True:
        batch = await relay_in.getmany(timeout_ms=1000)
        for tp, records in batch.items():
            for record in records:
                async with relay_out.transaction():
                    await relay_out.send_and_wait(
                        events, record.value, key=record.key, partition=0
                    )
                    await relay_out.send_offsets_to_transaction(
                        {tp: record.offset + 1}, group
                    )
                async with relay_out.transaction():
                    await relay_out.send_and_wait(
                        events, record.value, key=record.key, partition=0
                    )


async def _next_records(consumer: AIOKafkaConsumer, n: int) -> list[float]:
    """When each of the next ``n`` records was seen by ``consumer``."""
    seen: list[float] = []
    while len(seen) < n:
        batch = await consumer.getmany(timeout_ms=1000)
        at = time.monotonic()
        seen.extend(at for records in batch.values() for _ in records)
    return seen[:n]


async def _burst(
    producer: AIOKafkaProducer, topic: str, reader: AIOKafkaConsumer, payload: bytes
) -> list[float]:
    """A turn's chunks as the model yields them: records sent back to back.

    Returns each record's latency from its own send to the reader.
    """
    seen = asyncio.create_task(_next_records(reader, CHUNKS_PER_TURN))
    sent = []
    for _ in range(CHUNKS_PER_TURN):
        sent.append(time.monotonic())
        await producer.send(topic, payload, partition=0)
    return [s - b for s, b in zip(await seen, sent, strict=True)]


async def raw_latency(bootstrap: str, *, samples: int) -> dict[str, Any]:
    """Kafka's floor for both paths, with plain aiokafka, one sample at a time."""
    tag = uuid.uuid4().hex[:8]
    async with topic_set(bootstrap, "latency-raw", partitions=1) as (_prefix, topics):
        commands, events, deltas = topics.commands, topics.events, topics.deltas
        client = AIOKafkaProducer(
            bootstrap_servers=bootstrap, enable_idempotence=True, acks="all"
        )
        lossy = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=0)
        relay_in = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            isolation_level="read_committed",
        )
        relay_out = AIOKafkaProducer(
            bootstrap_servers=bootstrap, transactional_id=f"raw-latency-{tag}"
        )
        readers = {
            events: AIOKafkaConsumer(
                bootstrap_servers=bootstrap, isolation_level="read_committed"
            ),
            deltas: AIOKafkaConsumer(
                bootstrap_servers=bootstrap, isolation_level="read_uncommitted"
            ),
        }
        clients: list[Any] = [client, lossy, relay_in, relay_out, *readers.values()]
        for c in clients:
            await c.start()
        try:
            for topic, consumer in [(commands, relay_in), *readers.items()]:
                tp = TopicPartition(topic, 0)
                consumer.assign([tp])
                await consumer.seek_to_end(tp)
                await consumer.position(tp)

            txn: list[float] = []
            txn2: list[float] = []
            plain: list[float] = []
            burst: list[float] = []
            relay_task = asyncio.create_task(
                _relay(relay_in, relay_out, events, f"raw-latency-{tag}")
            )
            try:
                async with asyncio.timeout(120):
                    payload = b"x" * 300
                    for _ in range(WARMUP_TURNS + samples):
                        waiter = asyncio.create_task(_next_records(readers[events], 2))
                        sent = time.monotonic()
                        await client.send_and_wait(commands, payload, partition=0)
                        first, second = await waiter
                        txn.append(first - sent)
                        txn2.append(second - sent)
                        delta = asyncio.create_task(_next_records(readers[deltas], 1))
                        sent = time.monotonic()
                        await lossy.send(deltas, payload, partition=0)
                        plain.append((await delta)[0] - sent)
                        burst.extend(
                            await _burst(lossy, deltas, readers[deltas], payload)
                        )
            finally:
                relay_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await relay_task
        finally:
            for c in clients:
                with contextlib.suppress(Exception):
                    await c.stop()
    return {
        "samples": samples,
        "command_to_committed_record_ms": percentiles(txn[WARMUP_TURNS:]),
        "command_to_second_committed_record_ms": percentiles(txn2[WARMUP_TURNS:]),
        "acks1_record_to_reader_ms": percentiles(plain[WARMUP_TURNS:]),
        "acks1_burst_record_to_reader_ms": percentiles(
            burst[WARMUP_TURNS * CHUNKS_PER_TURN :]
        ),
        "burst_records": CHUNKS_PER_TURN,
    }


async def bench(
    bootstrap: str,
    *,
    cases: list[tuple[int, int]],
    partitions: int,
    raw_samples: int,
) -> dict[str, Any]:
    """The raw floor, then each ``(loops, turns)`` case with its p50 ratios."""
    raw = await raw_latency(bootstrap, samples=raw_samples)
    floor_txn = raw["command_to_committed_record_ms"]["p50"]
    floor_end = raw["command_to_second_committed_record_ms"]["p50"]
    floor_plain = raw["acks1_record_to_reader_ms"]["p50"]
    floor_plain_p99 = raw["acks1_record_to_reader_ms"]["p99"]
    floor_burst = raw["acks1_burst_record_to_reader_ms"]["p50"]
    floor_burst_p99 = raw["acks1_burst_record_to_reader_ms"]["p99"]
    runs = []
    for loops, turns in cases:
        ts = await turnstream_latency(
            bootstrap, loops=loops, turns=turns, partitions=partitions
        )
        started = ts["submit_to_turn_started_ms"]["p50"]
        delta = ts["chunk_to_token_delta_ms"]["p50"]
        ended = ts["submit_to_turn_end_ms"]["p50"]
        ts["p50_ratio_turn_started_vs_raw"] = round(started / floor_txn, 2)
        ts["p50_ratio_turn_end_vs_raw"] = round(ended / floor_end, 2)
        ts["p50_ratio_token_delta_vs_raw"] = round(delta / floor_plain, 2)
        ts["p99_ratio_token_delta_vs_raw"] = round(
            ts["chunk_to_token_delta_ms"]["p99"] / floor_plain_p99, 2
        )
        ts["p50_ratio_token_delta_vs_raw_burst"] = round(delta / floor_burst, 2)
        ts["p99_ratio_token_delta_vs_raw_burst"] = round(
            ts["chunk_to_token_delta_ms"]["p99"] / floor_burst_p99, 2
        )
        runs.append(ts)
    return {"raw": raw, "cases": runs}


def parse_case(text: str) -> tuple[int, int]:
    """``"20x5"`` -> ``(20, 5)``."""
    loops, _, turns = text.partition("x")
    return int(loops), int(turns)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=bootstrap_servers())
    parser.add_argument(
        "--case", type=parse_case, action="append", help="LOOPSxTURNS (repeatable)"
    )
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--raw-samples", type=int, default=300)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    quiet_kafka_logs()
    result = asyncio.run(
        bench(
            args.bootstrap,
            cases=args.case or [(1, 100), (20, 5)],
            partitions=args.partitions,
            raw_samples=args.raw_samples,
        )
    )
    doc = {"measured_at": now_iso(), "machine": machine(), **result}
    print(json.dumps(doc, indent=2))
    write_json(args.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
