"""One step's model call: request, stream, deltas, fold (contract §4.4, §4.5).

Owns :func:`stream_step`: open the Inference hook, call the model under the
step timeout, publish one ``TokenDelta`` per chunk *before* folding it, and
turn the stream into a :class:`StepResult` or a :class:`StepFailed` (with the
safe prefix of a truncated stream). On cancellation it records the interrupted
safe prefix in the :class:`~turnstream.runtime.handshake.TurnDraft` and
re-raises.

Deliberate divergence from harness: every ``TokenDelta`` carries its step's
``step_id`` (harness leaves it zero), so a consumer can group deltas by step;
like every ephemeral event it carries no ``event_id`` or ``created_at``.
Imports ports, hooks and value types; never an adapter.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass, replace

from turnstream.content import AIMessage, Conversation, Usage
from turnstream.errors import (
    EmptyResponseError,
    HookDeniedError,
    ProviderError,
    TurnError,
)
from turnstream.events import TokenDelta
from turnstream.ids import StepId
from turnstream.runtime.accumulate import (
    INTERRUPTED_NOTICE,
    TRUNCATED_NOTICE,
    ChunkAccumulator,
    ToolCall,
    is_empty_response,
)
from turnstream.runtime.handshake import (
    PendingStep,
    TurnDraft,
    TurnLink,
    TurnSpec,
    step_call,
)
from turnstream.runtime.hooks import Operation, Outcome
from turnstream.runtime.model_client import ModelEvent, ModelRequest, StreamEnd
from turnstream.runtime.user_code import log_user_error

__all__ = ["StepFailed", "StepResult", "build_request", "stream_step"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StepResult:
    """A complete response: the stored AIMessage and the calls to run."""

    message: AIMessage
    calls: tuple[ToolCall, ...]
    usage: Usage | None


@dataclass(frozen=True, slots=True)
class StepFailed:
    """A step that ends the turn ``TurnFailed``; ``truncated`` is its safe prefix."""

    error: TurnError
    truncated: PendingStep | None = None


def build_request(spec: TurnSpec, messages: Sequence[Conversation]) -> ModelRequest:
    """The request of one step (the system prompt is never part of history)."""
    return ModelRequest(
        model=spec.config.model,
        system=spec.config.system_prompt,
        messages=tuple(messages),
        tools=spec.config.tool_specs(),
        max_tokens=spec.config.max_tokens,
    )


async def stream_step(
    spec: TurnSpec,
    link: TurnLink,
    draft: TurnDraft,
    *,
    step_id: StepId,
    step_index: int,
    messages: Sequence[Conversation],
) -> StepResult | StepFailed:
    """Run one model call and fold its stream.

    Raises:
        asyncio.CancelledError: the turn was cancelled (after recording the
            interrupted safe prefix in ``draft``).
    """
    request = build_request(spec, messages)
    call = step_call(spec, Operation.INFERENCE, step_id, step_index)
    hook = await spec.hooks.start(replace(call, request=request))
    if hook.blocked is not None:
        # The provider is never opened (contract §5.4).
        denied = hook.blocked.denied
        denial = HookDeniedError(Operation.INFERENCE.value, denied=denied)
        hook.finish(Outcome.DENIED if denied else Outcome.FAILED, denial)
        return StepFailed(denial)
    acc = ChunkAccumulator()
    structured = spec.config.output_schema is not None
    try:
        end = await _consume(spec, link, request, acc, step_id)
    except asyncio.CancelledError:
        hook.finish(Outcome.CANCELED)
        # Structured-output turns never commit a truncated step (contract §4.5).
        prefix = None if structured else acc.safe_prefix(INTERRUPTED_NOTICE)
        if prefix is not None:
            draft.interrupted_prefix = PendingStep(step_id, prefix)
        raise
    except TurnError as error:
        hook.finish(Outcome.FAILED, error)
        prefix = None if structured else acc.safe_prefix(TRUNCATED_NOTICE)
        pending = None if prefix is None else PendingStep(step_id, prefix)
        return StepFailed(error, pending)
    message = acc.message(end.usage)
    hook.finish(Outcome.COMPLETED, usage=end.usage)
    if is_empty_response(message):
        return StepFailed(EmptyResponseError())
    return StepResult(message=message, calls=acc.tool_calls(), usage=end.usage)


async def _consume(
    spec: TurnSpec,
    link: TurnLink,
    request: ModelRequest,
    acc: ChunkAccumulator,
    step_id: StepId,
) -> StreamEnd:
    """Iterate the model stream; every failure becomes a :class:`TurnError`."""
    provider = spec.model.name
    stream: AsyncIterator[ModelEvent] | None = None
    # Every delta of the step carries the same header (frozen, so shared).
    header = spec.factory.header(turn_id=spec.turn_id, step_id=step_id)
    try:
        async with asyncio.timeout(spec.config.step_timeout):
            stream = spec.model.stream(request)
            async for item in stream:
                if isinstance(item, StreamEnd):
                    return item
                # The delta goes out before the chunk is folded (contract §4.4).
                await link.publish(
                    TokenDelta(header=header, turn_index=spec.turn_index, chunk=item)
                )
                acc.add(item)
    except TimeoutError:
        raise ProviderError(provider, "step timed out") from None
    except TurnError:
        raise
    except Exception as exc:  # a client bug is a provider failure
        log_user_error(_log, "model client raised", exc, provider=provider)
        raise ProviderError(provider, f"unexpected {type(exc).__name__}") from exc
    finally:
        if isinstance(stream, AsyncGenerator):
            await _close(stream, provider)
    raise ProviderError(provider, "stream ended without StreamEnd")


async def _close(stream: AsyncGenerator[ModelEvent, None], provider: str) -> None:
    """Close the client's generator; a failing close never masks the outcome."""
    try:
        await stream.aclose()
    except Exception:  # noqa: BLE001 - the step's outcome is already decided
        _log.warning("model stream close failed", extra={"provider": provider})
