"""Where a token delta's latency goes: model chunk -> subscriber, stage by stage.

Runs :func:`latency_bench.turnstream_latency` (``loops`` loops in parallel,
each doing text turns one after the other, the in-process service and a
``KafkaSession``; by default one loop, then 20) with the delta path stamped,
on one monotonic clock, at each hand-over of every chunk:

* **yield**: the scripted model yields the chunk;
* **buffered**: ``DeltaPublisher.publish`` returns (event encoded, on the
  sender's buffer);
* **handed**: the sender task hands the record to the ``acks=1`` producer;
* **acked**: the broker's acknowledgement reaches the service;
* **fetched**: the session's live reader has the record and starts decoding;
* **offered**: the decoded ``TokenDelta`` is offered to the subscriptions.

The stamps wrap the service's and the client's own methods (the code is not
changed); each costs a dict write per chunk, so the run's end-to-end figure is
printed beside them for comparison with the unwrapped latency bench. The
stages overlap where the path forks: the record goes to the reader while the
acknowledgement comes back, so *handed -> fetched* is the transport and broker
share and *handed -> acked* is shown for reference. Usage::

    python bench/delta_path.py            # writes bench/results/delta_path.json
    python bench/delta_path.py --case 1x50 --out /tmp/d.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))

import latency_bench
from _support import RESULTS_DIR, bootstrap_servers, now_iso, percentiles
from turnstream.content import TextChunk
from turnstream.events import AnyEvent, TokenDelta
from turnstream.kafka.actor.deltas import DeltaPublisher
from turnstream.kafka.client.live_feed import LiveFeed
from turnstream.wire import Codec

RESULTS = RESULTS_DIR / "delta_path.json"
STAGES = ("yield", "buffered", "handed", "fetched", "offered")
SPANS = (
    ("yield", "buffered", "model chunk -> encoded and buffered (actor)"),
    ("buffered", "handed", "buffered -> handed to the producer (sender task)"),
    ("handed", "fetched", "handed -> the reader has it (aiokafka, broker, fetch)"),
    ("fetched", "offered", "decoded and offered to subscriptions (session)"),
    ("yield", "offered", "model chunk -> offered, in all"),
    ("handed", "acked", "for reference: handed -> acknowledged"),
)


class Stamps:
    """When each chunk (by its unique text) passed each stage."""

    def __init__(self) -> None:
        self.at: dict[str, dict[str, float]] = {}
        self.text_of_value: dict[bytes, str] = {}
        self.text_of_future: dict[int, str] = {}

    def mark(self, text: str | None, stage: str) -> None:
        """Stamp ``text`` at ``stage`` (first time only)."""
        if text is not None:
            self.at.setdefault(text, {}).setdefault(stage, time.monotonic())

    def spans(self, warmup_turns: int) -> dict[str, Any]:
        """Each span's percentiles over the chunks that passed every stage.

        Each loop's first ``warmup_turns`` turns are left out.
        """
        rows = [
            m
            for text, m in self.at.items()
            if all(s in m for s in STAGES)
            and latency_bench.chunk_of(text)[0] >= warmup_turns
        ]
        out: dict[str, Any] = {"chunks": len(rows)}
        for a, b, label in SPANS:
            values = [m[b] - m[a] for m in rows if a in m and b in m]
            out[f"{a}_to_{b}_ms"] = {"label": label, **percentiles(values)}
        return out


def _text(event: Any) -> str | None:
    chunk = getattr(event, "chunk", None)
    return chunk.text if isinstance(chunk, TextChunk) else None


@contextlib.contextmanager
def stamped(stamps: Stamps) -> Iterator[None]:
    """Wrap the delta path's hand-overs so they stamp ``stamps``."""
    publish = DeltaPublisher.publish
    start = DeltaPublisher.start
    delivered = DeltaPublisher._delivered
    marshal = Codec.marshal_ephemeral
    unmarshal = Codec.unmarshal_ephemeral
    offer = LiveFeed._offer
    stamped_model = latency_bench.StampedModel._stamped

    def marshal_ephemeral(self: Codec, event: Any) -> bytes:
        value = marshal(self, event)
        text = _text(event)
        if text is not None:
            stamps.text_of_value[value] = text
        return value

    async def publish_(self: DeltaPublisher, event: Any) -> None:
        await publish(self, event)
        text = _text(event)
        stamps.mark(text, "buffered")
        latest = self._latest.get(event.header.loop_id)
        if text is not None and latest is not None:
            stamps.text_of_future[id(latest)] = text

    async def start_(self: DeltaPublisher) -> None:
        await start(self)
        send = self._producer.send

        async def send_(topic: str, value: bytes, **kw: Any) -> Any:
            stamps.mark(stamps.text_of_value.get(value), "handed")
            return await send(topic, value, **kw)

        self._producer.send = send_

    def delivered_(self: DeltaPublisher, delivery: Any, *, settled: Any) -> None:
        stamps.mark(stamps.text_of_future.get(id(settled)), "acked")
        delivered(self, delivery, settled=settled)

    def unmarshal_ephemeral(self: Codec, data: bytes) -> Any:
        stamps.mark(stamps.text_of_value.get(bytes(data)), "fetched")
        return unmarshal(self, data)

    def offer_(self: LiveFeed, event: AnyEvent, position: Any = None) -> None:
        if isinstance(event, TokenDelta):
            stamps.mark(_text(event), "offered")
        offer(self, event, position)

    async def stamped_(self: Any, events: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for event in stamped_model(self, events):
            if isinstance(event, TextChunk):
                stamps.mark(event.text, "yield")
            yield event

    with contextlib.ExitStack() as stack:
        for owner, name, value in (
            (Codec, "marshal_ephemeral", marshal_ephemeral),
            (Codec, "unmarshal_ephemeral", unmarshal_ephemeral),
            (DeltaPublisher, "publish", publish_),
            (DeltaPublisher, "start", start_),
            (DeltaPublisher, "_delivered", delivered_),
            (LiveFeed, "_offer", offer_),
            (latency_bench.StampedModel, "_stamped", stamped_),
        ):
            stack.enter_context(mock.patch.object(owner, name, value))
        yield


async def bench_case(
    bootstrap: str, *, loops: int, turns: int, partitions: int
) -> dict[str, Any]:
    """``loops`` x ``turns`` text turns with the delta path stamped."""
    stamps = Stamps()
    with stamped(stamps):
        run = await latency_bench.turnstream_latency(
            bootstrap, loops=loops, turns=turns, partitions=partitions
        )
    return {
        "loops": loops,
        "turns_per_loop": turns,
        "chunks_per_turn": latency_bench.CHUNKS_PER_TURN,
        "stages": stamps.spans(latency_bench.WARMUP_TURNS),
        "chunk_to_token_delta_ms_seen_by_subscriber": run["chunk_to_token_delta_ms"],
    }


async def bench(
    bootstrap: str, *, cases: list[tuple[int, int]], partitions: int
) -> dict[str, Any]:
    """Every ``(loops, turns)`` case, one after the other."""
    return {
        "cases": [
            await bench_case(bootstrap, loops=loops, turns=turns, partitions=partitions)
            for loops, turns in cases
        ]
    }


def table(doc: dict[str, Any]) -> list[str]:
    """The stages as a markdown table, one column pair per case."""
    cases = doc["cases"]
    head = " | ".join(f"{c['loops']} loop(s): p50 / p99 ms" for c in cases)
    lines = [f"| span | {head} |", "|---|" + "--:|" * len(cases)]
    for a, b, _label in SPANS:
        label = cases[0]["stages"][f"{a}_to_{b}_ms"]["label"]
        cells = " | ".join(
            f"{p['p50']:.2f} / {p['p99']:.2f}"
            for p in (c["stages"][f"{a}_to_{b}_ms"] for c in cases)
        )
        lines.append(f"| {label} | {cells} |")
    seen = " | ".join(
        f"{p['p50']:.2f} / {p['p99']:.2f}"
        for p in (c["chunk_to_token_delta_ms_seen_by_subscriber"] for c in cases)
    )
    lines.append(f"| model chunk -> the subscriber yields it (same run) | {seen} |")
    chunks = ", ".join(f"{c['stages']['chunks']}" for c in cases)
    lines.append("")
    lines.append(f"Chunks stamped at every stage: {chunks}.")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=bootstrap_servers())
    parser.add_argument(
        "--case",
        action="append",
        type=latency_bench.parse_case,
        help="LOOPSxTURNS (repeatable; default 1x100 and 20x5)",
    )
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    started = now_iso()
    cases = args.case or [(1, 100), (20, 5)]
    doc = asyncio.run(bench(args.bootstrap, cases=cases, partitions=args.partitions))
    doc = {"started": started, "finished": now_iso(), **doc}
    print("\n".join(table(doc)))
    args.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
