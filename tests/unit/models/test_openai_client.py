"""OpenAIChatClient against a local server speaking the real SSE protocol."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import httpx
import pytest
from tests.support.http_stream_server import (
    Gate,
    HttpStreamServer,
    Pause,
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
    RefusalChunk,
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
from turnstream.models import ModelTimeouts, OpenAIChatClient
from turnstream.runtime.model_client import (
    ModelRequest,
    StopReason,
    StreamEnd,
    ToolSpec,
)

REQUEST = ModelRequest(
    model="gpt-test", messages=(UserMessage(blocks=(TextBlock(text="hi"),)),)
)


def chunk(
    delta: dict[str, Any] | None = None,
    *,
    finish: str | None = None,
    usage: dict[str, Any] | None = None,
    choices: bool = True,
) -> bytes:
    """A chat.completion.chunk event, shaped as OpenAI sends it."""
    body: dict[str, Any] = {
        "id": "chatcmpl-123",
        "object": "chat.completion.chunk",
        "created": 1694268190,
        "model": "gpt-test",
        "system_fingerprint": "fp_44709d6fcb",
        "choices": [
            {
                "index": 0,
                "delta": delta if delta is not None else {},
                "logprobs": None,
                "finish_reason": finish,
            }
        ]
        if choices
        else [],
    }
    if usage is not None or not choices:
        body["usage"] = usage
    return sse(body)


DONE = b"data: [DONE]\n\n"
USAGE = {
    "prompt_tokens": 9,
    "completion_tokens": 12,
    "total_tokens": 21,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
}


@pytest.fixture
async def client(server: HttpStreamServer) -> AsyncIterator[OpenAIChatClient]:
    async with OpenAIChatClient(
        base_url=f"{server.base_url}/v1", model="gpt-test", api_key=API_KEY
    ) as openai:
        yield openai


def stream_of(*body: bytes | Gate | Pause, cut: bool = False) -> ScriptedResponse:
    return ScriptedResponse(body=body, cut=cut)


async def test_openai_streams_text_then_one_stream_end(
    server: HttpStreamServer, client: OpenAIChatClient
) -> None:
    """Content deltas become TextChunks in order; [DONE] ends with StreamEnd."""
    server.add(
        stream_of(
            chunk({"role": "assistant", "content": "", "refusal": None}),
            chunk({"content": "Hel"}),
            chunk({"content": "lo!"}),
            chunk({}, finish="stop"),
            chunk(usage=USAGE, choices=False),
            DONE,
        )
    )

    events = await collect(client.stream(REQUEST))

    assert events == [
        TextChunk(text="Hel"),
        TextChunk(text="lo!"),
        StreamEnd(
            usage=Usage(input_tokens=9, output_tokens=12), stop_reason="end_turn"
        ),
    ]


async def test_openai_streams_two_parallel_tool_calls_with_split_arguments(
    server: HttpStreamServer, client: OpenAIChatClient
) -> None:
    """tool_calls deltas keep their index, id and name; arguments arrive in pieces."""
    first = {
        "index": 0,
        "id": "call_a",
        "type": "function",
        "function": {"name": "add", "arguments": ""},
    }
    second = {
        "index": 1,
        "id": "call_b",
        "type": "function",
        "function": {"name": "word_count", "arguments": ""},
    }
    split_event = chunk(
        {"tool_calls": [{"index": 1, "function": {"arguments": '"hi"}'}}]}
    )
    server.add(
        stream_of(
            chunk({"role": "assistant", "content": None, "tool_calls": [first]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 1'}}]}),
            chunk({"tool_calls": [second]}),
            chunk(
                {"tool_calls": [{"index": 0, "function": {"arguments": ', "b": 2}'}}]}
            ),
            chunk(
                {"tool_calls": [{"index": 1, "function": {"arguments": '{"text": '}}]}
            ),
            # One event split mid-line across two paced network writes.
            split_event[:17],
            Pause(0.01),
            split_event[17:],
            chunk({}, finish="tool_calls"),
            DONE,
        )
    )

    events = await collect(client.stream(REQUEST))

    assert events == [
        ToolUseChunk(index=0, id="call_a", name="add"),
        ToolUseChunk(index=0, input_json='{"a": 1'),
        ToolUseChunk(index=1, id="call_b", name="word_count"),
        ToolUseChunk(index=0, input_json=', "b": 2}'),
        ToolUseChunk(index=1, input_json='{"text": '),
        ToolUseChunk(index=1, input_json='"hi"}'),
        StreamEnd(usage=None, stop_reason="tool_use"),
    ]
    by_index: dict[int, str] = {}
    for event in events:
        if isinstance(event, ToolUseChunk):
            by_index[event.index] = by_index.get(event.index, "") + event.input_json
    assert json.loads(by_index[0]) == {"a": 1, "b": 2}
    assert json.loads(by_index[1]) == {"text": "hi"}


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        pytest.param(
            {
                "prompt_tokens": 100,
                "completion_tokens": 30,
                "total_tokens": 130,
                "prompt_tokens_details": {"cached_tokens": 40},
                "completion_tokens_details": {"reasoning_tokens": 12},
            },
            Usage(
                input_tokens=60,
                output_tokens=30,
                cache_read_tokens=40,
                reasoning_tokens=12,
            ),
            id="cached-and-reasoning",
        ),
        pytest.param(
            {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
            Usage(input_tokens=7, output_tokens=3),
            id="no-details",
        ),
        pytest.param(
            {
                "prompt_tokens": 5,
                "completion_tokens": 2,
                "prompt_tokens_details": None,
                "completion_tokens_details": {"reasoning_tokens": None},
            },
            Usage(input_tokens=5, output_tokens=2),
            id="null-details",
        ),
    ],
)
async def test_openai_maps_usage(
    server: HttpStreamServer,
    client: OpenAIChatClient,
    wire: dict[str, Any],
    expected: Usage,
) -> None:
    """prompt_tokens minus cached tokens is input; cached tokens are cache reads."""
    server.add(
        stream_of(
            chunk({"content": "ok"}, finish="stop"),
            chunk(usage=wire, choices=False),
            DONE,
        )
    )

    events = await collect(client.stream(REQUEST))

    assert events[-1] == StreamEnd(usage=expected, stop_reason="end_turn")


async def test_openai_streams_refusal(
    server: HttpStreamServer, client: OpenAIChatClient
) -> None:
    """delta.refusal becomes RefusalChunks, never text."""
    server.add(
        stream_of(
            chunk({"role": "assistant", "content": None, "refusal": ""}),
            chunk({"refusal": "I can't "}),
            chunk({"refusal": "help with that."}),
            chunk({}, finish="content_filter"),
            DONE,
        )
    )

    events = await collect(client.stream(REQUEST))

    assert events == [
        RefusalChunk(text="I can't "),
        RefusalChunk(text="help with that."),
        StreamEnd(stop_reason="refusal"),
    ]


async def test_openai_streams_reasoning_fields_as_thinking(
    server: HttpStreamServer, client: OpenAIChatClient
) -> None:
    """reasoning_content (DeepSeek, vLLM) and reasoning (OpenRouter) are thinking."""
    server.add(
        stream_of(
            chunk({"reasoning_content": "First, "}),
            chunk({"reasoning": "add them."}),
            chunk({"reasoning": {"effort": "low"}}),
            chunk({"content": "3"}, finish="stop"),
            DONE,
        )
    )

    events = await collect(client.stream(REQUEST))

    assert events == [
        ThinkingChunk(index=0, thinking="First, "),
        ThinkingChunk(index=0, thinking="add them."),
        TextChunk(text="3"),
        StreamEnd(stop_reason="end_turn"),
    ]


@pytest.mark.parametrize(
    ("finish", "expected"),
    [
        pytest.param("stop", "end_turn", id="stop"),
        pytest.param("tool_calls", "tool_use", id="tool_calls"),
        pytest.param("length", "max_tokens", id="length"),
        pytest.param("content_filter", "refusal", id="content_filter"),
        pytest.param("something_new", "other", id="unknown"),
        pytest.param(None, "end_turn", id="missing"),
    ],
)
async def test_openai_maps_finish_reason(
    server: HttpStreamServer,
    client: OpenAIChatClient,
    finish: str | None,
    expected: StopReason,
) -> None:
    """finish_reason maps onto the port's stop reasons."""
    server.add(stream_of(chunk({"content": "x"}, finish=finish), DONE))

    events = await collect(client.stream(REQUEST))

    assert events[-1] == StreamEnd(stop_reason=expected)


async def test_openai_reports_tool_use_when_a_server_says_stop_after_calls(
    server: HttpStreamServer, client: OpenAIChatClient
) -> None:
    """Some compatible servers finish a tool-calling reply with "stop"."""
    call = {"index": 0, "id": "c1", "function": {"name": "add", "arguments": "{}"}}
    server.add(stream_of(chunk({"tool_calls": [call]}), chunk({}, finish="stop"), DONE))

    events = await collect(client.stream(REQUEST))

    assert events[-1] == StreamEnd(stop_reason="tool_use")


@pytest.mark.parametrize(
    ("status", "message", "retriable"),
    [
        pytest.param(400, "Invalid value for 'messages'.", False, id="400"),
        pytest.param(429, "Rate limit reached for requests", True, id="429"),
        pytest.param(500, "The server had an error", True, id="500"),
    ],
)
async def test_openai_http_error_becomes_provider_error(
    server: HttpStreamServer,
    client: OpenAIChatClient,
    status: int,
    message: str,
    retriable: bool,
) -> None:
    """status >= 400: ProviderError with the status and error.message; no key."""
    body = json.dumps(
        {"error": {"message": message, "type": "x", "param": None, "code": None}}
    )
    server.add(
        ScriptedResponse(
            status=status,
            headers=(("content-type", "application/json"),),
            body=(body.encode(),),
            framing="length",
        )
    )

    _, error = await collect_failure(client.stream(REQUEST))

    assert error.provider == "openai"
    assert error.status == status
    assert error.reason == message
    assert error.is_retriable is retriable
    assert_no_secret(str(error), repr(error), repr(client))
    assert server.requests[0].headers["authorization"] == f"Bearer {API_KEY}"


async def test_openai_redacts_an_api_key_echoed_in_an_error(
    server: HttpStreamServer, client: OpenAIChatClient
) -> None:
    """A provider that echoes the key back never gets it into the error."""
    body = {"error": {"message": f"Incorrect API key provided: {API_KEY}."}}
    server.add(
        ScriptedResponse(
            status=401, body=(json.dumps(body).encode(),), framing="length"
        )
    )

    _, error = await collect_failure(client.stream(REQUEST))

    assert error.status == 401
    assert error.reason == "Incorrect API key provided: [redacted]."
    assert_no_secret(str(error))


async def test_openai_bounds_the_error_reason_and_never_echoes_a_non_json_body(
    server: HttpStreamServer, client: OpenAIChatClient
) -> None:
    """Long messages are cut to one short line; an HTML page is not repeated."""
    long_body = {"error": {"message": "bad\nrequest " + "x" * 5000}}
    server.add(
        ScriptedResponse(
            status=400, body=(json.dumps(long_body).encode(),), framing="length"
        ),
        ScriptedResponse(
            status=502,
            headers=(("content-type", "text/html"),),
            body=(b"<html>upstream secret page</html>",),
            framing="length",
        ),
    )

    _, long_error = await collect_failure(client.stream(REQUEST))
    _, html_error = await collect_failure(client.stream(REQUEST))

    assert long_error.reason.startswith("bad request xxx")
    assert len(long_error.reason) <= 200
    assert "\n" not in long_error.reason
    assert html_error.status == 502
    assert html_error.reason == "Bad Gateway"


async def test_openai_redirect_is_a_provider_error(
    server: HttpStreamServer, client: OpenAIChatClient
) -> None:
    """Redirects are not followed: any non-2xx status fails with that status."""
    server.add(
        ScriptedResponse(
            status=307,
            headers=(("location", "http://elsewhere.test/v1/chat/completions"),),
            framing="length",
        )
    )

    _, error = await collect_failure(client.stream(REQUEST))

    assert (error.status, error.reason) == (307, "Temporary Redirect")
    assert not error.is_retriable


async def test_openai_malformed_data_line_is_a_provider_error(
    server: HttpStreamServer, client: OpenAIChatClient
) -> None:
    """A data line that is not JSON fails the stream after what came before it."""
    server.add(stream_of(chunk({"content": "ok"}), b"data: {not json\n\n", DONE))

    received, error = await collect_failure(client.stream(REQUEST))

    assert received == [TextChunk(text="ok")]
    assert error.reason == "malformed stream (invalid JSON)"
    assert error.status is None


async def test_openai_unexpected_chunk_shape_is_a_provider_error(
    server: HttpStreamServer, client: OpenAIChatClient
) -> None:
    """Valid JSON of the wrong shape (a list, a string content) is malformed."""
    server.add(stream_of(sse("[1, 2]"), DONE))

    _, error = await collect_failure(client.stream(REQUEST))

    assert error.reason == "malformed stream (unexpected chunk shape)"


@pytest.mark.parametrize(
    "cut",
    [
        pytest.param(False, id="clean-end-without-done"),
        pytest.param(True, id="connection-dropped"),
    ],
)
async def test_openai_stream_ending_before_done_is_truncated(
    server: HttpStreamServer, client: OpenAIChatClient, cut: bool
) -> None:
    """No [DONE]: ProviderError "truncated stream", never a StreamEnd."""
    server.add(
        stream_of(chunk({"content": "par"}), chunk({"content": "tial"}), cut=cut)
    )

    received, error = await collect_failure(client.stream(REQUEST))

    assert received == [TextChunk(text="par"), TextChunk(text="tial")]
    assert error.reason.startswith("truncated stream")


async def test_openai_half_sent_event_at_eof_is_truncated(
    server: HttpStreamServer, client: OpenAIChatClient
) -> None:
    """An event without its blank line is never dispatched, even [DONE]."""
    server.add(stream_of(chunk({"content": "a"}), b"data: [DONE]\n"))

    received, error = await collect_failure(client.stream(REQUEST))

    assert received == [TextChunk(text="a")]
    assert error.reason == "truncated stream"


@pytest.mark.parametrize(
    "error_event",
    [
        pytest.param(
            sse({"error": {"message": "The server is overloaded", "code": 503}}),
            id="error-payload",
        ),
        pytest.param(
            sse(
                {"error": {"message": "The server is overloaded", "code": 503}}, "error"
            ),
            id="error-event",
        ),
    ],
)
async def test_openai_error_event_mid_stream_is_a_provider_error(
    server: HttpStreamServer, client: OpenAIChatClient, error_event: bytes
) -> None:
    """An error mid-stream ends it with its message (and status, when numeric)."""
    server.add(stream_of(chunk({"content": "so far"}), error_event, DONE))

    received, error = await collect_failure(client.stream(REQUEST))

    assert received == [TextChunk(text="so far")]
    assert error.reason == "stream error: The server is overloaded"
    assert error.status == 503
    assert error.is_retriable


async def test_openai_maps_the_request_body(
    server: HttpStreamServer, client: OpenAIChatClient
) -> None:
    """System first; user/assistant/tool roles; tool_calls; images; tools."""
    request = ModelRequest(
        model="gpt-4o-mini",
        system="Be brief.",
        max_tokens=256,
        messages=(
            UserMessage(
                blocks=(
                    TextBlock(text="What is in this image, and 2+3?"),
                    ImageBlock(media_type="image/png", url="https://x.test/cat.png"),
                    ImageBlock(media_type="image/png", data=b"\x89PNG"),
                )
            ),
            AIMessage(
                blocks=(
                    ThinkingBlock(thinking="hmm", signature="s", signature_format="x"),
                    TextBlock(text="Let me check."),
                    ToolUseBlock(id="call_1", name="add", input='{"a": 2, "b": 3}'),
                    ToolUseBlock(id="call_2", name="look", input="{}"),
                ),
                usage=Usage(input_tokens=3),
            ),
            ToolResultMessage(tool_use_id="call_1", blocks=(TextBlock(text="5"),)),
            ToolResultMessage(
                tool_use_id="call_2",
                is_error=True,
                blocks=(TextBlock(text="no "), TextBlock(text="eyes")),
            ),
            AIMessage(blocks=(TextBlock(text="It is 5."),)),
            UserMessage(blocks=(TextBlock(text="thanks"),)),
        ),
        tools=(
            ToolSpec(
                name="add",
                description="Add two numbers.",
                input_schema='{"type":"object","properties":{"a":{"type":"number"}}}',
            ),
            ToolSpec(name="look"),
        ),
    )
    server.add(stream_of(chunk({"content": "ok"}, finish="stop"), DONE))

    await collect(client.stream(request))

    [received] = server.requests
    assert received.method == "POST"
    assert received.path == "/v1/chat/completions"
    assert received.headers["content-type"] == "application/json"
    assert received.headers["accept"] == "text/event-stream"
    assert received.json() == {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in this image, and 2+3?"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "https://x.test/cat.png"},
                    },
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64,iVBORw=="},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": "Let me check.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "look", "arguments": "{}"},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "5"},
            {"role": "tool", "tool_call_id": "call_2", "content": "no eyes"},
            {"role": "assistant", "content": "It is 5."},
            {"role": "user", "content": "thanks"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "add",
                    "description": "Add two numbers.",
                    "parameters": {
                        "type": "object",
                        "properties": {"a": {"type": "number"}},
                    },
                },
            },
            {
                "type": "function",
                "function": {"name": "look", "parameters": {"type": "object"}},
            },
        ],
        "max_tokens": 256,
    }


async def test_openai_tool_only_reply_replays_with_null_content(
    server: HttpStreamServer,
) -> None:
    """An assistant turn with only tool calls sends content null; no key, no auth."""
    request = ModelRequest(
        model="",
        messages=(
            UserMessage(blocks=(TextBlock(text="go"),)),
            AIMessage(blocks=(ToolUseBlock(id="c", name="t", input="{}"),)),
            ToolResultMessage(tool_use_id="c"),
        ),
    )
    server.add(stream_of(DONE))
    async with OpenAIChatClient(
        base_url=server.base_url + "/",
        model="local-model",
        max_tokens_field="max_completion_tokens",
    ) as local:
        await collect(local.stream(request.model_copy(update={"max_tokens": 9})))

    [received] = server.requests
    body = received.json()
    assert "authorization" not in received.headers
    assert received.path == "/chat/completions"
    assert body["model"] == "local-model"
    assert body["max_completion_tokens"] == 9
    assert body["messages"][1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c",
                "type": "function",
                "function": {"name": "t", "arguments": "{}"},
            }
        ],
    }
    assert body["messages"][2] == {"role": "tool", "tool_call_id": "c", "content": ""}


async def test_openai_invalid_tool_schema_fails_before_any_request(
    server: HttpStreamServer, client: OpenAIChatClient
) -> None:
    """A tool whose input_schema is not a JSON object never reaches the server."""
    request = REQUEST.model_copy(
        update={"tools": (ToolSpec(name="bad", input_schema="[1]"),)}
    )

    _, error = await collect_failure(client.stream(request))

    assert error.reason == "input_schema of tool 'bad' is not a JSON object"
    assert server.requests == []


async def test_openai_cancellation_closes_the_connection(
    server: HttpStreamServer, client: OpenAIChatClient
) -> None:
    """Cancelling mid-stream propagates CancelledError and the server sees EOF."""
    server.add(stream_of(chunk({"content": "first"}), Gate()))
    first = asyncio.Event()
    received: list[object] = []

    async def consume() -> None:
        async for event in client.stream(REQUEST):
            received.append(event)
            first.set()

    task = asyncio.create_task(consume())
    async with asyncio.timeout(10):
        await first.wait()
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task
    async with asyncio.timeout(10):
        await server.disconnected.wait()
    assert received == [TextChunk(text="first")]


async def test_openai_closing_the_stream_early_releases_the_connection(
    server: HttpStreamServer, client: OpenAIChatClient
) -> None:
    """A consumer that stops and closes the iterator closes the response too."""
    server.add(stream_of(chunk({"content": "first"}), Gate()))
    stream = client.stream(REQUEST)
    assert isinstance(stream, AsyncGenerator)

    assert await anext(stream) == TextChunk(text="first")
    await stream.aclose()

    async with asyncio.timeout(10):
        await server.disconnected.wait()


async def test_openai_whole_stream_deadline(server: HttpStreamServer) -> None:
    """The total timeout bounds a stream that never ends."""
    server.add(stream_of(chunk({"content": "slow"}), Gate()))
    async with OpenAIChatClient(
        base_url=server.base_url, model="m", timeouts=ModelTimeouts(total=0.2)
    ) as slow:
        received, error = await collect_failure(slow.stream(REQUEST))

    assert received == [TextChunk(text="slow")]
    assert error.reason == "stream deadline exceeded"


async def test_openai_read_timeout(server: HttpStreamServer) -> None:
    """A silent server fails the read with httpx's timeout type as the reason."""
    server.add(stream_of(Gate()))
    async with OpenAIChatClient(
        base_url=server.base_url, model="m", timeouts=ModelTimeouts(read=0.1)
    ) as slow:
        _, error = await collect_failure(slow.stream(REQUEST))

    assert error.reason == "ReadTimeout"
    assert error.status is None


async def test_openai_connection_refused_is_a_provider_error() -> None:
    """A network failure names the exception type; it has no status."""
    async with HttpStreamServer() as gone:
        url = gone.base_url
    async with OpenAIChatClient(base_url=url, model="m", api_key=API_KEY) as client:
        _, error = await collect_failure(client.stream(REQUEST))

    assert error.reason == "ConnectError"
    assert error.status is None
    assert not error.is_retriable
    assert_no_secret(str(error))


async def test_openai_json_reply_to_a_stream_request_is_reported(
    server: HttpStreamServer, client: OpenAIChatClient
) -> None:
    """A server that ignores stream: true is named, not called truncated."""
    server.add(
        ScriptedResponse(
            headers=(("content-type", "application/json"),),
            body=(b'{"choices": []}',),
            framing="length",
        )
    )

    _, error = await collect_failure(client.stream(REQUEST))

    assert error.reason == "expected an event stream, got application/json"


async def test_openai_reuses_the_connection_across_streams(
    server: HttpStreamServer, client: OpenAIChatClient
) -> None:
    """After [DONE] the body is drained, so the next step reuses the connection."""
    for _ in range(3):
        server.add(stream_of(chunk({"content": "x"}, finish="stop"), DONE))
        await collect(client.stream(REQUEST))

    assert len(server.requests) == 3
    assert server.connections == 1


async def test_openai_stream_end_is_not_held_by_a_body_left_open(
    server: HttpStreamServer,
) -> None:
    """After [DONE], a server that never ends the body costs only the connection."""
    server.add(stream_of(chunk({"content": "x"}, finish="stop"), DONE, Gate()))
    async with OpenAIChatClient(
        base_url=server.base_url, model="m", timeouts=ModelTimeouts(drain=0.05)
    ) as client:
        events = await collect(client.stream(REQUEST))

    assert events == [TextChunk(text="x"), StreamEnd(stop_reason="end_turn")]
    async with asyncio.timeout(10):
        await server.disconnected.wait()


async def test_openai_injected_http_client_is_left_open(
    server: HttpStreamServer,
) -> None:
    """aclose() closes only a pool the client created itself."""
    server.add(stream_of(DONE))
    async with httpx.AsyncClient() as shared:
        async with OpenAIChatClient(base_url=server.base_url, model="m", http=shared):
            pass
        assert not shared.is_closed
        client = OpenAIChatClient(base_url=server.base_url, model="m", http=shared)
        assert await collect(client.stream(REQUEST)) == [StreamEnd()]


def test_openai_repr_and_name_hide_the_key() -> None:
    """The key is in neither repr nor name; user-info in the URL is dropped."""
    client = OpenAIChatClient(
        base_url="https://user:pw@api.example.test/v1",
        model="m",
        api_key=API_KEY,
        name="vllm",
    )

    assert client.name == "vllm"
    assert repr(client) == (
        "OpenAIChatClient(name='vllm', base_url='https://api.example.test/v1', "
        "model='m')"
    )
    assert_no_secret(repr(client), str(vars(client)))


@pytest.mark.parametrize(
    ("base_url", "model"),
    [
        pytest.param("ftp://x.test", "m", id="not-http"),
        pytest.param("http://", "m", id="no-host"),
        pytest.param("http://x.test", "", id="no-model"),
    ],
)
def test_openai_rejects_bad_configuration(base_url: str, model: str) -> None:
    """Bad settings are a ConfigError at construction."""
    with pytest.raises(ConfigError):
        OpenAIChatClient(base_url=base_url, model=model)
