"""Display order for a live feed that merges two topics.

Owns :class:`LiveOrder`. Over Kafka, live events come from two topics with no
order between them: the journal (``read_committed``) and the lossy deltas topic.
A turn's first token delta can therefore arrive before its ``TurnStarted``, and
a step's last deltas after its ``StepDone`` (or the turn's terminal).
``LiveOrder`` restores the order a person expects, per turn:

* an ephemeral event of a turn not started yet is held until that turn's
  ``TurnStarted`` (then released right after it), or until ``grace`` seconds
  pass (a turn that started before the watcher joined);
* with ``settle`` > 0, a ``StepDone`` or terminal waits that long; a live event
  of the same step (or turn) arriving meanwhile is shown before it, any other
  live event after it; journal events keep their order;
* an ephemeral event of a turn that already ended is dropped;
* everything else passes through at once.

Pure: the caller passes the time in; no I/O. Imports value types only.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Final
from uuid import UUID

from turnstream.events import AnyEvent, StepDone, TurnFoldedInto, TurnStarted

__all__ = ["DEFAULT_GRACE", "DEFAULT_SETTLE", "LiveOrder"]

DEFAULT_GRACE: Final = 0.5
"""Seconds an early delta waits for its turn's ``TurnStarted``."""
DEFAULT_SETTLE: Final = 0.25
"""Seconds a ``StepDone`` or terminal waits for its step's late deltas (commands)."""
_REMEMBERED: Final = 1024


@dataclass(slots=True)
class _Held:
    since: float
    events: list[AnyEvent]


@dataclass(slots=True)
class _Pending:
    due: float
    event: AnyEvent


def _settles(event: AnyEvent) -> bool:
    """Journal events that deltas of their own step or turn may still overtake."""
    return isinstance(event, StepDone) or event.ends_turn()


@dataclass(eq=False, repr=False, kw_only=True)
class LiveOrder:
    """Reorders a merged live feed per turn (see the module docstring).

    Args:
        grace: seconds an ephemeral event of an unknown turn is held.
        settle: seconds a ``StepDone`` or terminal waits for late live events of
            its own step or turn (0: shown at once).
        max_held: events held at most (the oldest turn's are released first).
    """

    grace: float = DEFAULT_GRACE
    settle: float = 0.0
    max_held: int = 4096
    _held: OrderedDict[UUID, _Held] = field(init=False, default_factory=OrderedDict)
    _pending: deque[_Pending] = field(init=False, default_factory=deque)
    _started: OrderedDict[UUID, None] = field(init=False, default_factory=OrderedDict)
    _ended: OrderedDict[UUID, None] = field(init=False, default_factory=OrderedDict)
    dropped: int = field(init=False, default=0)

    @property
    def held(self) -> int:
        """Events currently held back (early deltas and settling events)."""
        return sum(len(h.events) for h in self._held.values()) + len(self._pending)

    def next_due(self, now: float) -> float | None:
        """Seconds until a held event is due for release, if any is held."""
        dues = [self._pending[0].due] if self._pending else []
        dues.extend(h.since + self.grace for h in self._held.values())
        return max(min(dues) - now, 0.0) if dues else None

    def accept(self, event: AnyEvent, now: float) -> list[AnyEvent]:
        """Take one event; return the events to show now, in order."""
        shown = self.expire(now)
        if event.is_enduring():
            if _settles(event) and self.settle > 0:
                self._pending.append(_Pending(now + self.settle, event))
            elif self._pending:  # keep the journal's order behind a settling event
                self._pending.append(_Pending(self._pending[-1].due, event))
            else:
                shown.extend(self._emit(event, now))
            return shown
        if not self._pending:
            return shown + self._emit(event, now)
        cut = self._first_following(event)
        if cut is None:  # it belongs after everything pending: travel with it
            self._pending.append(_Pending(self._pending[-1].due, event))
            return shown
        for _ in range(cut):
            shown.extend(self._emit(self._pending.popleft().event, now))
        return shown + self._emit(event, now)

    def expire(self, now: float) -> list[AnyEvent]:
        """Release settled journal events and early deltas whose wait is over."""
        released: list[AnyEvent] = []
        while self._pending and self._pending[0].due <= now:
            released.extend(self._emit(self._pending.popleft().event, now))
        for turn_id in list(self._held):
            held = self._held[turn_id]
            if now - held.since < self.grace:
                continue
            del self._held[turn_id]
            _remember(self._started, turn_id)  # it started before we joined
            released.extend(held.events)
        return released

    def drain(self) -> list[AnyEvent]:
        """Release everything still held (at the end of a feed)."""
        released: list[AnyEvent] = []
        while self._pending:
            released.extend(self._emit(self._pending.popleft().event, float("inf")))
        released.extend(e for held in self._held.values() for e in held.events)
        self._held.clear()
        return released

    def _first_following(self, event: AnyEvent) -> int | None:
        """Index of the first pending event that ``event`` must be shown before."""
        turn_id, step_id = event.header.turn_id, event.header.step_id
        if turn_id is None:
            return None
        for index, pending in enumerate(self._pending):
            header = pending.event.header
            if header.turn_id != turn_id:
                continue
            if pending.event.ends_turn() or (
                isinstance(pending.event, StepDone) and header.step_id == step_id
            ):
                return index
        return None

    def _emit(self, event: AnyEvent, now: float) -> list[AnyEvent]:
        """Per-turn order: deltas after their TurnStarted, never after the end."""
        turn_id = event.header.turn_id
        if turn_id is None:
            return [event]
        if not event.is_enduring():
            if turn_id in self._ended:
                self.dropped += 1
                return []
            if turn_id in self._started:
                return [event]
            self._hold(turn_id, event, now)
            return self._overflow()
        if isinstance(event, TurnStarted | TurnFoldedInto):
            _remember(self._started, turn_id)
            held = self._held.pop(turn_id, None)
            return [event, *(held.events if held else ())]
        if event.ends_turn():
            self._started.pop(turn_id, None)
            _remember(self._ended, turn_id)
            held = self._held.pop(turn_id, None)
            if held is not None:
                self.dropped += len(held.events)
        return [event]

    def _hold(self, turn_id: UUID, event: AnyEvent, now: float) -> None:
        held = self._held.get(turn_id)
        if held is None:
            self._held[turn_id] = _Held(since=now, events=[event])
        else:
            held.events.append(event)

    def _overflow(self) -> list[AnyEvent]:
        released: list[AnyEvent] = []
        while self._held and self.held > self.max_held:
            turn_id, held = self._held.popitem(last=False)
            _remember(self._started, turn_id)
            released.extend(held.events)
        return released


def _remember(table: OrderedDict[UUID, None], turn_id: UUID) -> None:
    table[turn_id] = None
    table.move_to_end(turn_id)
    while len(table) > _REMEMBERED:
        table.popitem(last=False)
