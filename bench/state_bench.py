"""Cost of a loop's state snapshot as its conversation grows: memo vs from scratch.

The service writes a loop's state snapshot (its whole history) with every
turn's ``TurnStarted`` and again with its terminal. Encoded from scratch, that
cost grows with the conversation; with the loop's
:class:`~turnstream.wire.EncodedHistory` only the messages added since the
last snapshot are encoded. Two parts:

* **encode** (no broker): for a loop with ``N`` turns of history (the restore
  bench's journal: a question and a ~400-byte answer per turn), the time of one
  turn's two snapshots (``TurnStarted``'s, then the terminal's) with the
  codec's generic writer and with a warm memo; median of repetitions. The
  bytes are compared on every write.
* **service** (a broker): one loop runs ``turns`` text turns through the
  in-process loop-actor service and a ``KafkaSession`` in the same process,
  one after another (submit, wait for ``LoopIdle``). Reported per window of
  turns: p50 submit -> turn end and the process's CPU per turn, with the memo
  and with the memo emptied before every write (what every snapshot cost
  before it existed). The two runs alternate ``repeat`` times.

Usage::

    python bench/state_bench.py                 # writes bench/results/state.json
    python bench/state_bench.py --quick         # small, no file
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
from restore_bench import journal_events
from turnstream.events import LoopIdle
from turnstream.ids import LoopId
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.client.session import KafkaSession
from turnstream.runtime.fold import fold_loop
from turnstream.runtime.subscription import EventFilter
from turnstream.testing import ScriptedModel, text_step
from turnstream.wire import EncodedHistory, default_codec

RESULTS = RESULTS_DIR / "state.json"
ANSWER = tuple(f"word{c:02d} of the answer " for c in range(20))  # ~420 bytes


# ------------------------------------------------------------------ encode


def encode_case(turns: int, reps: int) -> dict[str, Any]:
    """One turn's two snapshots at ``turns`` turns of history: generic vs memo."""
    codec = default_codec()
    events = journal_events(turns + 1, uuid.uuid4(), uuid.uuid4())
    # The last turn: TurnStarted, StepDone, TurnDone (journal_events' layout).
    before = fold_loop(events[:-3])
    started = fold_loop(events[-3:-2], before)
    ended = fold_loop(events[-2:], started)
    history = EncodedHistory()
    codec.marshal_state(before, history)  # the memo as the previous turn left it
    generic: list[float] = []
    memo: list[float] = []
    for _ in range(reps):
        t0 = time.perf_counter()
        a1 = codec.marshal_state(started)
        a2 = codec.marshal_state(ended)
        t1 = time.perf_counter()
        warm = EncodedHistory()
        codec.marshal_state(before, warm)
        t2 = time.perf_counter()
        b1 = codec.marshal_state(started, warm)
        b2 = codec.marshal_state(ended, warm)
        t3 = time.perf_counter()
        if (a1, a2) != (b1, b2):
            raise AssertionError(f"memo bytes differ at {turns} turns")
        generic.append(t1 - t0)
        memo.append(t3 - t2)
    full = statistics.median(generic) * 1000
    fast = statistics.median(memo) * 1000
    return {
        "turns": turns,
        "messages": len(ended.messages),
        "state_kib": round(len(a2) / 1024, 1),
        "generic_ms_per_turn": round(full, 3),
        "memo_ms_per_turn": round(fast, 3),
        "speed_up": round(full / fast, 1),
    }


# ----------------------------------------------------------------- service


@contextlib.contextmanager
def memo_emptied() -> Iterator[None]:
    """Empty every loop's memo before each write: the from-scratch behaviour."""
    real_messages, real_ids = EncodedHistory.messages, EncodedHistory.ids

    def messages(self: EncodedHistory, *args: Any) -> Any:
        self.__init__()  # type: ignore[misc]
        return real_messages(self, *args)

    def ids(self: EncodedHistory, *args: Any) -> Any:
        self.__init__()  # type: ignore[misc]
        return real_ids(self, *args)

    EncodedHistory.messages = messages  # type: ignore[method-assign]
    EncodedHistory.ids = ids  # type: ignore[method-assign]
    try:
        yield
    finally:
        EncodedHistory.messages = real_messages  # type: ignore[method-assign]
        EncodedHistory.ids = real_ids  # type: ignore[method-assign]


async def service_case(
    bootstrap: str, *, turns: int, window: int, memo: bool
) -> dict[str, Any]:
    """One loop, ``turns`` text turns one after another; per-window figures."""

    def make(_loop: LoopId) -> ScriptedModel:
        return ScriptedModel([text_step(*ANSWER) for _ in range(turns + 1)])

    async with topic_set(bootstrap, "state", partitions=1) as (prefix, topics):
        metrics = ServiceMetrics()
        service = service_for(
            bootstrap,
            topics,
            group_id=f"{prefix}actors",
            models=ModelPool(make=make),
            metrics=metrics,
        )
        with contextlib.ExitStack() as stack:
            if not memo:
                stack.enter_context(memo_emptied())
            async with service:
                await wait_until(lambda: metrics.ready, timeout=60)
                session = await KafkaSession.connect(
                    bootstrap, topics=topics, capacity=100_000, request_timeout=30.0
                )
                try:
                    return await _run_turns(session, turns=turns, window=window)
                finally:
                    await session.close()
    raise AssertionError("unreachable")  # pragma: no cover


async def _run_turns(
    session: KafkaSession, *, turns: int, window: int
) -> dict[str, Any]:
    subscription = session.subscribe_events(EventFilter.everything())
    idle: asyncio.Queue[float] = asyncio.Queue()

    async def pump() -> None:
        async for event in subscription:
            if isinstance(event, LoopIdle):
                idle.put_nowait(time.monotonic())

    loop_id = LoopId(uuid.uuid4())
    task = asyncio.create_task(pump())
    windows: list[dict[str, Any]] = []
    try:
        async with asyncio.timeout(600):
            await session.submit_to_loop(loop_id, "warm-up")  # not counted
            await idle.get()
            for start in range(0, turns, window):
                latencies: list[float] = []
                cpu0 = time.process_time()
                for turn in range(start, min(turns, start + window)):
                    sent = time.monotonic()
                    await session.submit_to_loop(loop_id, f"question {turn}")
                    latencies.append(await idle.get() - sent)
                cpu = time.process_time() - cpu0
                windows.append(
                    {
                        "turns": f"{start + 2}-{start + 1 + len(latencies)}",
                        "turn_end_ms": percentiles(latencies),
                        "cpu_ms_per_turn": round(cpu / len(latencies) * 1000, 2),
                    }
                )
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return {"windows": windows}


async def bench(
    bootstrap: str,
    *,
    encode_turns: list[int],
    reps: int,
    service_turns: int,
    window: int,
    repeat: int,
) -> dict[str, Any]:
    """Both parts; the service runs alternate memo / emptied ``repeat`` times."""
    encode = [encode_case(n, reps) for n in encode_turns]
    runs: dict[str, list[dict[str, Any]]] = {"memo": [], "emptied": []}
    for _ in range(repeat):
        for name in ("memo", "emptied"):
            case = await service_case(
                bootstrap, turns=service_turns, window=window, memo=name == "memo"
            )
            runs[name].append(case)
    return {
        "encode": encode,
        "service": {
            "turns": service_turns,
            "window": window,
            "answer_bytes": len("".join(ANSWER)),
            "runs": runs,
        },
    }


def main(argv: list[str] | None = None) -> int:
    """Run the bench; print the JSON (and write it unless ``--quick``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=bootstrap_servers())
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    quiet_kafka_logs()
    cfg: dict[str, Any] = (
        {"encode_turns": [5, 50], "reps": 5, "service_turns": 40, "window": 20}
        if args.quick
        else {
            "encode_turns": [5, 50, 250, 1000],
            "reps": 15,
            "service_turns": 400,
            "window": 100,
        }
    )
    result = asyncio.run(bench(args.bootstrap, repeat=1 if args.quick else 2, **cfg))
    doc = {"started": now_iso(), "machine": machine(), "config": cfg, **result}
    print(json.dumps(doc, indent=2))
    if not args.quick:
        write_json(args.out, doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
