"""AnthropicMessagesClient against a local server speaking the real event stream."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tests.support.http_stream_server import (
    Gate,
    HttpStreamServer,
    ScriptedResponse,
    sse,
)
from tests.unit.models.helpers import (
    API_KEY,
    assert_no_secret,
    collect,
    collect_failure,
)

from turnstream.content import (
    AIMessage,
    ImageBlock,
    RefusalBlock,
    TextBlock,
    TextChunk,
    ThinkingBlock,
    ThinkingChunk,
    ToolResultMessage,
    ToolUseBlock,
    ToolUseChunk,
    Usage,
    UserMessage,
)
from turnstream.errors import ConfigError
from turnstream.models import AnthropicMessagesClient
from turnstream.runtime.model_client import ModelRequest, StreamEnd, ToolSpec

REQUEST = ModelRequest(
    model="claude-test", messages=(UserMessage(blocks=(TextBlock(text="hi"),)),)
)


def event(payload: dict[str, Any]) -> bytes:
    """One Messages API event, named as the API names it."""
    return sse(payload, event=str(payload["type"]))


def message_start(**usage: int) -> bytes:
    return event(
        {
            "type": "message_start",
            "message": {
                "id": "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": "claude-test",
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 25, "output_tokens": 1, **usage},
            },
        }
    )


def block_start(index: int, block: dict[str, Any]) -> bytes:
    return event(
        {"type": "content_block_start", "index": index, "content_block": block}
    )


def delta(index: int, body: dict[str, Any]) -> bytes:
    return event({"type": "content_block_delta", "index": index, "delta": body})


def block_stop(index: int) -> bytes:
    return event({"type": "content_block_stop", "index": index})


def message_delta(stop_reason: str, output_tokens: int = 15) -> bytes:
    return event(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        }
    )


PING = event({"type": "ping"})
MESSAGE_STOP = event({"type": "message_stop"})


def text_reply(*pieces: str, stop_reason: str = "end_turn") -> tuple[bytes, ...]:
    return (
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        PING,
        *(delta(0, {"type": "text_delta", "text": piece}) for piece in pieces),
        block_stop(0),
        message_delta(stop_reason),
        MESSAGE_STOP,
    )


@pytest.fixture
async def client(server: HttpStreamServer) -> AsyncIterator[AnthropicMessagesClient]:
    async with AnthropicMessagesClient(
        base_url=server.base_url, model="claude-test", api_key=API_KEY
    ) as anthropic:
        yield anthropic


def stream_of(*body: bytes | Gate, cut: bool = False) -> ScriptedResponse:
    return ScriptedResponse(body=body, cut=cut)


async def test_anthropic_streams_text_then_one_stream_end(
    server: HttpStreamServer, client: AnthropicMessagesClient
) -> None:
    """text_delta events become TextChunks; message_stop ends with StreamEnd."""
    server.add(stream_of(*text_reply("Hello", "!")))

    events = await collect(client.stream(REQUEST))

    assert events == [
        TextChunk(text="Hello"),
        TextChunk(text="!"),
        StreamEnd(
            usage=Usage(input_tokens=25, output_tokens=15), stop_reason="end_turn"
        ),
    ]


async def test_anthropic_maps_cache_usage(
    server: HttpStreamServer, client: AnthropicMessagesClient
) -> None:
    """message_start's cache counts and message_delta's output count make Usage."""
    server.add(
        stream_of(
            message_start(cache_read_input_tokens=300, cache_creation_input_tokens=20),
            block_start(0, {"type": "text", "text": ""}),
            delta(0, {"type": "text_delta", "text": "ok"}),
            block_stop(0),
            message_delta("end_turn", output_tokens=42),
            MESSAGE_STOP,
        )
    )

    events = await collect(client.stream(REQUEST))

    assert events[-1] == StreamEnd(
        usage=Usage(
            input_tokens=25,
            output_tokens=42,
            cache_read_tokens=300,
            cache_creation_tokens=20,
        ),
        stop_reason="end_turn",
    )


async def test_anthropic_streams_thinking_text_and_two_tool_calls(
    server: HttpStreamServer, client: AnthropicMessagesClient
) -> None:
    """Thinking with its signature, text, and tool calls with split input JSON.

    Indices are dense per kind: the stream's block 2 is tool call 0.
    """
    server.add(
        stream_of(
            message_start(),
            block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
            delta(0, {"type": "thinking_delta", "thinking": "Two sums; "}),
            delta(0, {"type": "thinking_delta", "thinking": "use add."}),
            delta(0, {"type": "signature_delta", "signature": "EqQBCgIYAhIM1gbc"}),
            block_stop(0),
            block_start(1, {"type": "text", "text": ""}),
            delta(1, {"type": "text_delta", "text": "Adding."}),
            block_stop(1),
            block_start(
                2, {"type": "tool_use", "id": "toolu_01", "name": "add", "input": {}}
            ),
            delta(2, {"type": "input_json_delta", "partial_json": ""}),
            delta(2, {"type": "input_json_delta", "partial_json": '{"a": 1, '}),
            delta(2, {"type": "input_json_delta", "partial_json": '"b": 2}'}),
            block_stop(2),
            block_start(
                3, {"type": "tool_use", "id": "toolu_02", "name": "now", "input": {}}
            ),
            block_stop(3),
            message_delta("tool_use", output_tokens=89),
            MESSAGE_STOP,
        )
    )

    events = await collect(client.stream(REQUEST))

    assert events == [
        ThinkingChunk(index=0, thinking="Two sums; "),
        ThinkingChunk(index=0, thinking="use add."),
        ThinkingChunk(
            index=0, signature="EqQBCgIYAhIM1gbc", signature_format="anthropic"
        ),
        TextChunk(text="Adding."),
        ToolUseChunk(index=0, id="toolu_01", name="add"),
        ToolUseChunk(index=0, input_json='{"a": 1, '),
        ToolUseChunk(index=0, input_json='"b": 2}'),
        ToolUseChunk(index=1, id="toolu_02", name="now"),
        ToolUseChunk(index=1, input_json="{}"),
        StreamEnd(
            usage=Usage(input_tokens=25, output_tokens=89), stop_reason="tool_use"
        ),
    ]


async def test_anthropic_redacted_thinking_is_kept_as_provider_state(
    server: HttpStreamServer, client: AnthropicMessagesClient
) -> None:
    """A redacted_thinking block survives as sealed, replayable provider state."""
    server.add(
        stream_of(
            message_start(),
            block_start(0, {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va"}),
            block_stop(0),
            block_start(1, {"type": "text", "text": "done"}),
            block_stop(1),
            message_delta("end_turn"),
            MESSAGE_STOP,
        )
    )

    events = await collect(client.stream(REQUEST))

    assert events[0] == ThinkingChunk(
        index=0,
        provider_state='{"type": "redacted_thinking", "data": "EmwKAhgBEgy3va"}',
        provider_state_format="anthropic",
    )
    assert events[1] == TextChunk(text="done")


async def test_anthropic_skips_unknown_events_and_block_types(
    server: HttpStreamServer, client: AnthropicMessagesClient
) -> None:
    """New event and block types are ignored, as the API's versioning asks."""
    server.add(
        stream_of(
            message_start(),
            event({"type": "some_future_event", "x": 1}),
            block_start(0, {"type": "server_tool_use", "id": "srv", "name": "search"}),
            delta(0, {"type": "input_json_delta", "partial_json": '{"q": 1}'}),
            block_stop(0),
            block_start(1, {"type": "text", "text": ""}),
            delta(1, {"type": "citations_delta", "citation": {"cited_text": "x"}}),
            delta(1, {"type": "text_delta", "text": "answer"}),
            block_stop(1),
            message_delta("end_turn"),
            MESSAGE_STOP,
        )
    )

    events = await collect(client.stream(REQUEST))

    assert events == [
        TextChunk(text="answer"),
        StreamEnd(usage=Usage(input_tokens=25, output_tokens=15)),
    ]


@pytest.mark.parametrize(
    ("stop_reason", "expected"),
    [
        pytest.param("end_turn", "end_turn", id="end_turn"),
        pytest.param("stop_sequence", "end_turn", id="stop_sequence"),
        pytest.param("tool_use", "tool_use", id="tool_use"),
        pytest.param("max_tokens", "max_tokens", id="max_tokens"),
        pytest.param("refusal", "refusal", id="refusal"),
        pytest.param("pause_turn", "other", id="pause_turn"),
    ],
)
async def test_anthropic_maps_stop_reason(
    server: HttpStreamServer,
    client: AnthropicMessagesClient,
    stop_reason: str,
    expected: str,
) -> None:
    """message_delta's stop_reason maps onto the port's stop reasons."""
    server.add(stream_of(*text_reply("x", stop_reason=stop_reason)))

    events = await collect(client.stream(REQUEST))

    assert isinstance(events[-1], StreamEnd)
    assert events[-1].stop_reason == expected


@pytest.mark.parametrize(
    ("status", "error_type", "retriable"),
    [
        pytest.param(400, "invalid_request_error", False, id="400"),
        pytest.param(429, "rate_limit_error", True, id="429"),
        pytest.param(500, "api_error", True, id="500"),
        pytest.param(529, "overloaded_error", True, id="529"),
    ],
)
async def test_anthropic_http_error_becomes_provider_error(
    server: HttpStreamServer,
    client: AnthropicMessagesClient,
    status: int,
    error_type: str,
    retriable: bool,
) -> None:
    """status >= 400: ProviderError with the status and error.message; no key."""
    body = {"type": "error", "error": {"type": error_type, "message": "Nope."}}
    server.add(
        ScriptedResponse(
            status=status,
            headers=(("content-type", "application/json"),),
            body=(json.dumps(body).encode(),),
            framing="length",
        )
    )

    _, error = await collect_failure(client.stream(REQUEST))

    assert (error.provider, error.status, error.reason) == (
        "anthropic",
        status,
        "Nope.",
    )
    assert error.is_retriable is retriable
    assert_no_secret(str(error), repr(error), repr(client))


async def test_anthropic_error_event_mid_stream_is_a_provider_error(
    server: HttpStreamServer, client: AnthropicMessagesClient
) -> None:
    """An error event ends the stream; its type gives a status (overloaded: 529)."""
    server.add(
        stream_of(
            message_start(),
            block_start(0, {"type": "text", "text": ""}),
            delta(0, {"type": "text_delta", "text": "part"}),
            event(
                {
                    "type": "error",
                    "error": {"type": "overloaded_error", "message": "Overloaded"},
                }
            ),
        )
    )

    received, error = await collect_failure(client.stream(REQUEST))

    assert received == [TextChunk(text="part")]
    assert error.reason == "stream error: Overloaded"
    assert error.status == 529
    assert error.is_retriable


async def test_anthropic_unparsable_error_event_is_still_a_stream_error(
    server: HttpStreamServer, client: AnthropicMessagesClient
) -> None:
    """An error event whose data is not JSON is reported as a stream error."""
    server.add(stream_of(message_start(), b"event: error\ndata: upstream gone\n\n"))

    _, error = await collect_failure(client.stream(REQUEST))

    assert (error.reason, error.status) == ("stream error: unknown", None)


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        pytest.param(
            b"event: ping\ndata: {oops\n\n", "malformed stream (invalid JSON)"
        ),
        pytest.param(
            delta(7, {"type": "text_delta", "text": "x"}),
            "malformed stream (delta for an unknown block)",
            id="unknown-block",
        ),
        pytest.param(
            delta(0, {"type": "input_json_delta", "partial_json": "{}"}),
            "malformed stream (delta does not match its block)",
            id="mismatched-delta",
        ),
        pytest.param(
            event({"type": "content_block_delta", "index": "zero"}),
            "malformed stream (unexpected event shape)",
            id="bad-shape",
        ),
    ],
)
async def test_anthropic_malformed_stream_is_a_provider_error(
    server: HttpStreamServer, client: AnthropicMessagesClient, bad: bytes, reason: str
) -> None:
    """Events that break the protocol fail the stream after what came before."""
    server.add(
        stream_of(
            message_start(),
            block_start(0, {"type": "text", "text": ""}),
            delta(0, {"type": "text_delta", "text": "ok"}),
            bad,
            block_stop(0),
            message_delta("end_turn"),
            MESSAGE_STOP,
        )
    )

    received, error = await collect_failure(client.stream(REQUEST))

    assert received == [TextChunk(text="ok")]
    assert error.reason == reason


@pytest.mark.parametrize(
    "cut",
    [
        pytest.param(False, id="clean-end-without-message-stop"),
        pytest.param(True, id="connection-dropped"),
    ],
)
async def test_anthropic_stream_ending_before_message_stop_is_truncated(
    server: HttpStreamServer, client: AnthropicMessagesClient, cut: bool
) -> None:
    """No message_stop: ProviderError "truncated stream", never a StreamEnd."""
    server.add(stream_of(*text_reply("a", "b")[:-1], cut=cut))

    received, error = await collect_failure(client.stream(REQUEST))

    assert received == [TextChunk(text="a"), TextChunk(text="b")]
    assert error.reason.startswith("truncated stream")


async def test_anthropic_maps_the_request_body(
    server: HttpStreamServer, client: AnthropicMessagesClient
) -> None:
    """System, tool_use/tool_result blocks, signed thinking replayed, tools."""
    request = ModelRequest(
        model="",
        system="Be brief.",
        messages=(
            UserMessage(
                blocks=(
                    TextBlock(text="Add 2 and 3, then look."),
                    ImageBlock(media_type="image/png", data=b"\x89PNG"),
                    ImageBlock(media_type="image/jpeg", url="https://x.test/a.jpg"),
                )
            ),
            AIMessage(
                blocks=(
                    ThinkingBlock(
                        thinking="add first",
                        signature="sig-1",
                        signature_format="anthropic",
                    ),
                    ThinkingBlock(
                        provider_state='{"type": "redacted_thinking", "data": "Em"}',
                        provider_state_format="anthropic",
                    ),
                    ThinkingBlock(
                        thinking="foreign", signature="o", signature_format="x"
                    ),
                    ThinkingBlock(thinking="unsealed"),
                    TextBlock(text=""),
                    TextBlock(text="Adding."),
                    ToolUseBlock(id="toolu_1", name="add", input='{"a": 2, "b": 3}'),
                    ToolUseBlock(id="toolu_2", name="look", input="{broken"),
                )
            ),
            ToolResultMessage(tool_use_id="toolu_1", blocks=(TextBlock(text="5"),)),
            ToolResultMessage(
                tool_use_id="toolu_2",
                is_error=True,
                blocks=(TextBlock(text="no eyes"),),
            ),
            UserMessage(blocks=(TextBlock(text="(also, hurry)"),)),
            AIMessage(blocks=(RefusalBlock(text="I won't hurry."),)),
        ),
        tools=(
            ToolSpec(
                name="add",
                description="Add two numbers.",
                input_schema='{"type":"object","required":["a","b"]}',
            ),
        ),
    )
    server.add(stream_of(*text_reply("ok")))

    await collect(client.stream(request))

    [received] = server.requests
    assert received.method == "POST"
    assert received.path == "/v1/messages"
    assert received.headers["x-api-key"] == API_KEY
    assert received.headers["anthropic-version"] == "2023-06-01"
    assert received.headers["content-type"] == "application/json"
    assert received.json() == {
        "model": "claude-test",
        "max_tokens": 4096,
        "stream": True,
        "system": "Be brief.",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Add 2 and 3, then look."},
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": "image/png",
                            "data": "iVBORw==",
                        },
                    },
                    {
                        "type": "image",
                        "source": {"type": "url", "url": "https://x.test/a.jpg"},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "add first", "signature": "sig-1"},
                    {"type": "redacted_thinking", "data": "Em"},
                    {"type": "text", "text": "Adding."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "add",
                        "input": {"a": 2, "b": 3},
                    },
                    {"type": "tool_use", "id": "toolu_2", "name": "look", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "5"}],
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": [{"type": "text", "text": "no eyes"}],
                        "is_error": True,
                    },
                    {"type": "text", "text": "(also, hurry)"},
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "I won't hurry."}],
            },
        ],
        "tools": [
            {
                "name": "add",
                "description": "Add two numbers.",
                "input_schema": {"type": "object", "required": ["a", "b"]},
            }
        ],
    }


async def test_anthropic_request_max_tokens_and_thinking_budget(
    server: HttpStreamServer,
) -> None:
    """A request's max_tokens wins over the default; a budget enables thinking."""
    server.add(stream_of(*text_reply("ok")))
    async with AnthropicMessagesClient(
        base_url=server.base_url,
        model="claude-test",
        api_key=API_KEY,
        max_tokens=1000,
        thinking_budget=512,
    ) as thinking:
        await collect(thinking.stream(REQUEST.model_copy(update={"max_tokens": 2048})))

    body = server.requests[0].json()
    assert body["model"] == "claude-test"
    assert body["max_tokens"] == 2048
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 512}


async def test_anthropic_cancellation_closes_the_connection(
    server: HttpStreamServer, client: AnthropicMessagesClient
) -> None:
    """Cancelling mid-stream propagates CancelledError and the server sees EOF."""
    server.add(
        stream_of(
            message_start(),
            block_start(0, {"type": "text", "text": ""}),
            delta(0, {"type": "text_delta", "text": "first"}),
            Gate(),
        )
    )
    first = asyncio.Event()

    async def consume() -> None:
        async for _ in client.stream(REQUEST):
            first.set()

    task = asyncio.create_task(consume())
    async with asyncio.timeout(10):
        await first.wait()
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task
    async with asyncio.timeout(10):
        await server.disconnected.wait()


async def test_anthropic_reuses_the_connection_across_streams(
    server: HttpStreamServer, client: AnthropicMessagesClient
) -> None:
    """After message_stop the body is drained and the connection pooled."""
    for _ in range(2):
        server.add(stream_of(*text_reply("x")))
        await collect(client.stream(REQUEST))

    assert server.connections == 1


def test_anthropic_repr_hides_the_key() -> None:
    """Neither repr nor the instance's fields show the key."""
    client = AnthropicMessagesClient(api_key=API_KEY, model="claude-test")

    assert repr(client) == (
        "AnthropicMessagesClient(name='anthropic', "
        "base_url='https://api.anthropic.com', model='claude-test')"
    )
    assert_no_secret(repr(client), str(vars(client)))


@pytest.mark.parametrize(
    ("api_key", "model", "max_tokens", "budget"),
    [
        pytest.param("", "m", 10, None, id="no-key"),
        pytest.param(API_KEY, "", 10, None, id="no-model"),
        pytest.param(API_KEY, "m", 0, None, id="no-max-tokens"),
        pytest.param(API_KEY, "m", 1024, 1024, id="budget-not-below-max"),
        pytest.param(API_KEY, "m", 1024, 0, id="budget-zero"),
    ],
)
def test_anthropic_rejects_bad_configuration(
    api_key: str, model: str, max_tokens: int, budget: int | None
) -> None:
    """Bad settings are a ConfigError at construction; the key is not in it."""
    with pytest.raises(ConfigError) as caught:
        AnthropicMessagesClient(
            api_key=api_key, model=model, max_tokens=max_tokens, thinking_budget=budget
        )

    assert_no_secret(str(caught.value))
