"""The gateway's HTTP surface: a Starlette app over a gateway ``Backend``.

Owns :func:`create_app` and :class:`GatewaySettings`. Endpoints (all under
``/v1``, all but ``/healthz`` need ``Authorization: Bearer TOKEN``):

===========================================  =====================================
``POST /v1/loops``                           create a loop (``{"text"}`` optional:
                                             its first input) -> 201
                                             ``{"loop_id", "cursor"}``
``GET /v1/loops/{loop}``                     the loop's state: status, turns,
                                             running turn, open gates
``POST /v1/loops/{loop}/input``              ``{"text", "no_fold"?}`` -> 202
                                             ``{"command_id", "cursor"}``
``POST /v1/loops/{loop}/gates/{gate}``       ``{"action": "approve"|"deny"}`` -> 202
``POST /v1/loops/{loop}/interrupt``          ``{"turn_id"?}`` -> 202
``GET /v1/loops/{loop}/events``              Server-Sent Events (see below)
``GET /healthz``                             liveness, open streams
``GET /``                                    the chat page (``static/``, no token)
===========================================  =====================================

Errors are JSON ``{"error": KIND, "detail": ...}`` with a stable ``KIND``:
401 ``unauthorized``, 403 ``forbidden`` (another tenant's loop), 404
``unknown_loop`` (or ``unknown_gate``: a gate id that is not a UUID), 400
``malformed_json`` / ``invalid_cursor``, 413 ``body_too_large`` /
``command_too_large``, 422 ``invalid_body`` (the fields' locations, never
their values), 503 ``kafka_unavailable`` / ``not_confirmed`` (with the
command id to retry). A request refused with a 4xx sends nothing to Kafka.

Events: each SSE event is ``id: CURSOR``, ``event: TYPE`` (``TurnStarted``,
``TokenDelta`` ... or ``DeltasExpired``), ``data: JSON`` (the event as JSON).
A reconnect with ``Last-Event-ID: CURSOR`` (what a browser's ``EventSource``
sends by itself) or ``?after=CURSOR`` resumes right after that event;
``?from=turn`` starts at the running turn; otherwise the stream is live from
now. The ``cursor`` a create or an input answers with is the stream's
position just before that command: ``?after=`` it gets everything the command
causes. A stream that falls behind (a slow client) gets ``event: close`` with
``{"reason": "slow_consumer", "cursor": ...}`` and is ended: reconnect from
that cursor; a stream the gateway ends for another reason (stopping, a Kafka
read that failed) gets ``event: close`` too, with that reason. Comments
(``: keepalive``) are sent when nothing else is.

Imports starlette (only this subpackage does), the backend and value types.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal, TypeVar
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from turnstream.errors import (
    CommandNotConfirmedError,
    CommandTooLargeError,
    InvalidCursorError,
    TransportError,
    TurnstreamError,
)
from turnstream.gateway.backend import Backend
from turnstream.gateway.tenants import Tenant, Tenants
from turnstream.kafka.client import (
    AttachItem,
    Cursor,
    DeltasExpired,
    HubStream,
    StreamDropped,
)

__all__ = ["GatewaySettings", "create_app"]

_log = logging.getLogger(__name__)

MAX_TEXT = 256 * 1024


def _static() -> dict[str, tuple[bytes, str]]:
    """The chat page's files, read once (they ship in the package)."""
    folder = resources.files("turnstream.gateway") / "static"
    media = {
        "index.html": "text/html; charset=utf-8",
        "app.js": "text/javascript; charset=utf-8",
        "app.css": "text/css; charset=utf-8",
    }
    return {name: ((folder / name).read_bytes(), kind) for name, kind in media.items()}


_STATIC = _static()


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """What the app needs besides Kafka.

    Attributes:
        tenants: the token table.
        max_body_bytes: the largest request body accepted (413 above).
        keepalive: seconds of silence before a stream sends a comment.
    """

    tenants: Tenants
    max_body_bytes: int = 64 * 1024
    keepalive: float = 15.0


class _Body(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


_M = TypeVar("_M", bound=_Body)


class _NewLoop(_Body):
    text: str | None = Field(default=None, min_length=1, max_length=MAX_TEXT)
    no_fold: bool = False


class _Input(_Body):
    text: str = Field(min_length=1, max_length=MAX_TEXT)
    no_fold: bool = False


class _Gate(_Body):
    action: Literal["approve", "deny"]


class _Interrupt(_Body):
    turn_id: UUID | None = None


class _Refused(Exception):
    def __init__(self, status: int, kind: str, detail: object = None) -> None:
        self.status = status
        self.kind = kind
        self.detail = detail
        super().__init__(kind)

    def response(self) -> JSONResponse:
        body: dict[str, object] = {"error": self.kind}
        if self.detail is not None:
            body["detail"] = self.detail
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        return JSONResponse(body, status_code=self.status, headers=headers)


def _tenant(request: Request, tenants: Tenants) -> Tenant:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    tenant = tenants.authenticate(token.strip()) if scheme.lower() == "bearer" else None
    if tenant is None:
        raise _Refused(401, "unauthorized", "send Authorization: Bearer TOKEN")
    return tenant


def _loop_param(request: Request, name: str = "loop") -> UUID:
    try:
        return UUID(request.path_params[name])
    except ValueError:
        raise _Refused(
            404, "unknown_loop" if name == "loop" else "unknown_gate"
        ) from None


async def _body(request: Request, model: type[_M], limit: int) -> _M:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _Refused(413, "body_too_large", {"limit": limit})
    data = bytearray()
    async for chunk in request.stream():
        data.extend(chunk)
        if len(data) > limit:
            raise _Refused(413, "body_too_large", {"limit": limit})
    if not data.strip():
        data = bytearray(b"{}")
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise _Refused(400, "malformed_json", "the body is not JSON") from None
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        fields = [
            {"loc": list(e["loc"]), "type": e["type"]} for e in exc.errors()
        ]  # never the input values
        raise _Refused(422, "invalid_body", fields) from None


def _event_data(item: AttachItem) -> tuple[str, str]:
    if isinstance(item, DeltasExpired):
        data: dict[str, Any] = {
            "type": "DeltasExpired",
            "requested": item.requested,
            "earliest": item.earliest,
        }
        return "DeltasExpired", json.dumps(data, separators=(",", ":"))
    event = item.event
    return event.type_name, event.model_dump_json()


def sse_frame(item: AttachItem) -> bytes:
    """One SSE event: ``id`` (the cursor), ``event`` (the type), ``data`` (JSON)."""
    name, data = _event_data(item)
    return f"id: {item.cursor.encode()}\nevent: {name}\ndata: {data}\n\n".encode()


class FrameCache:
    """Each event's SSE frame, encoded once for every stream that sends it.

    Keyed by cursor: one cursor names one record (and one notice), whichever
    stream reads it, so the streams of a loop share the JSON encoding, the
    gateway's largest cost per event when many clients watch one loop.
    """

    def __init__(self, size: int = 4096) -> None:
        self._frames: OrderedDict[tuple[Cursor, bool], bytes] = OrderedDict()
        self._size = size

    def frame(self, item: AttachItem) -> bytes:
        """``item``'s frame (encoded now, or taken from the cache)."""
        key = (item.cursor, isinstance(item, DeltasExpired))
        found = self._frames.get(key)
        if found is None:
            found = self._frames[key] = sse_frame(item)
            if len(self._frames) > self._size:
                self._frames.popitem(last=False)
        return found


class _Api:
    """The endpoints of one app (its backend is made when the app starts)."""

    def __init__(
        self, settings: GatewaySettings, connect: Callable[[], Awaitable[Backend]]
    ) -> None:
        self.settings = settings
        self._connect = connect
        self._backend: Backend | None = None
        self._frames = FrameCache()

    def backend(self) -> Backend:
        if self._backend is None:
            raise _Refused(503, "kafka_unavailable", "the gateway is starting")
        return self._backend

    @asynccontextmanager
    async def lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        self._backend = await self._connect()
        try:
            yield
        finally:
            backend, self._backend = self._backend, None
            await backend.close()

    async def owned(self, request: Request, tenant: Tenant) -> UUID:
        loop_id = _loop_param(request)
        try:
            owner = await self.backend().directory.owner(loop_id)
        except TransportError:
            raise _Refused(503, "kafka_unavailable") from None
        if owner is None:
            raise _Refused(404, "unknown_loop")
        if owner != tenant.session_id:
            raise _Refused(403, "forbidden", "the loop belongs to another tenant")
        return loop_id

    def handler(
        self, body: Callable[[Request, Tenant], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                tenant = _tenant(request, self.settings.tenants)
                return await body(request, tenant)
            except _Refused as refused:
                return refused.response()
            except CommandTooLargeError:
                return _Refused(413, "command_too_large").response()
            except CommandNotConfirmedError as exc:
                detail = {"command_id": str(exc.command_id)}
                return _Refused(503, "not_confirmed", detail).response()
            except TransportError:
                return _Refused(503, "kafka_unavailable").response()

        return endpoint

    async def create_loop(self, request: Request, tenant: Tenant) -> Response:
        body = await _body(request, _NewLoop, self.settings.max_body_bytes)
        kafka = self.backend()
        loop_id = kafka.new_loop()
        kafka.directory.claim(loop_id, tenant)
        answer: dict[str, object] = {
            "loop_id": str(loop_id),
            "cursor": kafka.hub.position(loop_id).encode(),
        }
        if body.text is not None:
            command = await kafka.submit(
                tenant, loop_id, body.text, no_fold=body.no_fold
            )
            answer["command_id"] = str(command)
        return JSONResponse(answer, status_code=201)

    async def read_loop(self, request: Request, tenant: Tenant) -> Response:
        loop_id = await self.owned(request, tenant)
        view = await self.backend().view(loop_id)
        return JSONResponse(
            {
                "loop_id": str(loop_id),
                "status": view.status,
                "turns": view.turns,
                "running_turn": None
                if view.running_turn is None
                else str(view.running_turn),
                "open_gates": [str(g) for g in view.open_gates],
                "agent": view.agent,
            }
        )

    async def submit(self, request: Request, tenant: Tenant) -> Response:
        loop_id = await self.owned(request, tenant)
        body = await _body(request, _Input, self.settings.max_body_bytes)
        cursor = self.backend().hub.position(loop_id).encode()
        command = await self.backend().submit(
            tenant, loop_id, body.text, no_fold=body.no_fold
        )
        return JSONResponse(
            {"command_id": str(command), "cursor": cursor}, status_code=202
        )

    async def gate(self, request: Request, tenant: Tenant) -> Response:
        loop_id = await self.owned(request, tenant)
        gate_id = _loop_param(request, "gate")
        body = await _body(request, _Gate, self.settings.max_body_bytes)
        command = await self.backend().respond_gate(
            tenant, loop_id, gate_id, body.action
        )
        return JSONResponse({"command_id": str(command)}, status_code=202)

    async def interrupt(self, request: Request, tenant: Tenant) -> Response:
        loop_id = await self.owned(request, tenant)
        body = await _body(request, _Interrupt, self.settings.max_body_bytes)
        command = await self.backend().interrupt(tenant, loop_id, body.turn_id)
        return JSONResponse({"command_id": str(command)}, status_code=202)

    async def events(self, request: Request, tenant: Tenant) -> Response:
        loop_id = await self.owned(request, tenant)
        resume = request.headers.get("last-event-id") or request.query_params.get(
            "after"
        )
        try:
            after = Cursor.decode(resume) if resume else None
            stream = await self.backend().hub.open(
                loop_id,
                after=after,
                turn_start=request.query_params.get("from") == "turn",
            )
        except InvalidCursorError as exc:
            raise _Refused(400, "invalid_cursor", exc.reason) from None
        return StreamingResponse(
            _frames(stream, self.settings.keepalive, self._frames),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def page(self, request: Request) -> Response:
        name = request.path_params.get("name", "index.html")
        found = _STATIC.get(name)
        if found is None:
            return _Refused(404, "not_found").response()
        body, media = found
        return Response(
            body,
            media_type=media,
            headers={
                "Content-Security-Policy": "default-src 'self'",
                "Cache-Control": "no-cache",
            },
        )

    async def health(self, _request: Request) -> Response:
        streams = 0 if self._backend is None else self._backend.hub.streams
        return JSONResponse({"ok": self._backend is not None, "streams": streams})


def create_app(
    settings: GatewaySettings,
    connect: Callable[[], Awaitable[Backend]],
) -> Starlette:
    """The gateway app; ``connect`` makes the backend when the app starts."""
    api = _Api(settings, connect)
    routes = [
        Route("/healthz", api.health, methods=["GET"]),
        Route("/v1/loops", api.handler(api.create_loop), methods=["POST"]),
        Route("/v1/loops/{loop}", api.handler(api.read_loop), methods=["GET"]),
        Route("/v1/loops/{loop}/input", api.handler(api.submit), methods=["POST"]),
        Route("/v1/loops/{loop}/gates/{gate}", api.handler(api.gate), methods=["POST"]),
        Route(
            "/v1/loops/{loop}/interrupt",
            api.handler(api.interrupt),
            methods=["POST"],
        ),
        Route("/v1/loops/{loop}/events", api.handler(api.events), methods=["GET"]),
        Route("/", api.page, methods=["GET"]),
        Route("/{name:str}", api.page, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=api.lifespan)


def _close(reason: str, cursor: Cursor) -> bytes:
    """The last SSE event of a stream the gateway ends: why, and where to resume."""
    data = json.dumps({"reason": reason, "cursor": cursor.encode()})
    return f"event: close\ndata: {data}\n\n".encode()


async def _frames(
    stream: HubStream, keepalive: float, cache: FrameCache
) -> AsyncIterator[bytes]:
    """The SSE body of one stream; closes the stream however it ends."""
    try:
        yield b"retry: 1000\n: connected\n\n"
        while True:
            try:
                async with asyncio.timeout(keepalive):
                    item = await anext(stream)
            except TimeoutError:
                yield b": keepalive\n\n"
                continue
            except StreamDropped as dropped:
                yield _close("slow_consumer", dropped.cursor)
                return
            except TurnstreamError as exc:  # e.g. the catch-up read timed out
                _log.warning("event stream ended", extra={"kind": exc.kind})
                yield _close(exc.kind, stream.cursor)
                return
            except StopAsyncIteration:
                yield _close("gateway_stopping", stream.cursor)
                return
            yield cache.frame(item)
    finally:
        await stream.close()
