"""Structured logging: JSON lines or plain text, configured once by a composition root.

Owns :class:`LogFormat`, :class:`JsonFormatter` (one JSON object per record:
``ts``, ``level``, ``logger``, ``msg``, then the record's ``extra=`` fields),
:class:`TextFormatter` (the same fields as ``key=value`` after the message) and
:func:`configure_logging`, which installs one stderr handler on the root logger.

Log lines carry ids, counts and kinds, never message contents or secrets: callers
pass those as ``extra`` fields, and an extra whose name suggests contents or a
credential (``text``, ``prompt``, ``api_key`` …) is written as ``"[redacted]"``.
Stdlib only.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from enum import StrEnum
from typing import Final, TextIO

__all__ = [
    "REDACTED",
    "JsonFormatter",
    "LogFormat",
    "TextFormatter",
    "configure_logging",
    "record_fields",
]

REDACTED: Final = "[redacted]"
_CONTENT_NAMES: Final = frozenset(
    {
        "api_key",
        "arguments",
        "authorization",
        "content",
        "input",
        "input_json",
        "password",
        "prompt",
        "secret",
        "text",
        "token",
    }
)
_SECRET_SUFFIXES: Final = ("_key", "_secret", "_password", "_token")
# Attributes every LogRecord has; anything else came in through ``extra=``.
_STANDARD: Final = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None))
) | {"message", "asctime", "taskName"}
# Chatty client libraries: their INFO lines (connects, rebalances) are noise here.
_LIBRARIES: Final = ("aiokafka", "kafka", "httpx", "httpcore")


class LogFormat(StrEnum):
    """How log records are written."""

    JSON = "json"
    TEXT = "text"


def _redacted(name: str) -> bool:
    lowered = name.lower()
    return lowered in _CONTENT_NAMES or lowered.endswith(_SECRET_SUFFIXES)


def _plain(value: object) -> object:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def record_fields(record: logging.LogRecord) -> dict[str, object]:
    """The ``extra=`` fields of ``record``, redacted and made JSON-safe."""
    return {
        name: REDACTED if _redacted(name) else _plain(value)
        for name, value in vars(record).items()
        if name not in _STANDARD and not name.startswith("_")
    }


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``msg``, extras."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as a single line of JSON."""
        entry: dict[str, object] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(record_fields(record))
        if record.exc_info and record.exc_info[0] is not None:
            entry["exc_type"] = record.exc_info[0].__name__
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """``ts level logger: msg key=value …`` for people reading a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as one human-readable line (plus a traceback)."""
        fields = " ".join(
            f"{key}={value}" for key, value in record_fields(record).items()
        )
        line = (
            f"{_timestamp(record)} {record.levelname:<7} {record.name}: "
            f"{record.getMessage()}"
        )
        if fields:
            line = f"{line} {fields}"
        if record.exc_info and record.exc_info[0] is not None:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


def configure_logging(
    log_format: LogFormat,
    *,
    level: int = logging.INFO,
    libraries: int = logging.WARNING,
    stream: TextIO | None = None,
) -> logging.Handler:
    """Install one handler on the root logger (replacing existing ones).

    Args:
        log_format: JSON lines or text.
        level: the root logger's level.
        libraries: the level of chatty client libraries (aiokafka, httpx).
        stream: where to write; stderr by default (stdout is for program output).

    Returns:
        The installed handler.
    """
    handler = logging.StreamHandler(stream or sys.stderr)
    formatter = JsonFormatter() if log_format is LogFormat.JSON else TextFormatter()
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in _LIBRARIES:
        logging.getLogger(name).setLevel(libraries)
    return handler
