"""The demo's three turns, and the check that their lifecycle happened.

Owns :class:`DemoScript` (what is sent), :class:`LifecycleCheck` (pure: folds
the events shown, in order, into what each turn did and lists every unmet
expectation) and :func:`run_script`, which drives any session (the Kafka
client in ``turnstream demo``, the embedded one in tests) through:

1. a multi-step, tool-using turn (``What is 12 + 30 + 8?``);
2. a second input submitted while the first turn runs (``no_fold``): it must be
   queued (``InputQueued``) and chain -- its ``TurnStarted`` right after the
   first ``TurnDone``, with no ``LoopIdle`` between;
3. a long answer interrupted after a few token deltas (``TurnInterrupted``).

Writes nothing itself: events and notes go to an :class:`Output`. Imports value
types, the runtime's subscription types and the CLI's ordering; no aiokafka.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol
from uuid import UUID

from turnstream.cli.ordering import DEFAULT_SETTLE, LiveOrder
from turnstream.cli.watch import loop_filter, next_events
from turnstream.events import (
    Agency,
    AnyEvent,
    InputQueued,
    LoopIdle,
    StepDone,
    TokenDelta,
    ToolCallCompleted,
    ToolCallStarted,
    TurnDone,
    TurnStarted,
)
from turnstream.ids import CommandId, LoopId, TurnId
from turnstream.runtime.subscription import EventFilter, Subscription

__all__ = [
    "DemoScript",
    "LifecycleCheck",
    "Output",
    "ScriptSession",
    "ScriptTimeoutError",
    "TurnRecord",
    "run_script",
]

_LONG_DEMO_INPUT: Final = (
    "Count the words of this deliberately long sentence, which streams slowly "
    "enough that the demo can interrupt the turn after its first few tokens and "
    "long before the model could ever finish its answer."
)
_LONG_PROVIDER_INPUT: Final = (
    "Write a long, detailed story of at least ten paragraphs about a stream "
    "processor that learns to talk. Do not use any tools."
)


class ScriptSession(Protocol):
    """What the script needs of a session (Kafka client or embedded)."""

    def subscribe_events(
        self, event_filter: EventFilter, *, capacity: int | None = None
    ) -> Subscription:
        """Watch later events."""
        ...

    async def submit_to_loop(
        self,
        loop_id: LoopId,
        content: str,
        *,
        no_fold: bool = False,
        agency: Agency = Agency.USER,
    ) -> CommandId:
        """Send input to a loop."""
        ...

    async def interrupt(
        self, loop_id: LoopId | None = None, *, turn_id: TurnId | None = None
    ) -> bool:
        """Interrupt the loop's running turn (or only turn ``turn_id``)."""
        ...


class Output(Protocol):
    """Where the script's events and notes go."""

    def show(self, event: AnyEvent) -> None:
        """One event, as it arrives."""
        ...

    def note(self, text: str, style: str = "dim") -> None:
        """A line of commentary."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoScript:
    """What the demo sends, and what it insists on.

    Attributes:
        first: the tool-using question.
        queued: the input submitted while the first turn runs.
        interrupted: the input whose long answer is interrupted.
        interrupt_after: token deltas of the third turn before interrupting.
        require_tools: the first turn must call tools (true for the demo model;
            a real model may answer without them).
    """

    first: str = "What is 12 + 30 + 8?"
    queued: str = "How many words are in this sentence?"
    interrupted: str = _LONG_DEMO_INPUT
    interrupt_after: int = 3
    require_tools: bool = True

    @classmethod
    def for_provider(cls, provider: str) -> DemoScript:
        """The demo model's script, or the one for a real provider."""
        if provider == "demo":
            return cls()
        return cls(interrupted=_LONG_PROVIDER_INPUT, require_tools=False)


@dataclass(slots=True)
class TurnRecord:
    """What one followed turn did, as seen in the feed."""

    command_id: UUID
    turn_id: UUID | None = None
    turn_index: int = 0
    queued: bool = False
    deltas: int = 0
    tools_started: int = 0
    tools_completed: int = 0
    tool_names: list[str] = field(default_factory=list)
    steps: int = 0
    terminal: str = ""
    started_at: float = 0.0
    ended_at: float = 0.0

    @property
    def ended(self) -> bool:
        """Whether a terminal was seen."""
        return bool(self.terminal)


class LifecycleCheck:
    """Folds the shown events into per-turn records and order facts (pure)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.turns: list[TurnRecord] = []
        self._by_turn: dict[UUID, TurnRecord] = {}
        self._by_command: dict[UUID, TurnRecord] = {}
        self._last: list[str] = []  # enduring event types of the loop, in order
        self.events = 0

    def expect(self, command_id: UUID) -> TurnRecord:
        """Follow the turn that ``command_id`` starts."""
        record = TurnRecord(command_id=command_id)
        self.turns.append(record)
        self._by_command[command_id] = record
        return record

    def see(self, event: AnyEvent) -> None:
        """Take one event, in the order it is shown."""
        self.events += 1
        if event.is_enduring():
            self._last.append(event.type_name)
        reply = event.reply_to()
        by_command = self._by_command.get(reply) if reply is not None else None
        if by_command is not None:
            self._answer(by_command, event)
        turn_id = event.header.turn_id
        record = self._by_turn.get(turn_id) if turn_id is not None else None
        if record is None:
            return
        match event:
            case TokenDelta():
                record.deltas += 1
            case ToolCallStarted():
                record.tools_started += 1
                record.tool_names.append(event.tool_name)
            case ToolCallCompleted():
                record.tools_completed += 1
            case StepDone():
                record.steps += 1
            case _ if event.ends_turn():
                record.terminal = event.type_name
                record.ended_at = self._clock()
            case _:
                pass

    def _answer(self, record: TurnRecord, event: AnyEvent) -> None:
        match event:
            case InputQueued():
                record.queued = True
            case TurnStarted():
                record.turn_id = event.header.turn_id
                record.turn_index = event.turn_index
                record.started_at = self._clock()
                if event.header.turn_id is not None:
                    self._by_turn[event.header.turn_id] = record
            case _ if event.is_enduring() and not record.turn_id:
                # Rejected or cancelled before it started: that is its end.
                record.terminal = event.type_name

    def chained(self, before: TurnRecord, after: TurnRecord) -> bool:
        """``after`` started right after ``before``'s TurnDone, no LoopIdle between."""
        try:
            done = self._last.index(TurnDone.__name__)
        except ValueError:
            return False
        rest = self._last[done + 1 :]
        started = TurnStarted.__name__
        return (
            before.terminal == TurnDone.__name__
            and started in rest
            and LoopIdle.__name__ not in rest[: rest.index(started)]
            and after.turn_index == before.turn_index + 1
        )

    def problems(self, script: DemoScript) -> list[str]:
        """Every expectation of the script that the events did not meet."""
        found: list[str] = []
        if len(self.turns) < 3:
            return [f"only {len(self.turns)} of 3 inputs were submitted"]
        first, second, third = self.turns[:3]
        if first.terminal != TurnDone.__name__:
            found.append(
                f"turn 1 ended with {first.terminal or 'nothing'}, not TurnDone"
            )
        if not first.deltas:
            found.append("turn 1 streamed no TokenDelta")
        if script.require_tools and not (first.tools_started and first.tools_completed):
            found.append("turn 1 made no tool call (ToolCallStarted/Completed)")
        if script.require_tools and first.steps < 2:
            found.append(f"turn 1 committed {first.steps} StepDone, expected 2 or more")
        if not second.queued:
            found.append("input 2 was not queued (no InputQueued while turn 1 ran)")
        if not self.chained(first, second):
            found.append(
                "turn 2 did not chain (TurnStarted right after turn 1's TurnDone, "
                "no LoopIdle between)"
            )
        if second.terminal != TurnDone.__name__:
            found.append(
                f"turn 2 ended with {second.terminal or 'nothing'}, not TurnDone"
            )
        if third.terminal != "TurnInterrupted":
            found.append(
                f"turn 3 ended with {third.terminal or 'nothing'}, not TurnInterrupted"
            )
        return found

    def summary(self) -> list[str]:
        """One line per turn, for the demo's closing report."""
        lines: list[str] = []
        for number, turn in enumerate(self.turns, start=1):
            tools = ",".join(dict.fromkeys(turn.tool_names)) or "none"
            took = max(turn.ended_at - turn.started_at, 0.0) if turn.ended else 0.0
            lines.append(
                f"turn {number} (#{turn.turn_index}): {turn.terminal or 'no end'}"
                f"{' after InputQueued' if turn.queued else ''}; "
                f"{_count(turn.steps, 'step')}, "
                f"{_count(turn.tools_started, 'tool call')} ({tools}), "
                f"{_count(turn.deltas, 'token delta')}, {took:.1f} s"
            )
        return lines


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


class ScriptTimeoutError(Exception):
    """The feed did not show what the script waited for in time."""

    def __init__(self, waiting_for: str, seconds: float) -> None:
        self.waiting_for = waiting_for
        super().__init__(f"timed out after {seconds:g} s waiting for {waiting_for}")


@dataclass(eq=False, repr=False)
class _Driver:
    session: ScriptSession
    loop_id: LoopId
    out: Output
    check: LifecycleCheck
    timeout: float
    deadline: float = field(init=False)
    order: LiveOrder = field(init=False)
    subscription: Subscription = field(init=False)

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.timeout
        self.order = LiveOrder(settle=DEFAULT_SETTLE)
        self.subscription = self.session.subscribe_events(loop_filter(self.loop_id))

    async def submit(self, text: str, *, no_fold: bool = False) -> TurnRecord:
        command_id = await self.session.submit_to_loop(
            self.loop_id, text, no_fold=no_fold
        )
        return self.check.expect(command_id)

    async def until(self, what: str, done: Callable[[], bool]) -> None:
        while not done():
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise ScriptTimeoutError(what, self.timeout)
            for event in await next_events(self.subscription, self.order):
                self.check.see(event)
                self.out.show(event)


async def run_script(
    session: ScriptSession,
    loop_id: LoopId,
    script: DemoScript,
    out: Output,
    *,
    within: float = 120.0,
) -> LifecycleCheck:
    """Drive the three turns and return what was seen.

    Every wait is bounded by ``within`` seconds in total; a timeout ends the
    script early, and the returned check lists what is missing.
    """
    check = LifecycleCheck()
    driver = _Driver(session, loop_id, out, check, within)
    try:
        out.note(f"→ input 1 (a tool-using turn): {script.first!r}", "bold")
        first = await driver.submit(script.first)
        await driver.until("turn 1 to start", lambda: first.turn_id is not None)
        out.note(f"→ input 2, sent while turn 1 runs: {script.queued!r}", "bold")
        second = await driver.submit(script.queued, no_fold=True)
        await driver.until("turn 2 to end", lambda: second.ended)
        out.note("→ input 3, a long answer to interrupt", "bold")
        third = await driver.submit(script.interrupted)
        await driver.until(
            f"{script.interrupt_after} token deltas of turn 3",
            lambda: third.deltas >= script.interrupt_after or third.ended,
        )
        if not third.ended:
            out.note(f"→ interrupting turn 3 after {third.deltas} token deltas", "bold")
            await session.interrupt(loop_id)
        await driver.until("turn 3 to end", lambda: third.ended)
    except ScriptTimeoutError as exc:
        out.note(f"! {exc}", "bold red")
    finally:
        driver.subscription.close()
    return check
