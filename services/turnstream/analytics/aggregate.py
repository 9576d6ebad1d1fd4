"""Pure aggregation of the turn journal: per-loop state folded from typed events.

Owns :class:`LoopStats` (everything the analytics keep about one loop),
:class:`Aggregates` (the mergeable counters, latency sketch and token usage of
a window or of the totals), :func:`fold` (apply one event) and the JSON form
the faust table stores. Pure: imports only value types
(:mod:`turnstream.events`, :mod:`turnstream.content`) and
:mod:`turnstream.analytics.percentiles`; must not import faust, fastavro,
aiokafka, :mod:`turnstream.runtime` or :mod:`turnstream.kafka`.

What is counted, and when:

* ``turns_started`` in the window of the ``TurnStarted``;
* on the turn's terminal (``TurnDone``/``TurnFailed``/``TurnInterrupted``),
  in the window of the *terminal* event: the terminal kind, the failure kind
  (``TurnFailed.error.kind``), the latency ``TurnStarted.created_at ->
  terminal.created_at`` (only when both were seen), the turn's step count
  (``StepDone`` events) and tool-call count (``ToolResultMessage`` s in them),
  and its token usage -- ``TurnDone.usage`` for a finished turn, the sum of
  its steps' ``AIMessage.usage`` for a failed or interrupted one -- per loop
  and per model (``LoopStarted.model`` of the loop, ``"unknown"`` before one
  was seen).

Windows are tumbling, aligned to the epoch, and chosen by the event's
``header.created_at`` (never the wall clock). A loop keeps the
``window_retention`` most recent windows relative to the newest event time it
has seen; an event older than that still counts in the totals and is counted
in ``late_events``.

Idempotence (the redelivery guarantee). A loop's state is one value, so the
counters and the marks below change together, atomically, in one changelog
record:

1. **Consumer redelivery** -- the state remembers the journal position
   ``(partition, offset)`` of the last record it applied; a record at or below
   it is skipped (:attr:`Outcome.REDELIVERED`). This is exact and unbounded.
2. **Re-published events** (the same event id at a new offset) -- the last
   ``dedupe_window`` event ids of the loop are remembered
   (:attr:`Outcome.DUPLICATE`).
3. **Turn-level guard** -- a ``TurnStarted``, ``StepDone`` or terminal of a
   turn among the last ``closed_turns`` ended turns (or a second
   ``TurnStarted`` of an open turn) never changes a counter.

So each turn is counted at most once while its id is within the closed-turn
memory, and each event at most once while its id is within the event-id
window; a re-published event older than both bounds would be counted again.

One module on purpose (~730 lines): the fold's state, its per-event rules and its
snapshots change together whenever a figure is added; split, one figure would span
three files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final, assert_never

from turnstream import events as ev
from turnstream.analytics.percentiles import LatencySketch, SketchParams
from turnstream.content import MAX_TOKEN_COUNT, ToolResultMessage, Usage

__all__ = [
    "STATE_VERSION",
    "UNKNOWN_MODEL",
    "Aggregates",
    "CountStats",
    "FoldConfig",
    "LoopStats",
    "OpenTurn",
    "Outcome",
    "Position",
    "TerminalKind",
    "add_usage",
    "fold",
    "fold_journal",
    "micros_of",
    "window_start_ms",
]

UNKNOWN_MODEL: Final = "unknown"
"""The model of a loop whose ``LoopStarted`` was not seen."""

STATE_VERSION: Final = 1
"""Version of the JSON form of :class:`LoopStats` (stored in the faust table)."""

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_US_PER_MS: Final = 1000


class TerminalKind(StrEnum):
    """How a turn ended."""

    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class Outcome(StrEnum):
    """What :func:`fold` did with an event."""

    APPLIED = "applied"
    """The event was new; the state changed (counters and/or marks)."""
    REDELIVERED = "redelivered"
    """The record's offset is at or below the loop's applied mark; nothing changed."""
    DUPLICATE = "duplicate"
    """A known event id, or an event of an already-counted turn; counted as such."""


@dataclass(frozen=True, slots=True)
class FoldConfig:
    """Bounds and window geometry of the aggregation.

    Attributes:
        window_size_ms: tumbling window length, in milliseconds.
        window_retention: windows kept per loop (and reported), newest first.
        dedupe_window: event ids remembered per loop.
        closed_turns: ended turn ids remembered per loop.
        max_open_turns: open turns tracked per loop (the oldest is dropped).
        sketch: the latency sketch geometry.
    """

    window_size_ms: int = 60_000
    window_retention: int = 60
    dedupe_window: int = 256
    closed_turns: int = 64
    max_open_turns: int = 16
    sketch: SketchParams = field(default_factory=SketchParams)

    def __post_init__(self) -> None:
        for name in (
            "window_size_ms",
            "window_retention",
            "dedupe_window",
            "closed_turns",
            "max_open_turns",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")


@dataclass(frozen=True, slots=True)
class Position:
    """Where a record sits in the journal."""

    partition: int
    offset: int


# --------------------------------------------------------------------------
# Time
# --------------------------------------------------------------------------


def micros_of(moment: datetime) -> int:
    """Microseconds since the epoch; a naive datetime is taken as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def window_start_ms(micros: int, window_size_ms: int) -> int:
    """Start (epoch milliseconds) of the tumbling window holding ``micros``."""
    millis = micros // _US_PER_MS
    return millis - millis % window_size_ms


# --------------------------------------------------------------------------
# Aggregates
# --------------------------------------------------------------------------


def add_usage(a: Usage, b: Usage) -> Usage:
    """Field-wise sum of two usages, saturating at ``MAX_TOKEN_COUNT``.

    Saturating (rather than raising, as :meth:`Usage.add` does) keeps one
    absurd record from stopping the stream; the cap is what Avro ``long`` holds.
    """
    return Usage.model_construct(
        input_tokens=min(a.input_tokens + b.input_tokens, MAX_TOKEN_COUNT),
        output_tokens=min(a.output_tokens + b.output_tokens, MAX_TOKEN_COUNT),
        cache_read_tokens=min(
            a.cache_read_tokens + b.cache_read_tokens, MAX_TOKEN_COUNT
        ),
        cache_creation_tokens=min(
            a.cache_creation_tokens + b.cache_creation_tokens, MAX_TOKEN_COUNT
        ),
        reasoning_tokens=min(a.reasoning_tokens + b.reasoning_tokens, MAX_TOKEN_COUNT),
    )


def _usage_to_list(usage: Usage) -> list[int]:
    return [
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_creation_tokens,
        usage.reasoning_tokens,
    ]


def _usage_from_list(values: Iterable[Any]) -> Usage:
    i, o, cr, cc, r = (int(v) for v in values)
    return Usage(
        input_tokens=i,
        output_tokens=o,
        cache_read_tokens=cr,
        cache_creation_tokens=cc,
        reasoning_tokens=r,
    )


_ZERO_USAGE: Final = Usage()


@dataclass(slots=True)
class CountStats:
    """A per-turn count (steps, tool calls) summarised over ended turns."""

    turns: int = 0
    total: int = 0
    max: int = 0

    def add(self, n: int) -> None:
        """Record one ended turn with ``n``."""
        self.turns += 1
        self.total += n
        self.max = max(self.max, n)

    def merge(self, other: CountStats) -> None:
        """Add ``other`` into this."""
        self.turns += other.turns
        self.total += other.total
        self.max = max(self.max, other.max)

    def mean(self) -> float | None:
        """Mean per ended turn, or ``None`` with no turns."""
        return self.total / self.turns if self.turns else None

    def to_list(self) -> list[int]:
        """JSON form."""
        return [self.turns, self.total, self.max]

    @classmethod
    def from_list(cls, data: Iterable[Any]) -> CountStats:
        """Inverse of :meth:`to_list`."""
        turns, total, most = (int(v) for v in data)
        return cls(turns=turns, total=total, max=most)


@dataclass(slots=True)
class Aggregates:
    """The counters of one window (or of the totals); merge is exact."""

    turns_started: int = 0
    turns_done: int = 0
    turns_failed: int = 0
    turns_interrupted: int = 0
    failure_kinds: dict[str, int] = field(default_factory=dict)
    latency: LatencySketch = field(default_factory=LatencySketch)
    steps: CountStats = field(default_factory=CountStats)
    tool_calls: CountStats = field(default_factory=CountStats)
    usage_by_model: dict[str, Usage] = field(default_factory=dict)
    usage_by_loop: dict[str, Usage] = field(default_factory=dict)

    @classmethod
    def empty(cls, params: SketchParams) -> Aggregates:
        """Empty aggregates whose latency sketch uses ``params``."""
        return cls(latency=LatencySketch(params=params))

    @property
    def turns_ended(self) -> int:
        """Turns that reached a terminal."""
        return self.turns_done + self.turns_failed + self.turns_interrupted

    def record_terminal(
        self,
        kind: TerminalKind,
        *,
        failure_kind: str | None,
        latency_ms: float | None,
        steps: int,
        tool_calls: int,
        usage: Usage,
        model: str,
        loop_id: str,
    ) -> None:
        """Count one ended turn."""
        match kind:
            case TerminalKind.DONE:
                self.turns_done += 1
            case TerminalKind.FAILED:
                self.turns_failed += 1
            case TerminalKind.INTERRUPTED:
                self.turns_interrupted += 1
            case _:
                assert_never(kind)
        if failure_kind is not None:
            self.failure_kinds[failure_kind] = (
                self.failure_kinds.get(failure_kind, 0) + 1
            )
        if latency_ms is not None:
            self.latency.add(latency_ms)
        self.steps.add(steps)
        self.tool_calls.add(tool_calls)
        _add_into(self.usage_by_model, model, usage)
        _add_into(self.usage_by_loop, loop_id, usage)

    def merge(self, other: Aggregates) -> None:
        """Add ``other`` into this (exact)."""
        self.turns_started += other.turns_started
        self.turns_done += other.turns_done
        self.turns_failed += other.turns_failed
        self.turns_interrupted += other.turns_interrupted
        for kind, n in other.failure_kinds.items():
            self.failure_kinds[kind] = self.failure_kinds.get(kind, 0) + n
        self.latency.merge(other.latency)
        self.steps.merge(other.steps)
        self.tool_calls.merge(other.tool_calls)
        for model, usage in other.usage_by_model.items():
            _add_into(self.usage_by_model, model, usage)
        for loop_id, usage in other.usage_by_loop.items():
            _add_into(self.usage_by_loop, loop_id, usage)

    def copy(self) -> Aggregates:
        """An independent deep copy."""
        return Aggregates.from_dict(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "ts": self.turns_started,
            "td": self.turns_done,
            "tf": self.turns_failed,
            "ti": self.turns_interrupted,
            "fk": dict(self.failure_kinds),
            "lat": self.latency.to_dict(),
            "st": self.steps.to_list(),
            "tc": self.tool_calls.to_list(),
            "um": {k: _usage_to_list(v) for k, v in self.usage_by_model.items()},
            "ul": {k: _usage_to_list(v) for k, v in self.usage_by_loop.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Aggregates:
        """Inverse of :meth:`to_dict`."""
        return cls(
            turns_started=int(data["ts"]),
            turns_done=int(data["td"]),
            turns_failed=int(data["tf"]),
            turns_interrupted=int(data["ti"]),
            failure_kinds={str(k): int(v) for k, v in data["fk"].items()},
            latency=LatencySketch.from_dict(data["lat"]),
            steps=CountStats.from_list(data["st"]),
            tool_calls=CountStats.from_list(data["tc"]),
            usage_by_model={str(k): _usage_from_list(v) for k, v in data["um"].items()},
            usage_by_loop={str(k): _usage_from_list(v) for k, v in data["ul"].items()},
        )


def _add_into(target: dict[str, Usage], key: str, usage: Usage) -> None:
    current = target.get(key)
    target[key] = usage if current is None else add_usage(current, usage)


# --------------------------------------------------------------------------
# Loop state
# --------------------------------------------------------------------------


@dataclass(slots=True)
class OpenTurn:
    """A turn that started (or was first seen) and has not ended yet."""

    started_us: int | None = None
    steps: int = 0
    tool_calls: int = 0
    usage: Usage = _ZERO_USAGE

    def to_list(self) -> list[Any]:
        """JSON form."""
        return [
            self.started_us,
            self.steps,
            self.tool_calls,
            _usage_to_list(self.usage),
        ]

    @classmethod
    def from_list(cls, data: list[Any]) -> OpenTurn:
        """Inverse of :meth:`to_list`."""
        started, steps, calls, usage = data
        return cls(
            started_us=None if started is None else int(started),
            steps=int(steps),
            tool_calls=int(calls),
            usage=_usage_from_list(usage),
        )


@dataclass(slots=True)
class LoopStats:
    """Everything the analytics keep about one loop (one table value).

    Attributes:
        loop_id: the loop (the table key).
        model: ``LoopStarted.model``, or ``"unknown"``.
        position: the journal position of the last applied record.
        recent_ids: the last ``dedupe_window`` event ids (hex), oldest first.
        closed_turns: the last ``closed_turns`` ended turn ids, oldest first.
        open_turns: turns seen but not ended, oldest first.
        events_applied: events that were new to this loop.
        duplicates: events skipped as duplicates (not counting redeliveries).
        late_events: events too old for the retained windows.
        open_turns_dropped: open turns forgotten to respect ``max_open_turns``.
        watermark_us: the newest ``created_at`` seen, in epoch microseconds.
        totals: all-time aggregates.
        windows: window start (epoch ms) -> aggregates.
    """

    loop_id: str
    model: str = UNKNOWN_MODEL
    position: Position | None = None
    recent_ids: dict[str, None] = field(default_factory=dict)
    closed_turns: dict[str, None] = field(default_factory=dict)
    open_turns: dict[str, OpenTurn] = field(default_factory=dict)
    events_applied: int = 0
    duplicates: int = 0
    late_events: int = 0
    open_turns_dropped: int = 0
    watermark_us: int | None = None
    totals: Aggregates = field(default_factory=Aggregates)
    windows: dict[int, Aggregates] = field(default_factory=dict)

    @classmethod
    def new(cls, loop_id: str, config: FoldConfig) -> LoopStats:
        """An empty state for ``loop_id``."""
        return cls(loop_id=loop_id, totals=Aggregates.empty(config.sketch))

    def to_dict(self) -> dict[str, Any]:
        """JSON form (what the faust table's changelog carries)."""
        return {
            "v": STATE_VERSION,
            "loop": self.loop_id,
            "model": self.model,
            "pos": None
            if self.position is None
            else [self.position.partition, self.position.offset],
            "ids": list(self.recent_ids),
            "closed": list(self.closed_turns),
            "open": {k: t.to_list() for k, t in self.open_turns.items()},
            "applied": self.events_applied,
            "dups": self.duplicates,
            "late": self.late_events,
            "dropped": self.open_turns_dropped,
            "wm": self.watermark_us,
            "totals": self.totals.to_dict(),
            "win": [[start, agg.to_dict()] for start, agg in self.windows.items()],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoopStats:
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: an unknown version or a malformed value.
        """
        if data.get("v") != STATE_VERSION:
            raise ValueError(f"unsupported loop state version {data.get('v')!r}")
        try:
            pos = data["pos"]
            return cls(
                loop_id=str(data["loop"]),
                model=str(data["model"]),
                position=None if pos is None else Position(int(pos[0]), int(pos[1])),
                recent_ids=dict.fromkeys(str(i) for i in data["ids"]),
                closed_turns=dict.fromkeys(str(t) for t in data["closed"]),
                open_turns={
                    str(k): OpenTurn.from_list(v) for k, v in data["open"].items()
                },
                events_applied=int(data["applied"]),
                duplicates=int(data["dups"]),
                late_events=int(data["late"]),
                open_turns_dropped=int(data["dropped"]),
                watermark_us=None if data["wm"] is None else int(data["wm"]),
                totals=Aggregates.from_dict(data["totals"]),
                windows={int(s): Aggregates.from_dict(a) for s, a in data["win"]},
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed loop state: {exc!r}") from exc


# --------------------------------------------------------------------------
# Folding
# --------------------------------------------------------------------------


def fold(
    state: LoopStats,
    event: ev.EnduringEvent,
    config: FoldConfig,
    position: Position | None = None,
) -> Outcome:
    """Apply one journal event of ``state``'s loop to it.

    Args:
        state: the loop's state; mutated in place unless the outcome is
            :attr:`Outcome.REDELIVERED`.
        event: a decoded enduring event of this loop.
        config: bounds and window geometry (keep it fixed for a state's life).
        position: the record's journal position, when read from Kafka.

    Returns:
        What happened; see :class:`Outcome`.
    """
    if position is not None and _already_applied(state.position, position):
        return Outcome.REDELIVERED
    if position is not None:
        state.position = position
    event_id = event.header.event_id
    key = None if event_id is None else event_id.hex
    if key is not None and key in state.recent_ids:
        state.duplicates += 1
        return Outcome.DUPLICATE
    if key is not None:
        _remember(state.recent_ids, key, config.dedupe_window)
    micros = (
        None if event.header.created_at is None else micros_of(event.header.created_at)
    )
    if micros is not None and (
        state.watermark_us is None or micros > state.watermark_us
    ):
        state.watermark_us = micros
        _prune_windows(state, config)
    if not _apply(state, event, micros, config):
        state.duplicates += 1
        return Outcome.DUPLICATE
    state.events_applied += 1
    return Outcome.APPLIED


def fold_journal(
    events: Iterable[ev.EnduringEvent], config: FoldConfig
) -> dict[str, LoopStats]:
    """Fold a whole journal, in order, into fresh per-loop states.

    The reference result for a journal read start to end: the events are
    given the positions ``(0, 0)``, ``(0, 1)``, ... of one partition.

    Returns:
        Loop id -> its state.
    """
    states: dict[str, LoopStats] = {}
    for offset, event in enumerate(events):
        key = str(event.header.loop_id)
        state = states.get(key)
        if state is None:
            state = states[key] = LoopStats.new(key, config)
        fold(state, event, config, Position(0, offset))
    return states


def _already_applied(mark: Position | None, position: Position) -> bool:
    return (
        mark is not None
        and mark.partition == position.partition
        and position.offset <= mark.offset
    )


def _remember(ring: dict[str, None], key: str, bound: int) -> None:
    ring[key] = None
    while len(ring) > bound:
        del ring[next(iter(ring))]


def _apply(  # noqa: PLR0911 - one return per event type
    state: LoopStats, event: ev.EnduringEvent, micros: int | None, config: FoldConfig
) -> bool:
    """Apply ``event``'s meaning; ``False`` if it repeats an already-counted turn."""
    match event:
        case ev.LoopStarted():
            state.model = event.model or UNKNOWN_MODEL
            return True
        case ev.TurnStarted():
            return _on_turn_started(state, _turn_key(event), micros, config)
        case ev.StepDone():
            return _on_step_done(state, event, config)
        case ev.TurnDone():
            return _on_terminal(state, event, TerminalKind.DONE, micros, config)
        case ev.TurnFailed():
            return _on_terminal(state, event, TerminalKind.FAILED, micros, config)
        case ev.TurnInterrupted():
            return _on_terminal(state, event, TerminalKind.INTERRUPTED, micros, config)
        case (
            ev.LoopIdle()
            | ev.LoopStopped()
            | ev.LoopDeleted()
            | ev.TurnRejected()
            | ev.TurnFoldedInto()
            | ev.InputCancelled()
            | ev.PermissionDecided()
            | ev.PermissionRequested()
            | ev.GateOpened()
            | ev.GateResolved()
            | ev.TurnResumed()
        ):
            return True
        case _:
            assert_never(event)


def _turn_key(event: ev.EnduringEvent) -> str | None:
    turn_id = event.header.turn_id
    return None if turn_id is None else turn_id.hex


def _on_turn_started(
    state: LoopStats, turn: str | None, micros: int | None, config: FoldConfig
) -> bool:
    if turn is None:
        return True
    if turn in state.closed_turns or turn in state.open_turns:
        return False
    _open(state, turn, config).started_us = micros
    for aggregates in _targets(state, micros, config):
        aggregates.turns_started += 1
    return True


def _on_step_done(state: LoopStats, event: ev.StepDone, config: FoldConfig) -> bool:
    turn = _turn_key(event)
    if turn is None:
        return True
    if turn in state.closed_turns:
        return False
    open_turn = state.open_turns.get(turn) or _open(state, turn, config)
    open_turn.steps += 1
    open_turn.tool_calls += sum(
        1 for m in event.messages[1:] if isinstance(m, ToolResultMessage)
    )
    step_usage = event.ai_message.usage
    if step_usage is not None:
        open_turn.usage = add_usage(open_turn.usage, step_usage)
    return True


def _on_terminal(
    state: LoopStats,
    event: ev.TurnDone | ev.TurnFailed | ev.TurnInterrupted,
    kind: TerminalKind,
    micros: int | None,
    config: FoldConfig,
) -> bool:
    turn = _turn_key(event)
    if turn is None:
        return True
    if turn in state.closed_turns:
        return False
    open_turn = state.open_turns.pop(turn, None) or OpenTurn()
    _remember(state.closed_turns, turn, config.closed_turns)
    latency_ms = None
    if open_turn.started_us is not None and micros is not None:
        latency_ms = (micros - open_turn.started_us) / _US_PER_MS
    usage = event.usage if isinstance(event, ev.TurnDone) else open_turn.usage
    failure_kind = event.error.kind.value if isinstance(event, ev.TurnFailed) else None
    for aggregates in _targets(state, micros, config):
        aggregates.record_terminal(
            kind,
            failure_kind=failure_kind,
            latency_ms=latency_ms,
            steps=open_turn.steps,
            tool_calls=open_turn.tool_calls,
            usage=usage,
            model=state.model,
            loop_id=state.loop_id,
        )
    return True


def _open(state: LoopStats, turn: str, config: FoldConfig) -> OpenTurn:
    open_turn = OpenTurn()
    state.open_turns[turn] = open_turn
    while len(state.open_turns) > config.max_open_turns:
        del state.open_turns[next(iter(state.open_turns))]
        state.open_turns_dropped += 1
    return open_turn


def _targets(
    state: LoopStats, micros: int | None, config: FoldConfig
) -> list[Aggregates]:
    """The totals, plus the event's window when it is still retained."""
    targets = [state.totals]
    if micros is None:
        return targets
    start = window_start_ms(micros, config.window_size_ms)
    if start < _oldest_retained(state, config):
        state.late_events += 1
        return targets
    window = state.windows.get(start)
    if window is None:
        window = state.windows[start] = Aggregates.empty(config.sketch)
    targets.append(window)
    return targets


def _oldest_retained(state: LoopStats, config: FoldConfig) -> int:
    if state.watermark_us is None:
        return 0
    newest = window_start_ms(state.watermark_us, config.window_size_ms)
    return newest - (config.window_retention - 1) * config.window_size_ms


def _prune_windows(state: LoopStats, config: FoldConfig) -> None:
    oldest = _oldest_retained(state, config)
    for start in [s for s in state.windows if s < oldest]:
        del state.windows[start]
