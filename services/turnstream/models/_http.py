"""HTTP plumbing shared by the model clients.

Owns :class:`ModelTimeouts` and :class:`SseTransport` (credentials are
:class:`~turnstream.config.Secret`, re-exported here), which POSTs one JSON request,
streams the server-sent-events reply into a provider's :class:`StreamParser`, and is the
single place where HTTP statuses, network failures, deadline overruns and
:class:`ProtocolFault` become :class:`turnstream.errors.ProviderError`.

Adapters layer: may import httpx; must not import aiokafka, fastavro or faust.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack
from typing import Protocol, Self

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from turnstream.config import Secret
from turnstream.errors import ConfigError, ProviderError
from turnstream.models._sse import ProtocolFault, SseDecoder, SseEvent, bounded_reason
from turnstream.runtime.model_client import ModelEvent, StreamEnd, ToolSpec

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_DRAIN_TIMEOUT",
    "DEFAULT_POOL_TIMEOUT",
    "DEFAULT_READ_TIMEOUT",
    "DEFAULT_STREAM_TIMEOUT",
    "DEFAULT_WRITE_TIMEOUT",
    "HttpModelClient",
    "JsonObject",
    "ModelTimeouts",
    "Secret",
    "SseTransport",
    "StreamParser",
    "check_base_url",
    "display_url",
    "parse_json_object",
]

DEFAULT_CONNECT_TIMEOUT = 10.0
"""Seconds to open a connection (TCP and TLS)."""
DEFAULT_READ_TIMEOUT = 120.0
"""Seconds without a byte from the server before a read fails."""
DEFAULT_WRITE_TIMEOUT = 30.0
"""Seconds to send the request body."""
DEFAULT_POOL_TIMEOUT = 10.0
"""Seconds to wait for a free pooled connection."""
DEFAULT_STREAM_TIMEOUT = 600.0
"""Seconds for a whole request, first byte sent to last byte read."""
DEFAULT_DRAIN_TIMEOUT = 1.0
"""Seconds to read what follows a reply's end marker (for connection reuse)."""

_MAX_ERROR_BODY_BYTES = 64 * 1024
# After the end marker the body normally ends at once; reading that tail lets
# httpx return the connection to its pool instead of closing it.
_MAX_DRAIN_BYTES = 64 * 1024

JsonObject = dict[str, object]
"""A JSON object as built for a request body."""


class ModelTimeouts(BaseModel):
    """Timeouts, in seconds, for one model request.

    ``connect``, ``read``, ``write`` and ``pool`` bound single network
    operations (httpx); ``total`` bounds the whole request including the
    streamed reply, however slowly it drips. ``drain`` bounds reading the
    tail after the end marker, which only serves connection reuse: a server
    that keeps the body open past it costs the connection, not the caller.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    connect: float = Field(default=DEFAULT_CONNECT_TIMEOUT, gt=0)
    read: float = Field(default=DEFAULT_READ_TIMEOUT, gt=0)
    write: float = Field(default=DEFAULT_WRITE_TIMEOUT, gt=0)
    pool: float = Field(default=DEFAULT_POOL_TIMEOUT, gt=0)
    total: float = Field(default=DEFAULT_STREAM_TIMEOUT, gt=0)
    drain: float = Field(default=DEFAULT_DRAIN_TIMEOUT, gt=0)

    def to_httpx(self) -> httpx.Timeout:
        """The per-operation part, as httpx wants it."""
        return httpx.Timeout(
            connect=self.connect, read=self.read, write=self.write, pool=self.pool
        )


class StreamParser(Protocol):
    """A provider's event-stream state machine, fed one SSE event at a time."""

    @property
    def done(self) -> bool:
        """Whether the provider's end-of-stream marker has arrived."""
        ...

    def feed(self, event: SseEvent) -> list[ModelEvent]:
        """Consume one event and return the chunks it carries.

        Raises:
            ProtocolFault: a malformed event or a provider error event.
        """
        ...

    def end(self) -> StreamEnd:
        """Usage and stop reason, once the stream has ended.

        Raises:
            ProtocolFault: the end marker never arrived (a truncated stream).
        """
        ...


class SseTransport:
    """One streaming POST per call, with every failure typed.

    Owns its ``httpx.AsyncClient`` unless one is injected (then the caller
    closes it). Timeouts apply per request either way.
    """

    def __init__(
        self,
        *,
        provider: str,
        timeouts: ModelTimeouts,
        secret: Secret | None,
        http: httpx.AsyncClient | None,
    ) -> None:
        self._provider = provider
        self._timeouts = timeouts
        self._secret = secret
        self._owns_http = http is None
        self._http = http or httpx.AsyncClient(timeout=timeouts.to_httpx())

    async def aclose(self) -> None:
        """Close the connection pool if this transport created it."""
        if self._owns_http:
            await self._http.aclose()

    async def stream(
        self,
        *,
        url: str,
        headers: Mapping[str, str],
        build_body: Callable[[], JsonObject],
        parser: StreamParser,
    ) -> AsyncIterator[ModelEvent]:
        """POST ``build_body()`` to ``url`` and yield what ``parser`` makes of it.

        The last item is the parser's :class:`StreamEnd`, yielded after the
        response is closed. Cancellation closes the response (so the server
        sees the disconnect) and propagates unchanged.

        Raises:
            ProviderError: the request could not be mapped, the server answered
                with an HTTP error, the network failed, the stream was
                malformed or truncated, or the total timeout passed.
        """
        try:
            content = _encode(build_body())
            deadline = asyncio.get_running_loop().time() + self._timeouts.total
            async with AsyncExitStack() as stack:
                async with asyncio.timeout_at(deadline):
                    response = await stack.enter_async_context(
                        self._http.stream(
                            "POST",
                            url,
                            content=content,
                            headers={
                                "content-type": "application/json",
                                "accept": "text/event-stream",
                                **headers,
                            },
                            timeout=self._timeouts.to_httpx(),
                        )
                    )
                reader = _BodyReader(response, deadline)
                stack.push_async_callback(reader.aclose)
                await _check_response(reader, response)
                decoder = SseDecoder()
                while not parser.done and (data := await reader.read()) is not None:
                    for sse in decoder.feed(data):
                        for event in parser.feed(sse):
                            yield event
                        if parser.done:
                            break
                if parser.done:
                    await reader.drain(_MAX_DRAIN_BYTES, self._timeouts.drain)
                else:
                    decoder.close()
            yield parser.end()
        except ProtocolFault as fault:
            raise self._error(fault.reason, fault.status) from None
        except TimeoutError:
            raise self._error("stream deadline exceeded") from None
        except httpx.HTTPError as exc:
            raise self._error(type(exc).__name__) from exc

    def _error(self, reason: str, status: int | None = None) -> ProviderError:
        if self._secret is not None:
            reason = self._secret.redact(reason)
        return ProviderError(self._provider, reason, status)


class _BodyReader:
    """Reads a response body chunk by chunk, each read under the deadline.

    The deadline is applied per read, never across a ``yield``: a timeout
    scope that spans a yield would fire in the consumer's code instead.
    """

    def __init__(self, response: httpx.Response, deadline: float) -> None:
        self._chunks = response.aiter_bytes()
        self._deadline = deadline

    async def read(self, deadline: float | None = None) -> bytes | None:
        """The next chunk, or None at the end of the body."""
        try:
            async with asyncio.timeout_at(
                self._deadline if deadline is None else deadline
            ):
                return await anext(self._chunks, None)
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            raise ProtocolFault(f"truncated stream ({type(exc).__name__})") from exc

    async def read_at_most(self, limit: int, deadline: float | None = None) -> bytes:
        """Up to ``limit`` bytes of what is left of the body."""
        parts: list[bytes] = []
        size = 0
        while size < limit and (data := await self.read(deadline)) is not None:
            parts.append(data)
            size += len(data)
        return b"".join(parts)[:limit]

    async def drain(self, limit: int, grace: float) -> None:
        """Read the rest of a complete reply so its connection can be reused.

        The reply is already whole, so a failure here costs only the
        connection (the response is closed instead of pooled).
        """
        deadline = min(self._deadline, asyncio.get_running_loop().time() + grace)
        try:
            await self.read_at_most(limit, deadline)
        except (ProtocolFault, TimeoutError, httpx.HTTPError):
            return

    async def aclose(self) -> None:
        """Finalize the byte iterator now rather than at garbage collection."""
        if isinstance(self._chunks, AsyncGenerator):
            await self._chunks.aclose()


def _encode(body: JsonObject) -> bytes:
    try:
        text = json.dumps(body, ensure_ascii=False, allow_nan=False)
    except ValueError:
        raise ProtocolFault("request is not valid JSON (non-finite number)") from None
    return text.encode()


async def _check_response(reader: _BodyReader, response: httpx.Response) -> None:
    # Redirects are not followed (a POST body must not be re-sent blindly), so
    # any status outside 2xx fails the request with that status.
    if not response.is_success:
        raise ProtocolFault(await _error_reason(reader, response), response.status_code)
    # A server that ignored "stream": true answers with one JSON document; say
    # so instead of reporting a truncated stream.
    media_type = response.headers.get("content-type", "").split(";")[0].strip()
    if media_type == "application/json":
        raise ProtocolFault("expected an event stream, got application/json")


class _ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="ignore")

    message: str | None = None
    type: str | None = None


class _ErrorBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    error: _ErrorDetail | str | None = None
    message: str | None = None
    detail: str | None = None


async def _error_reason(reader: _BodyReader, response: httpx.Response) -> str:
    try:
        body = await reader.read_at_most(_MAX_ERROR_BODY_BYTES)
    except (ProtocolFault, TimeoutError, httpx.HTTPError):
        # The status alone still classifies the failure.
        body = b""
    fallback = response.reason_phrase or "HTTP error"
    try:
        parsed = _ErrorBody.model_validate_json(body)
    except ValidationError:
        # Not JSON (an HTML error page, a proxy's text): never echo it.
        return fallback
    detail = parsed.error
    if isinstance(detail, _ErrorDetail):
        message = detail.message or detail.type
    else:
        message = detail
    return bounded_reason(message or parsed.message or parsed.detail or fallback)


def parse_json_object(text: str, what: str) -> JsonObject:
    """Parse ``text`` as a JSON object.

    Raises:
        ProtocolFault: ``text`` is not a JSON object; the reason names ``what``
            but never repeats the text.
    """
    try:
        value: object = json.loads(text)
    except ValueError:
        raise ProtocolFault(f"{what} is not valid JSON") from None
    if not isinstance(value, dict):
        raise ProtocolFault(f"{what} is not a JSON object")
    return {str(key): item for key, item in value.items()}


def check_base_url(base_url: str) -> str:
    """``base_url`` without a trailing slash, once checked.

    Raises:
        ConfigError: not an http(s) URL with a host.
    """
    try:
        url = httpx.URL(base_url)
    except httpx.InvalidURL:
        raise ConfigError("base_url", "not a valid URL") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ConfigError("base_url", "must be an http or https URL with a host")
    return base_url.rstrip("/")


def tool_declaration(spec: ToolSpec, schema_key: str) -> JsonObject:
    """A tool as both dialects declare it: name, description if any, and schema.

    The dialects differ only in the key the input schema goes under.

    Raises:
        ProtocolFault: the tool's input schema is not a JSON object.
    """
    tool: JsonObject = {"name": spec.name}
    if spec.description:
        tool["description"] = spec.description
    tool[schema_key] = parse_json_object(
        spec.input_schema, f"input_schema of tool {spec.name!r}"
    )
    return tool


def display_url(url: str) -> str:
    """``url`` without any user-info part, fit for a repr or a log line."""
    return str(httpx.URL(url).copy_with(username=None, password=None))


class HttpModelClient:
    """What every HTTP model client shares: label, default model, transport, life.

    A subclass adds its dialect: ``stream`` (the URL, headers and parser) and the
    request body.

    Raises:
        ConfigError: an empty model name or a base URL that is not http(s).
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        name: str,
        secret: Secret | None,
        timeouts: ModelTimeouts | None,
        http: httpx.AsyncClient | None,
    ) -> None:
        if not model:
            raise ConfigError("model", "a model name is required")
        self._base_url = check_base_url(base_url)
        self._model = model
        self._name = name
        self._secret = secret
        self._transport = SseTransport(
            provider=name,
            timeouts=timeouts or ModelTimeouts(),
            secret=secret,
            http=http,
        )

    @property
    def name(self) -> str:
        """The provider label (no secrets)."""
        return self._name

    @property
    def model(self) -> str:
        """The model used when a request names none."""
        return self._model

    async def aclose(self) -> None:
        """Close the owned connection pool (a no-op for an injected client)."""
        await self._transport.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self._name!r}, "
            f"base_url={display_url(self._base_url)!r}, model={self._model!r})"
        )
