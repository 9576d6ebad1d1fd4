"""``turnstream gateway`` over HTTP, on a real uvicorn server and the real broker.

An in-process loop-actor service runs the loops; its model is scripted with pauses,
so the test decides where a turn stands when a browser-like client drops its event
stream and reconnects with ``Last-Event-ID`` (the cursor of the last event it got):
the tokens of both connections make the committed answer exactly, no event id comes
twice. Tenants are scoped: a token for tenant B gets 403 on tenant A's loop, also
from a fresh gateway that learns the owner from the loops topic. Bad requests (no
token, unknown loop, oversized body, malformed JSON, invalid fields or cursor) get
their 4xx and nothing reaches the commands topic. A hub stream that is not read is
dropped with its resume cursor while another stream of the same hub reads on.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from uuid import uuid4

import httpx
import pytest
from aiokafka import TopicPartition
from tests.support.eventually import assert_eventually
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    Models,
    apply_topic_set,
    clients_for,
    collect_garbage,
    collect_garbage_late,
    delete_topic_set,
    running,
    service_for,
    unique_prefix,
)

from turnstream.content import TextChunk
from turnstream.gateway import Backend, GatewaySettings, Tenants, start_server
from turnstream.kafka.client import StreamDropped, Streamed, StreamHub
from turnstream.kafka.topology import TopicNames
from turnstream.runtime.model_client import StreamEnd
from turnstream.testing import Pause, ScriptedModel
from turnstream.testing.model import ScriptItem
from turnstream.wire import default_codec

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(180)]

WAIT = 45.0
ANSWER = ("Hello ", "there, ", "this ", "is ", "the ", "end.")
ALICE = "alice-token-0123456789"
BOB = "bob-token-0123456789ab"
TOKENS = f"alice {ALICE}\nbob {BOB}\n"


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _paced(*pauses: Pause) -> list[ScriptItem]:
    first, second = pauses
    return [
        *(TextChunk(text=t) for t in ANSWER[:2]),
        first,
        *(TextChunk(text=t) for t in ANSWER[2:4]),
        second,
        *(TextChunk(text=t) for t in ANSWER[4:]),
        StreamEnd(stop_reason="end_turn"),
    ]


@dataclass
class Lane:
    """A topic set, an actor service, and what the test scripts for its model."""

    bootstrap: str
    topics: TopicNames
    model: ScriptedModel
    pauses: list[Pause] = field(default_factory=list)

    @asynccontextmanager
    async def gateway(self, *, queue: int = 2000) -> AsyncIterator[httpx.AsyncClient]:
        settings = GatewaySettings(
            tenants=Tenants.parse(TOKENS), max_body_bytes=1024, keepalive=1.0
        )

        async def connect() -> Backend:
            return await Backend.connect(
                clients_for(self.bootstrap), self.topics, stream_queue=queue
            )

        async with (
            start_server(settings, connect) as url,
            httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(WAIT)) as client,
        ):
            yield client

    async def commands_end(self) -> int:
        """The commands topic's end offsets, summed."""
        clients = clients_for(self.bootstrap)
        consumer = clients.consumer("it-count", read_committed=False)
        await consumer.start()
        try:
            tps = [TopicPartition(self.topics.commands, p) for p in range(2)]
            ends = await consumer.end_offsets(tps)
            return sum(ends.values())
        finally:
            await consumer.stop()


@pytest.fixture
async def lane(kafka_bootstrap: str) -> AsyncIterator[Lane]:
    prefix = unique_prefix("gateway")
    topics = await apply_topic_set(kafka_bootstrap, prefix, partitions=2)
    pauses = [Pause(), Pause()]
    model = ScriptedModel([_paced(*pauses)], then=[TextChunk(text="ok"), StreamEnd()])
    service = service_for(
        kafka_bootstrap,
        topics,
        group_id=f"{prefix}g",
        models=Models(default=model),
        txn_prefix=prefix,
    )
    try:
        async with running(service):
            yield Lane(kafka_bootstrap, topics, model, pauses)
    finally:
        await delete_topic_set(kafka_bootstrap, prefix)


async def _events(response: httpx.Response) -> AsyncIterator[dict[str, str]]:
    """The SSE events of ``response`` (comments and bare ``retry`` skipped)."""
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if not line:
            if "event" in fields:
                yield fields
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")


def _tokens(events: list[dict[str, str]]) -> Iterator[str]:
    for event in events:
        if event["event"] == "TokenDelta":
            chunk = json.loads(event["data"])["chunk"]
            if chunk["type"] == "text":
                yield chunk["text"]


async def _read(
    events: AsyncIterator[dict[str, str]],
    into: list[dict[str, str]],
    *,
    tokens: int = 0,
    until: str = "",
) -> None:
    async with asyncio.timeout(WAIT):
        while True:
            event = await anext(events)
            into.append(event)
            tokens -= event["event"] == "TokenDelta"
            if (until and event["event"] == until) or (not until and tokens <= 0):
                return


async def test_sse_reconnect_with_last_event_id_resumes_exactly(lane: Lane) -> None:
    first_pause, second_pause = lane.pauses
    async with lane.gateway() as http:
        created = await http.post("/v1/loops", headers=_auth(ALICE))
        assert created.status_code == 201, created.text
        loop = created.json()["loop_id"]
        url = f"/v1/loops/{loop}/events"

        before: list[dict[str, str]] = []
        async with http.stream("GET", url, headers=_auth(ALICE)) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            sent = await http.post(
                f"/v1/loops/{loop}/input", headers=_auth(ALICE), json={"text": "hi"}
            )
            assert sent.status_code == 202, sent.text
            await _read(_events(stream), before, tokens=2)
        await first_pause.wait_reached(within=WAIT)
        last_id = before[-1]["id"]

        first_pause.release()  # two tokens stream while the browser is away
        await second_pause.wait_reached(within=WAIT)

        after: list[dict[str, str]] = []
        resume = {**_auth(ALICE), "Last-Event-ID": last_id}
        async with http.stream("GET", url, headers=resume) as stream:
            events = _events(stream)
            await _read(events, after, tokens=2)  # the two missed, replayed
            second_pause.release()
            await _read(events, after, until="TurnDone")

        ids = [e["id"] for e in before + after]
        assert len(ids) == len(set(ids)), ids
        done = json.loads(after[-1]["data"])
        committed = "".join(b["text"] for b in done["message"]["blocks"])
        assert committed == "".join(ANSWER)
        assert "".join(_tokens(before)) + "".join(_tokens(after)) == committed

        state = await http.get(f"/v1/loops/{loop}", headers=_auth(ALICE))
        assert state.status_code == 200
        assert state.json()["loop_id"] == loop


async def test_tenants_are_scoped_and_bad_input_sends_nothing(lane: Lane) -> None:
    for pause in lane.pauses:
        pause.release()
    async with lane.gateway() as http:
        created = await http.post(
            "/v1/loops", headers=_auth(ALICE), json={"text": "hi"}
        )
        assert created.status_code == 201, created.text
        loop = created.json()["loop_id"]

        async def idle() -> None:
            state = await http.get(f"/v1/loops/{loop}", headers=_auth(ALICE))
            assert state.json().get("status") == "idle", state.text

        await assert_eventually(idle, timeout=WAIT, message="turn not committed")
        sent_before = await lane.commands_end()

        base, a, b = f"/v1/loops/{loop}", _auth(ALICE), _auth(BOB)
        text, big = b'{"text":"x"}', b'{"text":"' + b"x" * 2000 + b'"}'
        gate = f"{base}/gates/{uuid4()}"
        cases = [
            ("GET", base, {}, None, 401, "unauthorized"),
            ("GET", base, _auth("x" * 20), None, 401, "unauthorized"),
            ("GET", base, b, None, 403, "forbidden"),
            ("POST", f"{base}/input", b, text, 403, "forbidden"),
            ("GET", f"{base}/events", b, None, 403, "forbidden"),
            ("POST", f"{base}/interrupt", b, b"{}", 403, "forbidden"),
            ("POST", f"/v1/loops/{uuid4()}/input", a, text, 404, "unknown_loop"),
            ("POST", "/v1/loops/not-a-uuid/input", a, text, 404, "unknown_loop"),
            ("POST", f"{base}/input", a, big, 413, "body_too_large"),
            ("POST", f"{base}/input", a, b'{"text": ', 400, "malformed_json"),
            ("POST", f"{base}/input", a, b'{"txt": "x"}', 422, "invalid_body"),
            ("POST", gate, a, b'{"action":"maybe"}', 422, "invalid_body"),
            ("GET", f"{base}/events?after=nope", a, None, 400, "invalid_cursor"),
        ]  # fmt: skip
        for method, path, headers, body, status, kind in cases:
            answer = await http.request(method, path, headers=headers, content=body)
            assert (answer.status_code, answer.json()["error"]) == (status, kind), (
                method,
                path,
                answer.text,
            )
            assert "x" * 20 not in answer.text  # no token or input echoed
        assert await lane.commands_end() == sent_before

    async with lane.gateway() as fresh:  # owners read back from the loops topic
        denied = await fresh.get(f"/v1/loops/{loop}", headers=_auth(BOB))
        assert denied.status_code == 403
        mine = await fresh.get(f"/v1/loops/{loop}", headers=_auth(ALICE))
        assert mine.status_code == 200
        assert mine.json()["status"] == "idle"
        assert mine.json()["turns"] == 1
        again = await fresh.post(
            f"/v1/loops/{loop}/input", headers=_auth(ALICE), json={"text": "more"}
        )
        assert again.status_code == 202
    assert await lane.commands_end() == sent_before + 1


async def test_hub_drops_a_stream_that_is_not_read_and_not_the_others(
    lane: Lane,
) -> None:
    first_pause, second_pause = lane.pauses
    hub = StreamHub(
        clients=clients_for(lane.bootstrap),
        codec=default_codec(),
        topics=lane.topics,
    )
    await hub.start()
    backend = await Backend.connect(
        clients_for(lane.bootstrap), lane.topics, stream_queue=100
    )
    try:
        tenant = Tenants.parse(TOKENS).authenticate(ALICE)
        assert tenant is not None
        loop = backend.new_loop()
        slow = await hub.open(loop, queue=3)
        reader = await hub.open(loop)
        assert hub.streams == 2
        await backend.submit(tenant, loop, "hi", no_fold=False)
        first_pause.release()
        second_pause.release()
        seen = []
        async with asyncio.timeout(WAIT):
            async for item in reader:  # read as it comes: never three behind
                assert isinstance(item, Streamed)
                seen.append(item.event.type_name)
                if item.event.type_name == "TurnDone":
                    break
        assert seen.count("TokenDelta") == len(ANSWER)
        with pytest.raises(StreamDropped) as dropped:
            await anext(slow)
        assert dropped.value.cursor == slow.cursor  # nothing yielded: its start
        assert hub.streams == 1
        await reader.close()
    finally:
        await backend.close()
        await hub.close()


async def test_interrupt_over_http_ends_the_held_turn(lane: Lane) -> None:
    """The turn waits on the model's first pause; POST interrupt ends it."""
    first_pause, _ = lane.pauses
    async with lane.gateway() as http:
        created = await http.post(
            "/v1/loops", headers=_auth(ALICE), json={"text": "hi"}
        )
        loop, start = created.json()["loop_id"], created.json()["cursor"]
        await first_pause.wait_reached(within=WAIT)
        running = await http.get(f"/v1/loops/{loop}", headers=_auth(ALICE))
        assert running.json()["status"] == "running", running.text
        turn = running.json()["running_turn"]
        stopped = await http.post(
            f"/v1/loops/{loop}/interrupt", headers=_auth(ALICE), json={"turn_id": turn}
        )
        assert stopped.status_code == 202, stopped.text
        seen: list[dict[str, str]] = []
        url = f"/v1/loops/{loop}/events?after={start}"
        async with http.stream("GET", url, headers=_auth(ALICE)) as stream:
            await _read(_events(stream), seen, until="TurnInterrupted")
        names = [e["event"] for e in seen]
        assert names.count("TurnStarted") == 1
        assert "".join(_tokens(seen)) == "".join(ANSWER[:2])
        ended = await http.get(f"/v1/loops/{loop}", headers=_auth(ALICE))
        assert ended.json()["status"] == "idle"
        assert ended.json()["running_turn"] is None
