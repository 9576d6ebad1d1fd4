"""OpenAI-compatible streaming Chat Completions client.

Owns :class:`OpenAIChatClient` and the mapping of a
:class:`~turnstream.runtime.model_client.ModelRequest` onto a ``POST
{base_url}/chat/completions`` body; the ``chat.completion.chunk`` stream is
parsed by ``_openai_stream.py``. Works with any server speaking the same
dialect (OpenAI, vLLM, llama.cpp, Ollama, LM Studio, OpenRouter…).

Adapters layer: may import httpx and pydantic; must not import aiokafka,
fastavro or faust.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Literal, assert_never

import httpx

from turnstream.content import (
    AIMessage,
    Conversation,
    ImageBlock,
    RefusalBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolResultMessage,
    ToolUseBlock,
    UserMessage,
    text_of,
)
from turnstream.models._http import (
    HttpModelClient,
    JsonObject,
    ModelTimeouts,
    Secret,
    tool_declaration,
)
from turnstream.models._openai_stream import ChunkParser
from turnstream.models._sse import ProtocolFault
from turnstream.runtime.model_client import ModelEvent, ModelRequest, ToolSpec

__all__ = ["DEFAULT_OPENAI_BASE_URL", "OpenAIChatClient"]

DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"
"""The base URL of OpenAI's own API."""


class OpenAIChatClient(HttpModelClient):
    """A :class:`~turnstream.runtime.model_client.ModelClient` for Chat Completions.

    Args:
        base_url: the API root, e.g. ``https://api.openai.com/v1`` or
            ``http://127.0.0.1:8000/v1``; ``/chat/completions`` is appended.
        model: the model used when a request names none.
        api_key: sent as a bearer token; optional for local servers.
        timeouts: network and whole-request timeouts.
        http: a shared ``httpx.AsyncClient`` (the caller closes it); by default
            the client owns one, closed by :meth:`aclose`.
        name: the provider label in errors and logs.
        max_tokens_field: ``"max_tokens"`` (widely supported) or
            ``"max_completion_tokens"`` (required by OpenAI's reasoning models).

    Raises:
        ConfigError: an empty model name or a base URL that is not http(s).
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeouts: ModelTimeouts | None = None,
        http: httpx.AsyncClient | None = None,
        name: str = "openai",
        max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
    ) -> None:
        super().__init__(
            base_url=base_url,
            model=model,
            name=name,
            secret=Secret(api_key) if api_key else None,
            timeouts=timeouts,
            http=http,
        )
        self._max_tokens_field = max_tokens_field

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream one completion: chunks, then a StreamEnd.

        Raises:
            ProviderError: see :meth:`SseTransport.stream`.
        """
        headers = {}
        if self._secret is not None:
            headers["authorization"] = f"Bearer {self._secret.reveal()}"
        return self._transport.stream(
            url=f"{self._base_url}/chat/completions",
            headers=headers,
            build_body=lambda: self._body(request),
            parser=ChunkParser(),
        )

    def _body(self, request: ModelRequest) -> JsonObject:
        body: JsonObject = {
            "model": request.model or self._model,
            "messages": _request_messages(request),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [_tool(spec) for spec in request.tools]
        if request.max_tokens is not None:
            body[self._max_tokens_field] = request.max_tokens
        return body


# --------------------------------------------------------------------------
# Request mapping
# --------------------------------------------------------------------------


def _request_messages(request: ModelRequest) -> list[JsonObject]:
    """The ``messages`` array: system first, then history in order.

    Raises:
        ProtocolFault: a block the dialect cannot carry in its role.
    """
    messages: list[JsonObject] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    messages.extend(_message(message) for message in request.messages)
    return messages


def _message(message: Conversation) -> JsonObject:
    match message:
        case UserMessage():
            return {"role": "user", "content": _user_content(message)}
        case AIMessage():
            return _assistant(message)
        case ToolResultMessage():
            # The dialect's tool message is text only; images render as markers.
            return {
                "role": "tool",
                "tool_call_id": message.tool_use_id,
                "content": text_of(message.blocks),
            }
        case _:
            assert_never(message)


def _user_content(message: UserMessage) -> str | list[JsonObject]:
    parts: list[JsonObject] = []
    for block in message.blocks:
        match block:
            case TextBlock() | RefusalBlock():
                parts.append({"type": "text", "text": block.text})
            case ImageBlock():
                parts.append({"type": "image_url", "image_url": {"url": _url(block)}})
            case ThinkingBlock():
                continue
            case ToolUseBlock() | ToolResultBlock():
                raise ProtocolFault(
                    f"unsupported content ({block.type} in a user turn)"
                )
            case _:
                assert_never(block)
    if all(part["type"] == "text" for part in parts):
        # Plain string content is what every compatible server accepts.
        return "".join(str(part["text"]) for part in parts)
    return parts


def _assistant(message: AIMessage) -> JsonObject:
    text: list[str] = []
    refusal: list[str] = []
    calls: list[JsonObject] = []
    for block in message.blocks:
        match block:
            case TextBlock():
                text.append(block.text)
            case RefusalBlock():
                refusal.append(block.text)
            case ToolUseBlock():
                calls.append(
                    {
                        "id": block.id,
                        "type": "function",
                        # Replayed verbatim: the provider must see what it sent.
                        "function": {"name": block.name, "arguments": block.input},
                    }
                )
            case ThinkingBlock() | ImageBlock():
                # Chat Completions accepts neither reasoning replay nor images
                # from the assistant.
                continue
            case ToolResultBlock():
                raise ProtocolFault("unsupported content (tool_result in a reply)")
            case _:
                assert_never(block)
    result: JsonObject = {"role": "assistant"}
    result["content"] = "".join(text) if text or not calls else None
    if refusal:
        result["refusal"] = "".join(refusal)
    if calls:
        result["tool_calls"] = calls
    return result


def _url(image: ImageBlock) -> str:
    if image.url is not None:
        return image.url
    data = base64.b64encode(image.data or b"").decode("ascii")
    return f"data:{image.media_type};base64,{data}"


def _tool(spec: ToolSpec) -> JsonObject:
    return {"type": "function", "function": tool_declaration(spec, "parameters")}
