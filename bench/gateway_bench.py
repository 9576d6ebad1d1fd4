"""Many SSE clients on one gateway: chunk -> browser event latency and gateway CPU.

``turnstream gateway`` runs as its own process (so its CPU is its own, read from
``/proc``); this process runs an in-process loop-actor service whose scripted model
stamps each text chunk as it yields it (every chunk's text is unique), ``clients``
raw HTTP/1.1 SSE clients on one loop's event stream (asyncio sockets, no HTTP
library: a regex finds each ``TokenDelta``'s text in its ``data:`` line), and, for
comparison, one in-process ``KafkaSession.attach`` on the same loop. The loop runs
``turns`` turns of ``chunks`` chunks, ``delay`` seconds apart, one turn after the
other. Measured with one monotonic clock:

* **chunk -> SSE event**: from the model's yield to the moment a client read the
  event's ``data:`` line, for every client and every chunk;
* **chunk -> attach item**: the same for the in-process ``attach`` client;
* **gateway CPU**: user + system seconds of the gateway process over the turns,
  per delta (one chunk, fanned out to every client) and per event delivered.

All clients are on one loop, so each delta is fanned out ``clients`` times: the
gateway's worst case. The client side shares the machine (and this process) with
the actor, so its own scheduling delays are part of the figures. Usage::

    python bench/gateway_bench.py --clients 1000 --turns 10 --chunks 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _support import (
    RESULTS_DIR,
    ModelPool,
    bootstrap_servers,
    cpu_seconds,
    load_average,
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
from turnstream.events import TokenDelta
from turnstream.ids import LoopId
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.client import Streamed
from turnstream.kafka.client.session import KafkaSession
from turnstream.runtime.model_client import ModelClient, ModelEvent, ModelRequest
from turnstream.testing import ScriptedModel, text_step

OUT = RESULTS_DIR / "gateway.json"
TOKEN = "bench-token-0123456789abcdef"  # noqa: S105 - a throwaway test token
_TEXT = re.compile(rb'"chunk":\{"type":"text","text":"(\[[0-9.]+\] )"')


class PacedStampedModel:
    """Text turns of unique chunks, ``delay`` s apart, each stamped as yielded."""

    def __init__(
        self, turns: int, chunks: int, delay: float, stamps: dict[bytes, float]
    ) -> None:
        self._inner = ScriptedModel(
            [text_step(*(f"[{t}.{c}] " for c in range(chunks))) for t in range(turns)]
        )
        self._delay = delay
        self._stamps = stamps

    @property
    def name(self) -> str:
        """The provider label."""
        return self._inner.name

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Play the next script, pacing and stamping each text chunk."""
        return self._paced(self._inner.stream(request))

    async def _paced(
        self, events: AsyncIterator[ModelEvent]
    ) -> AsyncIterator[ModelEvent]:
        async for event in events:
            if isinstance(event, TextChunk):
                await asyncio.sleep(self._delay)
                self._stamps[event.text.encode()] = time.monotonic()
            yield event


async def sse_client(
    port: int,
    path: str,
    stamps: dict[bytes, float],
    samples: list[float],
    connected: list[int],
) -> None:
    """One raw SSE client: read events until cancelled, timing each TokenDelta."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        request = (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {TOKEN}\r\nAccept: text/event-stream\r\n\r\n"
        )
        writer.write(request.encode())
        await writer.drain()
        status = await reader.readline()
        if b" 200 " not in status:
            raise RuntimeError(f"stream refused: {status!r}")
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        connected[0] += 1
        while line := await reader.readline():
            if line.startswith(b"data: "):
                seen = time.monotonic()
                match = _TEXT.search(line)
                if match is not None:
                    yielded = stamps.get(match.group(1))
                    if yielded is not None:
                        samples.append(seen - yielded)
    finally:
        writer.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.asynccontextmanager
async def gateway_process(
    bootstrap: str, prefix: str, port: int
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``turnstream gateway`` on ``port`` for the topic set ``prefix``."""
    with tempfile.TemporaryDirectory() as folder:
        tokens = Path(folder) / "tokens.txt"
        tokens.write_text(f"bench {TOKEN}\n", encoding="utf-8")
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "turnstream.cli",
            "gateway",
            "--tokens",
            str(tokens),
            "--port",
            str(port),
            env={
                **os.environ,
                "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
                "TURNSTREAM_TOPIC_PREFIX": prefix,
            },
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                async with asyncio.timeout(60):
                    while True:
                        with contextlib.suppress(httpx.TransportError):
                            if (await http.get("/healthz")).json()["ok"]:
                                break
                        await asyncio.sleep(0.2)
            yield process
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
            async with asyncio.timeout(30):
                await process.wait()


async def bench(
    bootstrap: str, *, clients: int, turns: int, chunks: int, delay: float
) -> dict[str, Any]:
    """One run; returns the figures."""
    stamps: dict[bytes, float] = {}
    model = PacedStampedModel(turns, chunks, delay, stamps)

    def make(_loop_id: LoopId) -> ModelClient:
        return model

    async with topic_set(bootstrap, "gateway-bench", partitions=1) as (prefix, topics):
        metrics = ServiceMetrics()
        service = service_for(
            bootstrap,
            topics,
            group_id=f"{prefix}actors",
            models=ModelPool(make=make),
            metrics=metrics,
        )
        port = _free_port()
        async with service, gateway_process(bootstrap, prefix, port) as gateway:
            await wait_until(lambda: metrics.ready, timeout=60)
            auth = {"Authorization": f"Bearer {TOKEN}"}
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}", headers=auth
            ) as http:
                loop = (await http.post("/v1/loops")).json()["loop_id"]
                path = f"/v1/loops/{loop}/events"
                sse: list[float] = []
                connected = [0]
                tasks = [
                    asyncio.create_task(sse_client(port, path, stamps, sse, connected))
                    for _ in range(clients)
                ]
                session = await KafkaSession.connect(
                    bootstrap, topics=topics, request_timeout=30.0, live=False
                )
                attach: list[float] = []
                attachment = await session.attach(LoopId(UUID(loop)))

                async def read_attach() -> None:
                    async for item in attachment:
                        seen = time.monotonic()
                        if isinstance(item, Streamed) and isinstance(
                            item.event, TokenDelta
                        ):
                            chunk = item.event.chunk
                            if isinstance(chunk, TextChunk):
                                attach.append(seen - stamps[chunk.text.encode()])

                reading = asyncio.create_task(read_attach())
                try:
                    await wait_until(lambda: connected[0] == clients, timeout=120)
                    cpu_before = cpu_seconds(gateway.pid)
                    started = time.monotonic()
                    for turn in range(turns):
                        await http.post(
                            f"/v1/loops/{loop}/input", json={"text": f"turn {turn}"}
                        )
                        want = (turn + 1) * chunks

                        def arrived(want: int = want) -> bool:
                            return len(sse) >= want * clients and len(attach) >= want

                        await wait_until(arrived, timeout=120)
                    wall = time.monotonic() - started
                    cpu = cpu_seconds(gateway.pid) - cpu_before
                finally:
                    reading.cancel()
                    for task in tasks:
                        task.cancel()
                    await asyncio.gather(reading, *tasks, return_exceptions=True)
                    await attachment.close()
                    await session.close()
    deltas = turns * chunks
    return {
        "clients": clients,
        "turns": turns,
        "chunks_per_turn": chunks,
        "chunk_delay_ms": round(delay * 1000, 1),
        "wall_s": round(wall, 2),
        "chunk_to_sse_event_ms": percentiles(sse),
        "chunk_to_attach_item_ms": percentiles(attach),
        "gateway_cpu_s": round(cpu, 3),
        "gateway_cpu_ms_per_delta": round(cpu * 1000 / deltas, 3),
        "gateway_cpu_us_per_event": round(cpu * 1e6 / (deltas * clients), 2),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the bench and write ``bench/results/gateway.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--chunks", type=int, default=10)
    parser.add_argument("--delay", type=float, default=0.05)
    args = parser.parse_args(argv)
    quiet_kafka_logs()
    load_start = load_average()
    result = asyncio.run(
        bench(
            bootstrap_servers(),
            clients=args.clients,
            turns=args.turns,
            chunks=args.chunks,
            delay=args.delay,
        )
    )
    doc = {
        "when": now_iso(),
        "machine": machine(),
        "load_average": {"start": load_start, "end": load_average()},
        "command": "python bench/gateway_bench.py " + " ".join(argv or sys.argv[1:]),
        "result": result,
    }
    write_json(OUT, doc)
    print(doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
