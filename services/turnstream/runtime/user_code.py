"""The user's code as the runtime sees it: interface checks and failure logs.

Owns :func:`log_user_error` (an unexpected exception out of a model client,
tool, hook or access policy: logged once, at ERROR, with its traceback),
:func:`frames_only` (that traceback without any exception message) and
:func:`missing_members` / :func:`check_model_client` / :func:`check_tool` (what
an object lacks of an interface, checked before anything runs).

Why no exception message: a user exception's message is free text built by
code that holds the conversation -- ``KeyError('<a tool argument>')``,
``ValueError(f"bad prompt: {prompt}")``. Logs never carry content, so the log
line gets the exception's qualified type and the traceback's frames (file,
line, function and source line: the code, which the operator owns), for the
whole ``__cause__`` / ``__context__`` chain, and never ``str(exc)`` or locals.
The message itself is not lost to the user: a tool's becomes its error result,
seen by the model as before. Stdlib and :mod:`turnstream.errors` only.
"""

from __future__ import annotations

import inspect
import logging
import traceback
from typing import Final

from turnstream.errors import ConfigError

__all__ = [
    "MODEL_CLIENT_MEMBERS",
    "TOOL_MEMBERS",
    "check_model_client",
    "check_tool",
    "frames_only",
    "log_user_error",
    "missing_members",
]

MODEL_CLIENT_MEMBERS: Final = ("name", "stream")
"""What every model client has (``name``: a label; ``stream``: a method)."""

TOOL_MEMBERS: Final = ("spec", "run")
"""What every tool has (``spec``: its ToolSpec; ``run``: a coroutine method)."""

_CALLABLE: Final = frozenset({"stream", "run"})
_WITHHELD: Final = "(message withheld: it may carry conversation content)"
_CAUSE: Final = "\nThe above exception was the direct cause of the following:\n\n"
_CONTEXT: Final = "\nDuring handling of the above exception, another occurred:\n\n"
_MISSING: Final = object()


def _type_name(exc: BaseException) -> str:
    kind = type(exc)
    module = kind.__module__
    if module in {"builtins", "__main__"}:
        return kind.__qualname__
    return f"{module}.{kind.__qualname__}"


def frames_only(exc: BaseException) -> str:
    """``exc``'s traceback as Python prints it, with every message withheld."""
    chain: list[tuple[BaseException, str]] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    link = ""
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append((current, link))
        if current.__cause__ is not None:
            current, link = current.__cause__, _CAUSE
        elif not current.__suppress_context__:
            current, link = current.__context__, _CONTEXT
        else:
            current = None
    parts: list[str] = []
    for index, (error, _) in enumerate(reversed(chain)):
        if index:
            parts.append(chain[len(chain) - index][1])
        frames = traceback.extract_tb(error.__traceback__)
        if frames:
            parts.append("Traceback (most recent call last):\n")
            parts.extend(traceback.format_list(frames))
        parts.append(f"{_type_name(error)} {_WITHHELD}\n")
    return "".join(parts).rstrip("\n")


def log_user_error(
    logger: logging.Logger, message: str, exc: BaseException, **fields: object
) -> None:
    """Log an unexpected exception from user code once, at ERROR.

    The record carries ``exc_type`` and ``exc`` (:func:`frames_only`) as extra
    fields, plus ``fields`` (ids, names -- never content).
    """
    logger.error(
        message,
        extra={"exc_type": _type_name(exc), "exc": frames_only(exc), **fields},
    )


def missing_members(value: object, members: tuple[str, ...]) -> list[str]:
    """The members of ``members`` that ``value`` lacks (or has, not callable).

    Looked up statically: a property is not run, so a property that raises is
    the user's bug to find at run time, not here.
    """
    missing: list[str] = []
    for member in members:
        found = inspect.getattr_static(value, member, _MISSING)
        absent = found is _MISSING or found is None
        if absent or (member in _CALLABLE and not _is_callable(value, member)):
            missing.append(member)
    return missing


def _is_callable(value: object, member: str) -> bool:
    try:
        bound: object = getattr(value, member)
    except Exception:  # noqa: BLE001 - a member that cannot be read is missing
        return False
    return callable(bound)


def _check(value: object, members: tuple[str, ...], what: str, setting: str) -> None:
    missing = missing_members(value, members)
    if missing:
        names = ", ".join(repr(m) for m in missing)
        raise ConfigError(
            setting,
            f"{what} {type(value).__qualname__} has no {names} "
            f"(a {what} needs: {', '.join(members)})",
        )


def check_model_client(client: object, setting: str = "model") -> None:
    """Refuse a model client without ``name`` or ``stream``.

    Raises:
        ConfigError: naming each missing member.
    """
    _check(client, MODEL_CLIENT_MEMBERS, "model client", setting)


def check_tool(tool: object, setting: str = "tools") -> None:
    """Refuse a tool without ``spec`` or ``run``.

    Raises:
        ConfigError: naming each missing member.
    """
    _check(tool, TOOL_MEMBERS, "tool", setting)
