"""The turnstream error tree. Pure: stdlib only, imports nothing from turnstream.

::

    TurnstreamError
    ├── ConfigError                      fatal at start-up
    ├── ContractError                    the wire/event contract was broken
    │   ├── InvalidEventError            an event breaks its profile or body rule
    │   ├── DecodeError                  bytes that are not a valid record
    │   │   └── PayloadTooLargeError     refused before decoding
    │   ├── UnknownEventTypeError
    │   ├── UnsupportedSchemaError       a fingerprint this build cannot read
    │   └── EphemeralNotPersistableError ephemeral event given to the journal codec
    ├── TurnError                        ends a turn with TurnFailed (kind on wire)
    │   ├── EmptyResponseError
    │   ├── ToolLimitError
    │   ├── ResumeLimitError
    │   ├── StructuredOutputError
    │   ├── HookDeniedError
    │   ├── ProviderError
    │   ├── TurnPanicError
    │   ├── UsageOverflowError
    │   └── RestoredError                a TurnFailed error read back from the journal
    ├── SessionError                     a Session API call could not be carried out
    │   └── UnknownCommandError          follow() of a command whose loop is not known
    ├── InvalidCursorError               a stream cursor that is malformed or foreign
    ├── CommandTooLargeError             a command over the commands topic's limit
    ├── SubscriptionLossError            a subscriber fell behind on enduring events
    └── TransportError                   a broker/network failure (keeps ``retriable``)
        └── CommandNotConfirmedError     a command's send was not acknowledged in time

Every error has a stable ``kind`` (a ``ClassVar`` string) to branch on, and a
``retriable`` flag. Messages are built from typed fields and never contain
prompt text, tool arguments or secrets.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "CommandNotConfirmedError",
    "CommandTooLargeError",
    "ConfigError",
    "ContractError",
    "DecodeError",
    "EmptyResponseError",
    "EphemeralNotPersistableError",
    "HookDeniedError",
    "InvalidCursorError",
    "InvalidEventError",
    "PayloadTooLargeError",
    "ProviderError",
    "RestoredError",
    "ResumeLimitError",
    "SessionError",
    "StructuredOutputError",
    "SubscriptionLossError",
    "ToolLimitError",
    "TransportError",
    "TurnError",
    "TurnPanicError",
    "TurnstreamError",
    "UnknownCommandError",
    "UnknownEventTypeError",
    "UnsupportedSchemaError",
    "UsageOverflowError",
]


class TurnstreamError(Exception):
    """Base of every error turnstream raises on purpose."""

    kind: ClassVar[str] = "turnstream"
    retriable: ClassVar[bool] = False


class ConfigError(TurnstreamError):
    """Invalid configuration, detected once at start-up."""

    kind = "config"

    def __init__(self, setting: str, reason: str) -> None:
        self.setting = setting
        self.reason = reason
        super().__init__(f"invalid setting {setting}: {reason}")


# --------------------------------------------------------------------------
# Contract errors
# --------------------------------------------------------------------------


class ContractError(TurnstreamError):
    """The event or command contract was violated."""

    kind = "contract"


class InvalidEventError(ContractError):
    """An event breaks a validation rule.

    Attributes:
        event: the event type name.
        field: the offending field (``"event_id"``, ``"turn_id"``, ``"messages"``…).
        rule: one of ``"must be set"``, ``"must be zero"``, ``"is invalid"``,
            ``"is not a known event type"``.
    """

    kind = "invalid_event"

    def __init__(self, event: str, field: str, rule: str) -> None:
        self.event = event
        self.field = field
        self.rule = rule
        super().__init__(f"event {event}: {field} {rule}")


class DecodeError(ContractError):
    """Bytes could not be decoded into a valid value."""

    kind = "decode"

    def __init__(self, what: str, reason: str) -> None:
        self.what = what
        self.reason = reason
        super().__init__(f"cannot decode {what}: {reason}")


class PayloadTooLargeError(DecodeError):
    """A payload larger than the configured limit was refused."""

    kind = "payload_too_large"

    def __init__(self, what: str, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(what, f"{size} bytes exceeds the limit of {limit} bytes")


class UnknownEventTypeError(ContractError):
    """An event type this build does not know."""

    kind = "unknown_event_type"

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name
        super().__init__(f"unknown event type {type_name!r}")


class UnsupportedSchemaError(ContractError):
    """A schema fingerprint or version this build cannot read."""

    kind = "unsupported_schema"

    def __init__(self, what: str, detail: str) -> None:
        self.what = what
        self.detail = detail
        super().__init__(f"unsupported {what} schema: {detail}")


class EphemeralNotPersistableError(ContractError):
    """An ephemeral event was given to the durable (journal) codec."""

    kind = "ephemeral_not_persistable"

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name
        super().__init__(f"event {type_name} is ephemeral and not persistable")


# --------------------------------------------------------------------------
# Turn errors: each ends a turn with TurnFailed and projects to {kind, message}
# --------------------------------------------------------------------------


class TurnError(TurnstreamError):
    """An error that ends a turn with ``TurnFailed``."""

    kind = "unknown"


class EmptyResponseError(TurnError):
    """The provider returned a response with no usable content."""

    kind = "empty_response"

    def __init__(self) -> None:
        super().__init__("empty response from provider")


class ToolLimitError(TurnError):
    """A turn asked for more tool steps or tool calls than allowed."""

    kind = "tool_limit"

    def __init__(
        self, iterations: int, max_iterations: int, calls: int, max_calls: int
    ) -> None:
        self.iterations = iterations
        self.max_iterations = max_iterations
        self.calls = calls
        self.max_calls = max_calls
        super().__init__(
            f"tool limit reached: {iterations}/{max_iterations} iterations, "
            f"{calls}/{max_calls} calls"
        )


class ResumeLimitError(TurnError):
    """A turn was resumed after a crash as often as allowed and crashed again.

    The next owner fails it instead of resuming it once more (a crash loop).
    """

    kind = "resume_limit"

    def __init__(self, resumes: int, max_resumes: int) -> None:
        self.resumes = resumes
        self.max_resumes = max_resumes
        super().__init__(
            f"turn resumed {resumes} times (limit {max_resumes}); not resumed again"
        )


class StructuredOutputError(TurnError):
    """The final answer did not satisfy the requested structured output.

    ``reason`` is a short code (``"invalid_json"``, ``"schema_mismatch"``,
    ``"missing_output"``, ``"model_refusal"``), never the output itself.
    """

    kind = "structured_output"

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        suffix = f" ({detail})" if detail else ""
        super().__init__(f"structured output rejected: {reason}{suffix}")


class HookDeniedError(TurnError):
    """A hook guard denied (or failed while guarding) an operation.

    The guard's own text is never surfaced: it may hold policy details.
    """

    kind = "hook_denied"

    def __init__(self, operation: str, denied: bool) -> None:
        self.operation = operation
        self.denied = denied
        verdict = "denied by hook policy" if denied else "blocked by hook failure"
        super().__init__(f"operation {operation} {verdict}")


class ProviderError(TurnError):
    """The model provider failed (HTTP error, malformed or truncated stream)."""

    kind = "provider"

    def __init__(
        self,
        provider: str,
        reason: str,
        status: int | None = None,
        *,
        retriable: bool | None = None,
    ) -> None:
        self.provider = provider
        self.reason = reason
        self.status = status
        self._retriable = retriable
        where = f" (HTTP {status})" if status is not None else ""
        super().__init__(f"{provider} provider error{where}: {reason}")

    @property
    def is_retriable(self) -> bool:
        """Whether retrying the same request may succeed.

        An explicit ``retriable`` wins (connection errors, timeouts); otherwise
        HTTP 429 and 5xx are retriable.
        """
        if self._retriable is not None:
            return self._retriable
        return self.status is not None and (self.status == 429 or self.status >= 500)


class TurnPanicError(TurnError):
    """An unexpected exception escaped the turn; the actor survives it."""

    kind = "turn_panic"

    def __init__(self, exc_type: str) -> None:
        self.exc_type = exc_type
        super().__init__(f"unexpected {exc_type} in turn")


class UsageOverflowError(TurnError):
    """Adding two usages overflowed a token counter."""

    kind = "usage_overflow"

    def __init__(self, field: str, left: int, right: int) -> None:
        self.field = field
        self.left = left
        self.right = right
        super().__init__(f"usage overflow in {field}: {left} + {right}")


class RestoredError(TurnError):
    """A turn failure read back from the journal: its kind and message.

    ``kind`` here is an instance attribute holding the original error's kind,
    so consumers branch on it exactly as they would on the live error.
    """

    def __init__(self, kind: str, message: str) -> None:
        self.restored_kind = kind
        self.message = message
        super().__init__(f"{kind}: {message}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RestoredError):
            return NotImplemented
        return (self.restored_kind, self.message) == (
            other.restored_kind,
            other.message,
        )

    def __hash__(self) -> int:
        return hash((self.restored_kind, self.message))


# --------------------------------------------------------------------------
# Session, subscription and transport errors
# --------------------------------------------------------------------------


class SessionError(TurnstreamError):
    """A Session API call failed.

    ``reason`` is one of ``"loop_not_found"``, ``"loop_exited"``,
    ``"session_closing"``, ``"context_done"``, ``"not_connected"``,
    ``"gate_not_found"``, ``"gate_closed"``, ``"gate_action_invalid"``,
    ``"command_not_found"``.
    """

    kind = "session"

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        suffix = f": {detail}" if detail else ""
        super().__init__(f"session error {reason}{suffix}")


class UnknownCommandError(SessionError):
    """``follow(command_id)`` without a loop id, of a command sent elsewhere.

    A command id does not name its loop, and finding it would mean reading
    every loop's journal: pass the loop id (the client that submitted it has
    it), rather than wait on a loop that will never answer.

    Attributes:
        command_id: the command asked about.
    """

    kind = "unknown_command"

    def __init__(self, command_id: object) -> None:
        self.command_id = command_id
        super().__init__(
            "command_not_found",
            f"command {command_id} was not sent by this session: pass its loop_id",
        )


class InvalidCursorError(TurnstreamError):
    """A stream cursor that cannot be resumed from (attach, ``Last-Event-ID``).

    ``reason`` is ``"malformed"`` (not a cursor this version writes) or
    ``"other_loop"`` (it names another partition than the loop's).

    Attributes:
        reason: why it was refused.
    """

    kind = "invalid_cursor"

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"invalid stream cursor: {reason}")


class CommandTooLargeError(TurnstreamError):
    """A command is larger than the commands topic accepts: it was not sent.

    Checked by the client before sending (and mapped from the broker's refusal
    if a topic's limit is lower still). Sending it again cannot succeed: send
    less input.

    Attributes:
        command_id: the command's id.
        loop_id: the loop it was addressed to.
        size: the record's size in bytes (value, key, headers and overhead).
        limit: the largest record the commands topic takes, in bytes
            (``None``: the broker refused it, under a limit this client was
            not told).
    """

    kind = "command_too_large"

    def __init__(
        self, command_id: object, loop_id: object, *, size: int, limit: int | None
    ) -> None:
        self.command_id = command_id
        self.loop_id = loop_id
        self.size = size
        self.limit = limit
        bound = "" if limit is None else f" of {limit} bytes"
        super().__init__(
            f"command {command_id} is {size} bytes, over the commands topic's "
            f"limit{bound} (max.message.bytes); it was not sent -- send less input"
        )


class SubscriptionLossError(TurnstreamError):
    """A subscription was closed because it fell behind on enduring events."""

    kind = "subscription_loss"

    def __init__(self, dropped_class: str, buffer_size: int) -> None:
        self.dropped_class = dropped_class
        self.buffer_size = buffer_size
        super().__init__(
            f"subscription lost a {dropped_class} event "
            f"(buffer of {buffer_size} full); resync from the journal"
        )


class TransportError(TurnstreamError):
    """A broker or network failure; wraps the client library's error."""

    kind = "transport"

    def __init__(self, operation: str, reason: str, *, retriable: bool) -> None:
        self.operation = operation
        self.reason = reason
        self.is_retriable = retriable
        super().__init__(f"{operation} failed: {reason}")


class CommandNotConfirmedError(TransportError):
    """The broker did not acknowledge a command in time: its fate is unknown.

    The record may still be delivered (the producer keeps retrying it), so the
    command may yet take effect. ``command_id`` is the caller's handle: watch for
    its answer, or send the command again with the same id -- the loop applies a
    command id once.

    Attributes:
        command_id: the id the command was sent with (a ``UUID``).
        loop_id: the loop it was addressed to.
    """

    kind = "command_not_confirmed"

    def __init__(self, command_id: object, loop_id: object, reason: str) -> None:
        self.command_id = command_id
        self.loop_id = loop_id
        super().__init__(
            f"send command {command_id}",
            f"{reason}; it may still arrive -- retry with the same command id",
            retriable=True,
        )
