"""Structured logging: JSON lines or plain text, configured once by a composition root.

Owns :class:`LogFormat`, :class:`JsonFormatter` (one JSON object per record:
``ts``, ``level``, ``logger``, ``msg``, then the record's ``extra=`` fields),
:class:`TextFormatter` (the same fields as ``key=value`` after the message),
:func:`configure_logging`, which installs one stderr handler on the root logger,
and :func:`set_verbose`, the ``-v`` switch it remembers.

Client libraries (aiokafka, kafka, faust, mode, httpx) log at WARNING unless
verbose, through two handler filters (a logger's own filters never see its
children's records, so they sit on the handler and match logger names):
:class:`RetriableDemotion` turns a library's warning or error about a condition
the library retries by itself (an exception with ``retriable = True``, a refused
connection, a timeout) into INFO, :class:`DenialDemotion` does the same with a
library's (or asyncio's) report of an ACL denial, which our own code reports
once, naming the grant, and :class:`RepeatFilter` passes the first of
a run of records with one logger and message template, then at most one per
interval carrying ``repeated=N`` (how many it held back). :class:`ConditionLog`
is for our own code: it logs a condition only when its state changes.

Log lines carry ids, counts and kinds, never message contents or secrets: callers
pass those as ``extra`` fields, and an extra whose name suggests contents or a
credential (``text``, ``prompt``, ``api_key`` …) is written as ``"[redacted]"``.
Stdlib only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from enum import StrEnum
from typing import Final, TextIO

from turnstream.errors import ConfigError

__all__ = [
    "LIBRARY_LOGGERS",
    "REDACTED",
    "REPEAT_INTERVAL",
    "ConditionLog",
    "DenialDemotion",
    "JsonFormatter",
    "LogFormat",
    "RepeatFilter",
    "RetriableDemotion",
    "TextFormatter",
    "configure_logging",
    "library_level",
    "parse_log_format",
    "parse_log_level",
    "record_fields",
    "set_verbose",
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
LIBRARY_LOGGERS: Final = ("aiokafka", "kafka", "faust", "mode", "httpx", "httpcore")
# The longest a run of repeated library records stays silent.
REPEAT_INTERVAL: Final = 30.0
# How many distinct (logger, template) runs the repeat filter remembers.
_REPEAT_KEYS: Final = 1024
# ``-v``: set by :func:`set_verbose`, honoured by :func:`configure_logging`.
_verbosity: dict[str, bool] = {"verbose": False}


class LogFormat(StrEnum):
    """How log records are written."""

    JSON = "json"
    TEXT = "text"


def parse_log_format(raw: str, *, setting: str = "--log-format") -> LogFormat:
    """``json`` or ``text``.

    Raises:
        ConfigError: anything else.
    """
    try:
        return LogFormat(raw.strip().lower())
    except ValueError:
        raise ConfigError(setting, f"{raw!r}: expected 'json' or 'text'") from None


def parse_log_level(raw: str, *, setting: str = "--log-level") -> int:
    """A stdlib level by name (``DEBUG`` … ``CRITICAL``, any case).

    Raises:
        ConfigError: an unknown level name.
    """
    level = logging.getLevelNamesMapping().get(raw.strip().upper())
    if level is None:
        raise ConfigError(setting, f"{raw!r}: expected DEBUG, INFO, WARNING or ERROR")
    return level


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
        extras = record_fields(record)
        # An ``exc`` field is a traceback already rendered (frames, no message).
        rendered = extras.pop("exc", None)
        fields = " ".join(f"{key}={value}" for key, value in extras.items())
        line = (
            f"{_timestamp(record)} {record.levelname:<7} {record.name}: "
            f"{record.getMessage()}"
        )
        if fields:
            line = f"{line} {fields}"
        if rendered is not None:
            line = f"{line}\n{rendered}"
        if record.exc_info and record.exc_info[0] is not None:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


def _matches(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(f"{p}.") for p in prefixes)


def _transient(value: object) -> bool:
    """An error the library itself retries: Kafka's ``retriable``, I/O, timeouts.

    A cancelled task counts too: faust logs a service it cancelled while
    stopping as "Crashed reason=CancelledError()", at ERROR.
    """
    if isinstance(value, OSError | TimeoutError | asyncio.CancelledError):
        return True
    return (
        isinstance(value, BaseException) and getattr(value, "retriable", False) is True
    )


def _arguments(record: logging.LogRecord) -> Iterable[object]:
    args = record.args
    if isinstance(args, tuple):
        yield from args
    elif args is not None:
        yield from args.values()
    if record.exc_info and record.exc_info[1] is not None:
        yield record.exc_info[1]


class RetriableDemotion(logging.Filter):
    """Demote a library's warning or error about a retried condition to INFO.

    aiokafka logs ``Group Coordinator Request failed: …NotAvailableError`` at
    ERROR on every fresh broker, then retries and succeeds; an operator can do
    nothing about it. A record from one of ``names`` whose arguments (or
    exception) carry an error with ``retriable = True``, an ``OSError`` or a
    timeout becomes INFO, and is dropped unless its logger is enabled for INFO
    (``-v``). Our own code reports the state those errors add up to.
    """

    def __init__(self, names: Iterable[str] = LIBRARY_LOGGERS) -> None:
        """Demote records of the loggers ``names`` and their children."""
        super().__init__()
        self._names = tuple(names)

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether ``record`` is still emitted (demoted if it was retriable)."""
        if record.levelno < logging.WARNING or not _matches(record.name, self._names):
            return True
        if not any(_transient(arg) for arg in _arguments(record)):
            return True
        record.levelno, record.levelname = logging.INFO, "INFO"
        return logging.getLogger(record.name).isEnabledFor(logging.INFO)


# How aiokafka and faust spell an ACL denial: error classes and log messages.
_DENIAL_MARKS: Final = ("AuthorizationFailed", "is not authorized")


class DenialDemotion(logging.Filter):
    """Demote a library's warning or error about an ACL denial to INFO.

    aiokafka logs a topic the ACL hides (``Topic … is not authorized for this
    client``) and a refused offset fetch at ERROR, faust logs the service the
    denial crashed, asyncio an orphaned future that holds one: with three
    partitions one denial became several lines, none naming the grant. Our
    code reports each denial once with the principal, the permission and the
    resource, so these become INFO (kept only with ``-v``).
    """

    def __init__(self, names: Iterable[str] = (*LIBRARY_LOGGERS, "asyncio")) -> None:
        """Demote records of the loggers ``names`` and their children."""
        super().__init__()
        self._names = tuple(names)

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether ``record`` is still emitted (demoted if it was a denial)."""
        if record.levelno < logging.WARNING or not _matches(record.name, self._names):
            return True
        if not _about_a_denial(record):
            return True
        record.levelno, record.levelname = logging.INFO, "INFO"
        return logging.getLogger(record.name).isEnabledFor(logging.INFO)


def _about_a_denial(record: logging.LogRecord) -> bool:
    texts = [str(record.msg)]
    for value in _arguments(record):
        texts += [type(value).__name__, str(value)]
        if isinstance(value, BaseException) and value.__cause__ is not None:
            texts.append(type(value.__cause__).__name__)
    return any(mark in text for text in texts for mark in _DENIAL_MARKS)


class RepeatFilter(logging.Filter):
    """Pass the first of a run of like records, then one summary per interval.

    Records are alike when they share a logger and a message template
    (``record.msg`` before ``%`` formatting), so "Unable connect to node 1" and
    "… node 2" are one run. Within ``interval`` seconds of the last record let
    through, the rest are held back and counted; the first one after it passes
    with the extra field ``repeated`` (how many were held back). A broker outage
    thus costs one line per template every ``interval``, not one per retry.
    """

    def __init__(
        self,
        names: Iterable[str] = LIBRARY_LOGGERS,
        *,
        interval: float = REPEAT_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Rate-limit the loggers ``names`` (and children); ``()`` means all."""
        super().__init__()
        self._names = tuple(names)
        self._interval = interval
        self._clock = clock
        # (logger, template, level) -> (when last let through, held back since)
        self._runs: OrderedDict[tuple[str, str, int], tuple[float, int]] = OrderedDict()

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether ``record`` is emitted; a summary carries ``repeated=N``."""
        if self._names and not _matches(record.name, self._names):
            return True
        key = (record.name, str(record.msg), record.levelno)
        now = self._clock()
        seen = self._runs.get(key)
        if seen is not None and now - seen[0] < self._interval:
            self._runs[key] = (seen[0], seen[1] + 1)
            return False
        if seen is not None and seen[1]:
            record.__dict__["repeated"] = seen[1]
        self._runs[key] = (now, 0)
        self._runs.move_to_end(key)
        while len(self._runs) > _REPEAT_KEYS:
            self._runs.popitem(last=False)
        return True


class ConditionLog:
    """Log a condition once per change of state, not once per observation.

    ``update("unreachable", …)`` logs when the state differs from the last one
    reported, and returns whether it did; the same state again is silent. For
    retriable conditions such as a broker that does not answer.
    """

    def __init__(self, logger: logging.Logger) -> None:
        """Report through ``logger``."""
        self._logger = logger
        self._state: str | None = None

    @property
    def state(self) -> str | None:
        """The last state reported, ``None`` before the first."""
        return self._state

    def update(
        self,
        state: str,
        message: str,
        *,
        level: int = logging.WARNING,
        extra: dict[str, object] | None = None,
    ) -> bool:
        """Log ``message`` at ``level`` if ``state`` is new; return whether it was."""
        if state == self._state:
            return False
        self._state = state
        self._logger.log(level, message, extra={"state": state, **(extra or {})})
        return True


def library_level(verbose: bool) -> int:
    """The level of the client libraries: INFO with ``-v``, else WARNING."""
    return logging.INFO if verbose else logging.WARNING


def _install_filters(
    handler: logging.Handler, rate_limited: Iterable[str] = LIBRARY_LOGGERS
) -> None:
    handler.addFilter(RetriableDemotion())
    handler.addFilter(DenialDemotion())
    handler.addFilter(RepeatFilter(rate_limited))


def set_verbose(verbose: bool) -> None:
    """Remember ``-v`` and apply it: the libraries' level, a fallback handler.

    :func:`configure_logging` called afterwards keeps the libraries at the level
    chosen here. Until it runs (commands that only print), a plain stderr
    handler with the library filters shows warnings and errors.
    """
    _verbosity["verbose"] = verbose
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
        )
        _install_filters(handler)
        root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.WARNING)
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(library_level(verbose))


def configure_logging(
    log_format: LogFormat,
    *,
    level: int = logging.INFO,
    libraries: int | None = None,
    stream: TextIO | None = None,
    rate_limited: Iterable[str] = LIBRARY_LOGGERS,
) -> logging.Handler:
    """Install one handler on the root logger (replacing existing ones).

    Args:
        log_format: JSON lines or text.
        level: the root logger's level.
        libraries: the level of chatty client libraries (aiokafka, faust …);
            by default WARNING, or INFO after ``set_verbose(True)``.
        stream: where to write; stderr by default (stdout is for program output).
        rate_limited: the loggers (and their children) whose repeats
            :class:`RepeatFilter` holds back; the client libraries by default,
            and a service may add its own (e.g. a retry loop's logger).

    Returns:
        The installed handler, with :class:`RetriableDemotion` and
        :class:`RepeatFilter` on the library loggers.
    """
    handler = logging.StreamHandler(stream or sys.stderr)
    formatter = JsonFormatter() if log_format is LogFormat.JSON else TextFormatter()
    handler.setFormatter(formatter)
    _install_filters(handler, rate_limited)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    chosen = library_level(_verbosity["verbose"]) if libraries is None else libraries
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(chosen)
    return handler
