"""Trace context of turns: W3C ``traceparent`` values and deterministic span ids.

Owns :class:`TraceContext` (one parsed ``traceparent``), :class:`TurnTrace`
(the trace a turn belongs to), :class:`TraceContexts` (the carried context of
each submitted command, then of each open turn) and the span-id derivations
every span source shares (:func:`trace_id_for`, :func:`span_id_for`).

Why deterministic ids: a turn's spans are built twice, live by the actor's
tracer and later from the committed journal (``turnstream traces export``),
and both must name the same spans. So a span id is a hash of the turn, step
or tool call it stands for, and a turn's trace id is the one its submit carried
or, without one, a hash of its turn id.

Pure stdlib: the OpenTelemetry SDK lives in ``turnstream.tracing`` (an
adapter). Imports only value types.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

from turnstream.events import EventBase, StepDone, TurnStarted

__all__ = [
    "TRACEPARENT",
    "TRACE_ORIGIN",
    "TraceContext",
    "TraceContexts",
    "TurnTrace",
    "event_trace_headers",
    "ratio_sampler",
    "span_id_for",
    "trace_id_for",
]

TRACEPARENT = "traceparent"
"""The W3C header name, on command and event records alike."""
TRACE_ORIGIN = "ts-trace-origin"
"""On ``TurnStarted``: the ``traceparent`` its submit carried (the turn span's
own parent, which a journal reader cannot learn otherwise); on the head record
of a loop whose open turn's submit carried one, for the loop's next owner."""

_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_MAX_ID = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class TraceContext:
    """One ``traceparent``: a trace, the span that made the record, a flag."""

    trace_id: int
    span_id: int
    sampled: bool

    @classmethod
    def parse(cls, value: bytes | str | None) -> TraceContext | None:
        """The context of a header value; ``None`` if absent or malformed.

        A malformed or all-zero value is ignored (W3C: start a new trace),
        never an error: the header comes from any client.
        """
        if value is None:
            return None
        if isinstance(value, bytes):
            try:
                value = value.decode("ascii")
            except UnicodeDecodeError:
                return None
        match = _TRACEPARENT.fullmatch(value.strip())
        if match is None:
            return None
        trace_id, span_id = int(match[1], 16), int(match[2], 16)
        if not trace_id or not span_id:
            return None
        return cls(trace_id, span_id, bool(int(match[3], 16) & 1))

    def header(self) -> str:
        """The ``traceparent`` text."""
        flags = "01" if self.sampled else "00"
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-{flags}"


@dataclass(frozen=True, slots=True)
class TurnTrace:
    """The trace of one turn: its id, the turn span's parent, the decision.

    Attributes:
        trace_id: the trace (the submit's, or derived from the turn id).
        parent_span_id: the submitting span, 0 when the submit carried none.
        sampled: whether the turn's spans are recorded.
        origin: the submit's ``traceparent`` text, if it carried one.
    """

    trace_id: int
    parent_span_id: int
    sampled: bool
    origin: str | None = None

    @classmethod
    def carried(cls, context: TraceContext) -> TurnTrace:
        """The trace of a turn whose submit carried ``context``."""
        return cls(context.trace_id, context.span_id, context.sampled, context.header())

    def child(self, span_id: int) -> str:
        """The ``traceparent`` of a record made by span ``span_id``."""
        return _child_header(self.trace_id, span_id, self.sampled).decode("ascii")


# A turn's records name a handful of spans, each many times (every event record
# of the turn, every child span's parent): hashing and formatting once each is
# most of what tracing costs the event loop (bench/lab/profile_tracing_embedded.py).
# Kept in plain dicts keyed by strings and numbers, none of which the garbage
# collector tracks: an lru_cache's entries (and UUID keys) are objects it
# tracks, and they live long enough to reach the oldest generation, each one
# bringing the next full pass over the actor's heap closer. Cleared when full:
# a turn's entries are needed while it runs, and come back at once if not.
_KEPT = 4096
_headers: dict[tuple[int, int, bool], bytes] = {}
_span_ids: dict[tuple[str, int, str], int] = {}


def _child_header(trace_id: int, span_id: int, sampled: bool) -> bytes:
    key = (trace_id, span_id, sampled)
    header = _headers.get(key)
    if header is None:
        header = TraceContext(trace_id, span_id, sampled).header().encode("ascii")
        if len(_headers) >= _KEPT:
            _headers.clear()
        _headers[key] = header
    return header


def trace_id_for(turn_id: UUID) -> int:
    """The trace id of a turn whose submit carried no context."""
    digest = hashlib.blake2b(turn_id.bytes, digest_size=16, person=b"ts.trace")
    return int.from_bytes(digest.digest(), "big") or 1


def span_id_for(kind: str, entity: UUID, part: str = "") -> int:
    """The span id of ``kind`` (``turn``, ``step``, ``chat``, ``tool``) of ``entity``.

    ``part`` tells apart several spans of one entity (a step's tool calls, by
    their ``tool_use_id``).
    """
    key = (kind, entity.int, part)
    span_id = _span_ids.get(key)
    if span_id is None:
        data = kind.encode() + entity.bytes + part.encode()
        digest = hashlib.blake2b(data, digest_size=8, person=b"ts.span").digest()
        span_id = int.from_bytes(digest, "big") or 1
        if len(_span_ids) >= _KEPT:
            _span_ids.clear()
        _span_ids[key] = span_id
    return span_id


def ratio_sampler(ratio: float) -> Callable[[int], bool]:
    """Sample a trace iff its id's low 64 bits fall under ``ratio``.

    The rule of OpenTelemetry's ``TraceIdRatioBased``, so every process (and
    the journal exporter) makes the same decision for the same trace.
    """
    bound = round(max(0.0, min(1.0, ratio)) * (_MAX_ID + 1))
    return lambda trace_id: (trace_id & _MAX_ID) < bound


class TraceContexts:
    """The carried context of submitted commands and the trace of open turns.

    Bounded, oldest first out: a command whose turn never starts (rejected,
    dead-lettered) cannot grow it, and a turn is kept past its end (a
    terminal committed again after a failed joint commit must carry the same
    trace) until ``capacity`` newer turns push it out. One instance
    serves a service's partitions; every method runs on its event loop.

    Args:
        sampler: decides for a turn whose submit carried no context; ``None``
            (tracing off) leaves such a turn untraced. A carried context's
            own ``sampled`` flag always decides for its turn (parent-based).
        capacity: entries kept per map.
    """

    def __init__(
        self, sampler: Callable[[int], bool] | None = None, *, capacity: int = 8192
    ) -> None:
        self.sampler = sampler
        self._capacity = capacity
        self._commands: OrderedDict[UUID, TraceContext] = OrderedDict()
        self._turns: OrderedDict[UUID, TurnTrace] = OrderedDict()

    def remember(self, command_id: UUID, carried: TraceContext) -> None:
        """Keep the context a submit carried until its turn opens."""
        self._commands[command_id] = carried
        if len(self._commands) > self._capacity:
            self._commands.popitem(last=False)

    def open_turn(self, turn_id: UUID, command_id: UUID | None) -> TurnTrace | None:
        """The trace of ``turn_id``, decided once (later calls return it)."""
        trace = self._turns.get(turn_id)
        if trace is not None:
            return trace
        carried = None
        if command_id is not None and self._commands:
            carried = self._commands.pop(command_id, None)
        if carried is not None:
            trace = TurnTrace.carried(carried)
        elif self.sampler is not None:
            trace_id = trace_id_for(turn_id)
            trace = TurnTrace(trace_id, 0, self.sampler(trace_id))
        else:
            return None  # tracing off and nothing carried: nothing to keep
        self._keep(turn_id, trace)
        return trace

    def _keep(self, turn_id: UUID, trace: TurnTrace) -> None:
        self._turns[turn_id] = trace
        if len(self._turns) > self._capacity:
            self._turns.popitem(last=False)

    def turn(self, turn_id: UUID) -> TurnTrace | None:
        """The trace of an open turn (opened here on first sight: a resumed one)."""
        trace = self._turns.get(turn_id)
        if trace is not None or self.sampler is None:
            return trace
        return self.open_turn(turn_id, None)

    def origin(self, turn_id: UUID) -> str | None:
        """The ``traceparent`` the submit of a turn kept here carried, if any."""
        trace = self._turns.get(turn_id)
        return None if trace is None else trace.origin

    def adopt(self, turn_id: UUID, origin: bytes | str | None) -> None:
        """Take over an open turn whose submit carried ``origin`` (a takeover).

        The owner that started the turn recorded its submit's ``traceparent``
        with the loop's state; the turn's later spans and records join that
        trace here too. A turn already known here, or a malformed or absent
        ``origin``, is left as it is.
        """
        carried = TraceContext.parse(origin)
        if carried is not None and turn_id not in self._turns:
            self._keep(turn_id, TurnTrace.carried(carried))


def event_trace_headers(
    traces: TraceContexts, event: EventBase
) -> list[tuple[str, bytes]]:
    """The trace headers of a turn's event record (none outside a traced turn).

    The ``traceparent`` names the span that committed the event: the step's
    span for a ``StepDone``, the turn's span for the others. ``TurnStarted``
    also carries the submit's own ``traceparent`` (:data:`TRACE_ORIGIN`).
    """
    header = event.header
    turn_id = header.turn_id
    if turn_id is None:
        return []
    if isinstance(event, TurnStarted):
        cause = header.cause
        trace = traces.open_turn(turn_id, None if cause is None else cause.command_id)
    else:
        trace = traces.turn(turn_id)
    if trace is None:
        return []
    if isinstance(event, StepDone) and header.step_id is not None:
        span = span_id_for("step", header.step_id)
    else:
        span = span_id_for("turn", turn_id)
    headers = [(TRACEPARENT, _child_header(trace.trace_id, span, trace.sampled))]
    if trace.origin is not None and isinstance(event, TurnStarted):
        headers.append((TRACE_ORIGIN, trace.origin.encode("ascii")))
    return headers
