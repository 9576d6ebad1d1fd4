"""Anthropic Messages API streaming client.

Owns :class:`AnthropicMessagesClient` and the mapping of a
:class:`~turnstream.runtime.model_client.ModelRequest` onto a ``POST
{base_url}/v1/messages`` body (system, tool_use / tool_result blocks, thinking
blocks replayed with their signature, tools with ``input_schema``); the event
stream is parsed by ``_anthropic_stream.py``.

Adapters layer: may import httpx and pydantic; must not import aiokafka,
fastavro or faust.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Literal, assert_never

import httpx

from turnstream.content import (
    AIMessage,
    Block,
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
from turnstream.errors import ConfigError
from turnstream.models._anthropic_stream import SIGNATURE_FORMAT, EventParser
from turnstream.models._http import (
    HttpModelClient,
    JsonObject,
    ModelTimeouts,
    Secret,
    tool_declaration,
)
from turnstream.models._sse import ProtocolFault
from turnstream.runtime.model_client import ModelEvent, ModelRequest

__all__ = [
    "ANTHROPIC_VERSION",
    "DEFAULT_ANTHROPIC_BASE_URL",
    "DEFAULT_MAX_TOKENS",
    "SIGNATURE_FORMAT",
    "AnthropicMessagesClient",
]

DEFAULT_ANTHROPIC_BASE_URL = "https://api.anthropic.com"
"""The API root; ``/v1/messages`` is appended."""
ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` header value this client speaks."""
DEFAULT_MAX_TOKENS = 4096
"""``max_tokens`` when a request sets none (the API requires one)."""


class AnthropicMessagesClient(HttpModelClient):
    """A :class:`~turnstream.runtime.model_client.ModelClient` for the Messages API.

    Args:
        api_key: sent as ``x-api-key``.
        model: the model used when a request names none.
        base_url: the API root (without ``/v1``).
        max_tokens: ``max_tokens`` when a request sets none.
        thinking_budget: when set, extended thinking is enabled with this
            ``budget_tokens`` (it must be below ``max_tokens``).
        timeouts: network and whole-request timeouts.
        http: a shared ``httpx.AsyncClient`` (the caller closes it); by default
            the client owns one, closed by :meth:`aclose`.
        name: the provider label in errors and logs.

    Raises:
        ConfigError: an empty key or model, a base URL that is not http(s), or
            token limits out of range.
    """

    def __init__(
        self,
        *,
        api_key: str,
        model: str,
        base_url: str = DEFAULT_ANTHROPIC_BASE_URL,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        thinking_budget: int | None = None,
        timeouts: ModelTimeouts | None = None,
        http: httpx.AsyncClient | None = None,
        name: str = "anthropic",
    ) -> None:
        if not api_key:
            raise ConfigError("api_key", "an Anthropic API key is required")
        self._key = Secret(api_key)
        super().__init__(
            base_url=base_url,
            model=model,
            name=name,
            secret=self._key,
            timeouts=timeouts,
            http=http,
        )
        if max_tokens < 1:
            raise ConfigError("max_tokens", "must be positive")
        if thinking_budget is not None and not 0 < thinking_budget < max_tokens:
            raise ConfigError(
                "thinking_budget", "must be positive and below max_tokens"
            )
        self._max_tokens = max_tokens
        self._thinking_budget = thinking_budget

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream one message: chunks, then a StreamEnd.

        Raises:
            ProviderError: see :meth:`SseTransport.stream`.
        """
        return self._transport.stream(
            url=f"{self._base_url}/v1/messages",
            headers={
                "x-api-key": self._key.reveal(),
                "anthropic-version": ANTHROPIC_VERSION,
            },
            build_body=lambda: self._body(request),
            parser=EventParser(),
        )

    def _body(self, request: ModelRequest) -> JsonObject:
        body: JsonObject = {
            "model": request.model or self._model,
            "max_tokens": request.max_tokens or self._max_tokens,
            "stream": True,
        }
        if request.system:
            body["system"] = request.system
        body["messages"] = _request_messages(request)
        if request.tools:
            body["tools"] = [
                tool_declaration(spec, "input_schema") for spec in request.tools
            ]
        if self._thinking_budget is not None:
            body["thinking"] = {
                "type": "enabled",
                "budget_tokens": self._thinking_budget,
            }
        return body


# --------------------------------------------------------------------------
# Request mapping
# --------------------------------------------------------------------------


def _request_messages(request: ModelRequest) -> list[JsonObject]:
    """The ``messages`` array.

    Tool results travel as ``tool_result`` blocks in a user message; runs of
    user-side messages merge into one, so a step's results (and any input
    folded in after them) form the single user turn the API expects.

    Raises:
        ProtocolFault: a block the dialect cannot carry in its role.
    """
    messages: list[JsonObject] = []
    pending_user: list[JsonObject] | None = None
    for message in request.messages:
        role, content = _message(message)
        if role == "user" and pending_user is not None:
            pending_user.extend(content)
            continue
        messages.append({"role": role, "content": content})
        pending_user = content if role == "user" else None
    return messages


def _message(
    message: Conversation,
) -> tuple[Literal["user", "assistant"], list[JsonObject]]:
    match message:
        case UserMessage():
            return "user", [
                _user_block(block) for block in message.blocks if _kept(block)
            ]
        case AIMessage():
            return "assistant", _assistant_blocks(message)
        case ToolResultMessage():
            result = _tool_result(message.tool_use_id, message.blocks, message.is_error)
            return "user", [result]
        case _:
            assert_never(message)


def _kept(block: Block) -> bool:
    # The API rejects empty text blocks; reasoning is never sent as user input.
    if isinstance(block, TextBlock | RefusalBlock):
        return bool(block.text)
    return not isinstance(block, ThinkingBlock)


def _user_block(block: Block) -> JsonObject:
    match block:
        case TextBlock() | RefusalBlock():
            return {"type": "text", "text": block.text}
        case ImageBlock():
            return _image(block)
        case ToolResultBlock():
            return _tool_result(block.tool_use_id, block.content, block.is_error)
        case ThinkingBlock() | ToolUseBlock():
            raise ProtocolFault(f"unsupported content ({block.type} in a user turn)")
        case _:
            assert_never(block)


def _assistant_blocks(message: AIMessage) -> list[JsonObject]:
    out: list[JsonObject] = []
    for block in message.blocks:
        match block:
            case TextBlock() | RefusalBlock():
                if block.text:
                    out.append({"type": "text", "text": block.text})
            case ThinkingBlock():
                replay = _thinking(block)
                if replay is not None:
                    out.append(replay)
            case ToolUseBlock():
                out.append(
                    {
                        "type": "tool_use",
                        "id": block.id,
                        "name": block.name,
                        "input": _tool_input(block.input),
                    }
                )
            case ImageBlock():
                continue  # the API accepts no images from the assistant
            case ToolResultBlock():
                raise ProtocolFault("unsupported content (tool_result in a reply)")
            case _:
                assert_never(block)
    return out


def _thinking(block: ThinkingBlock) -> JsonObject | None:
    """The replayable form of a thinking block, or None to drop it.

    Only blocks sealed by this dialect are replayed: the API verifies the
    signature, and reasoning from another provider means nothing to it.
    """
    if block.signature and block.signature_format == SIGNATURE_FORMAT:
        return {
            "type": "thinking",
            "thinking": block.thinking,
            "signature": block.signature,
        }
    if block.provider_state and block.provider_state_format == SIGNATURE_FORMAT:
        try:
            state: object = json.loads(block.provider_state)
        except ValueError:
            return None
        if isinstance(state, dict) and state.get("type") == "redacted_thinking":
            return {"type": "redacted_thinking", "data": str(state.get("data", ""))}
    return None


def _tool_input(raw: str) -> object:
    # The API wants an object; input the model sent as invalid JSON is replayed
    # as {} (the runtime stores it that way too).
    try:
        value: object = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _tool_result(
    tool_use_id: str,
    blocks: tuple[Block, ...] | tuple[TextBlock | ImageBlock, ...],
    is_error: bool,
) -> JsonObject:
    content = _result_content(blocks)
    result: JsonObject = {"type": "tool_result", "tool_use_id": tool_use_id}
    if content:
        result["content"] = content
    if is_error:
        result["is_error"] = True
    return result


def _result_content(
    blocks: tuple[Block, ...] | tuple[TextBlock | ImageBlock, ...],
) -> list[JsonObject]:
    content: list[JsonObject] = []
    for block in blocks:
        if isinstance(block, ImageBlock):
            content.append(_image(block))
        elif isinstance(block, ToolResultBlock):
            content.extend(_result_content(block.content))
        elif isinstance(block, TextBlock | RefusalBlock):
            if block.text:
                content.append({"type": "text", "text": block.text})
        else:
            # Reasoning or a tool call inside a result has no result form.
            content.append({"type": "text", "text": text_of((block,))})
    return content


def _image(image: ImageBlock) -> JsonObject:
    if image.url is not None:
        return {"type": "image", "source": {"type": "url", "url": image.url}}
    return {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": image.media_type,
            "data": base64.b64encode(image.data or b"").decode("ascii"),
        },
    }
