"""One readable line per event: the renderer ``chat``, ``tail`` and ``demo`` share.

Owns :class:`EventRenderer`, a pure, stateful formatter: it takes events in the
order they are shown and returns the text to write. Every event but
:class:`~turnstream.events.TokenDelta` becomes one line::

    TurnStarted       loop=1a2b3c4d turn=5e6f7a8b #1 input="What is 12 + 30 + 8?"

Consecutive token deltas of one turn share one line: the first opens it with
the same prefix and a ``│``, the following ones append their text, and the next
other event closes it. Newlines inside streamed text are shown as ``⏎`` so a
line stays a line. Also owns :func:`style_of` (a rich style per event type, for
terminals) and :func:`short_id`.

Pure: no I/O, no clock, no rich; imports value types only.
"""

from __future__ import annotations

from typing import Final, assert_never
from uuid import UUID

from turnstream import events as ev
from turnstream.content import (
    AIMessage,
    ImageChunk,
    RefusalChunk,
    TextBlock,
    TextChunk,
    ThinkingChunk,
    ToolResultMessage,
    ToolUseChunk,
    UserMessage,
    text_of,
)

__all__ = [
    "DEFAULT_PREVIEW",
    "TYPE_WIDTH",
    "EventRenderer",
    "short_id",
    "style_of",
]

TYPE_WIDTH: Final = 19
"""Width of the type column (``PermissionRequested`` is the longest name)."""
DEFAULT_PREVIEW: Final = 60
"""Characters of a message preview before it is cut with ``…``."""
_DELTA_BAR: Final = "│ "
_NEWLINE: Final = "⏎"
_MAX_TURNS_REMEMBERED: Final = 1024


def short_id(value: UUID | None) -> str:
    """The first 8 hex digits of ``value``, or ``-``."""
    return "-" if value is None else value.hex[:8]


def _quote(text: str, limit: int) -> str:
    if len(text) > limit:
        text = text[: max(limit - 1, 0)] + "…"
    flat = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{flat}"'


def _user_text(message: UserMessage) -> str:
    return text_of(message.blocks)


def _ai_text(message: AIMessage) -> str:
    return "".join(b.text for b in message.blocks if isinstance(b, TextBlock))


_STYLES: Final[dict[str, str]] = {
    ev.TurnDone.__name__: "bold green",
    ev.TurnFailed.__name__: "bold red",
    ev.TurnRejected.__name__: "bold red",
    ev.TurnInterrupted.__name__: "bold yellow",
    ev.InputCancelled.__name__: "bold yellow",
    ev.TurnStarted.__name__: "bold cyan",
    ev.TurnFoldedInto.__name__: "bold cyan",
    ev.ToolCallStarted.__name__: "magenta",
    ev.ToolCallCompleted.__name__: "magenta",
    ev.TokenDelta.__name__: "",
}


def style_of(event: ev.AnyEvent) -> str:
    """A rich style for ``event``'s line (terminals stand out, the rest is dim)."""
    return _STYLES.get(event.type_name, "dim")


class EventRenderer:
    """Formats events as lines; remembers turn indexes and the open delta line.

    Args:
        deltas: show token deltas (off: they are skipped).
        preview: characters of message previews.
        full_answers: show a ``TurnDone`` answer whole (``chat``: over Kafka the
            last step's deltas may arrive after the terminal, so the answer
            line is the one place the whole answer is certain to appear).
    """

    def __init__(
        self,
        *,
        deltas: bool = True,
        preview: int = DEFAULT_PREVIEW,
        full_answers: bool = False,
    ) -> None:
        self._deltas = deltas
        self._preview = preview
        self._full_answers = full_answers
        self._open_turn: UUID | None = None  # the turn whose delta line is open
        self._indexes: dict[UUID, int] = {}

    @property
    def line_open(self) -> bool:
        """Whether a delta line is open (the next write continues it)."""
        return self._open_turn is not None

    def feed(self, event: ev.AnyEvent) -> str:
        """The text to write for ``event`` (may continue an open delta line)."""
        self._remember(event)
        if isinstance(event, ev.TokenDelta):
            return self._delta(event) if self._deltas else ""
        return self.close() + self.line(event) + "\n"

    def close(self) -> str:
        """End an open delta line: a newline if one is open, else nothing."""
        if self._open_turn is None:
            return ""
        self._open_turn = None
        return "\n"

    def line(self, event: ev.AnyEvent) -> str:
        """``event`` as one line without a newline (deltas: their opening)."""
        self._remember(event)
        head = self._prefix(event)
        body = self._body(event)
        return f"{head} {body}".rstrip() if body else head.rstrip()

    # -- internals --------------------------------------------------------

    def _remember(self, event: ev.AnyEvent) -> None:
        turn_id = event.header.turn_id
        index = getattr(event, "turn_index", 0)
        if turn_id is not None and isinstance(index, int) and index > 0:
            self._indexes[turn_id] = index
            while len(self._indexes) > _MAX_TURNS_REMEMBERED:
                del self._indexes[next(iter(self._indexes))]

    def _prefix(self, event: ev.AnyEvent) -> str:
        header = event.header
        parts = [f"{event.type_name:<{TYPE_WIDTH}}", f"loop={short_id(header.loop_id)}"]
        if header.turn_id is not None:
            parts.append(f"turn={short_id(header.turn_id)}")
            index = self._indexes.get(header.turn_id)
            if index is not None:
                parts.append(f"#{index}")
        return " ".join(parts)

    def _delta(self, event: ev.TokenDelta) -> str:
        text = self._chunk_text(event).replace("\n", _NEWLINE)
        if self._open_turn == event.header.turn_id:
            return text
        opening = self.close() + self._prefix(event) + " " + _DELTA_BAR
        self._open_turn = event.header.turn_id
        return opening + text

    @staticmethod
    def _chunk_text(event: ev.TokenDelta) -> str:
        chunk = event.chunk
        match chunk:
            case TextChunk() | RefusalChunk():
                return chunk.text
            case ThinkingChunk():
                return chunk.thinking
            case ToolUseChunk():
                opening = f" → {chunk.name}" if chunk.name else ""
                return opening + chunk.input_json
            case ImageChunk():
                return "[image]"
            case _:
                assert_never(chunk)

    def _body(self, event: ev.AnyEvent) -> str:  # noqa: PLR0911, PLR0912 - one case per type
        quote = self._quote
        match event:
            case ev.LoopStarted():
                name = event.header.agent_name
                agent = f"agent={quote(name)} " if name else ""
                return f"{agent}model={event.model or '-'}"
            case ev.LoopIdle() | ev.LoopStopped():
                return ""
            case ev.LoopDeleted():
                return f"command={short_id(event.reply_to())}"
            case ev.InputQueued():
                return f"command={short_id(event.reply_to())}"
            case ev.TurnRejected():
                detail = f" detail={quote(event.detail)}" if event.detail else ""
                return f"reason={event.reason.value}{detail}"
            case ev.TurnStarted():
                model = f" model={event.model}" if event.model else ""
                return f"input={quote(_user_text(event.message))}{model}"
            case ev.TurnFoldedInto():
                return f"input={quote(_user_text(event.message))}"
            case ev.InputCancelled():
                return (
                    f"reason={event.reason.value} command={short_id(event.reply_to())}"
                )
            case ev.TokenDelta():
                return _DELTA_BAR.rstrip()
            case ev.StepDone():
                return self._step(event)
            case ev.TurnDone():
                usage = event.usage
                text = _ai_text(event.message)
                limit = len(text) if self._full_answers else self._preview
                return (
                    f"answer={_quote(text, limit)} "
                    f"tokens={usage.context_tokens()}in/{usage.output_tokens}out"
                )
            case ev.TurnFailed():
                return (
                    f"kind={event.error.kind.value} error={quote(event.error.message)}"
                )
            case ev.TurnInterrupted():
                return ""
            case ev.TurnResumed():
                return (
                    f"steps={event.steps} resumes={event.resumes} "
                    f"reason={quote(event.reason)}"
                )
            case ev.ToolCallStarted():
                shown = event.summary and event.summary != event.tool_name
                summary = f" summary={quote(event.summary)}" if shown else ""
                return f"tool={event.tool_name} id={event.tool_use_id}{summary}"
            case ev.ToolCallCompleted():
                status = "error" if event.is_error else "ok"
                return (
                    f"id={event.tool_use_id} {status} "
                    f"result={quote(event.result_preview)}"
                )
            case ev.PermissionDecided():
                return (
                    f"effect={event.effect} subject={quote(event.subject)} "
                    f"reason={quote(event.reason)}"
                )
            case ev.PermissionRequested():
                # The full id: `turnstream respond GATE --loop LOOP` answers it.
                return f"gate={event.gate_id} tool={event.tool_name}"
            case ev.GateOpened():
                actions = ",".join(event.actions) or "-"
                return (
                    f"gate={short_id(event.gate_id)} kind={event.kind} "
                    f"actions={actions}"
                )
            case ev.GateResolved():
                action = f" action={event.action}" if event.action else ""
                return f"gate={short_id(event.gate_id)} {event.reason.value}{action}"
            case _:
                assert_never(event)

    def _quote(self, text: str) -> str:
        return _quote(text, self._preview)

    def _step(self, event: ev.StepDone) -> str:
        ai = event.ai_message
        calls = ",".join(use.name for use in ai.tool_uses()) or "-"
        results = [m for m in event.messages if isinstance(m, ToolResultMessage)]
        errors = sum(1 for m in results if m.is_error)
        parts = [f"step={short_id(event.header.step_id)}", f"calls={calls}"]
        if results:
            parts.append(f"results={len(results)}")
        if errors:
            parts.append(f"errors={errors}")
        return " ".join(parts)
