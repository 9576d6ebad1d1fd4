"""Structured logs: one JSON object per line, extras kept, contents redacted.

Also the library filters: retried conditions demoted, repeats rate-limited.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging

import pytest
from aiokafka import errors as kafka_errors

from turnstream.observability.logs import (
    LIBRARY_LOGGERS,
    REDACTED,
    ConditionLog,
    LogFormat,
    RepeatFilter,
    TextFormatter,
    configure_logging,
    set_verbose,
)


@pytest.fixture
def restore_root() -> object:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield root
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def test_json_lines_carry_fields_and_redact_contents(restore_root: object) -> None:
    """Each record is one JSON line with ts/level/logger/msg and its extras."""
    stream = io.StringIO()
    configure_logging(LogFormat.JSON, stream=stream)

    logging.getLogger("turnstream.test").info(
        "turn started",
        extra={
            "loop_id": "abc",
            "turn_index": 2,
            "text": "secret prompt",
            "api_key": "k",
        },
    )

    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert entry["level"] == "info"
    assert entry["logger"] == "turnstream.test"
    assert entry["msg"] == "turn started"
    assert entry["loop_id"] == "abc"
    assert entry["turn_index"] == 2
    assert entry["text"] == REDACTED
    assert entry["api_key"] == REDACTED
    assert entry["ts"].endswith("Z")
    assert "secret prompt" not in stream.getvalue()


def test_json_lines_name_the_exception_type(restore_root: object) -> None:
    """An exception is logged with its type (and traceback) inside the JSON."""
    stream = io.StringIO()
    configure_logging(LogFormat.JSON, stream=stream)

    try:
        raise KeyError("x")
    except KeyError:
        logging.getLogger("t").exception("failed")

    entry = json.loads(stream.getvalue())
    assert entry["exc_type"] == "KeyError"
    assert "Traceback" in entry["exc"]


def test_text_format_is_key_value(restore_root: object) -> None:
    """The text format puts extras after the message as key=value."""
    stream = io.StringIO()
    configure_logging(LogFormat.TEXT, stream=stream)

    logging.getLogger("t").warning("lag", extra={"partition": 1})

    line = stream.getvalue().strip()
    assert line.endswith("WARNING t: lag partition=1")


def test_configure_logging_quiets_client_libraries(restore_root: object) -> None:
    """aiokafka's INFO chatter is held back at the libraries' level."""
    configure_logging(LogFormat.TEXT, stream=io.StringIO(), libraries=logging.ERROR)

    assert logging.getLogger("aiokafka").level == logging.ERROR


@pytest.fixture
def quiet_libraries(restore_root: object) -> object:
    """Restore ``-v`` and the library loggers' levels after the test."""
    levels = {name: logging.getLogger(name).level for name in LIBRARY_LOGGERS}
    yield restore_root
    set_verbose(False)
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


@pytest.mark.parametrize(
    ("verbose", "expected"),
    [
        pytest.param(False, logging.WARNING, id="quiet"),
        pytest.param(True, logging.INFO, id="verbose"),
    ],
)
def test_configure_logging_keeps_the_verbosity_set_before(
    quiet_libraries: object, verbose: bool, expected: int
) -> None:
    """``-v`` (``set_verbose``) survives the command's ``configure_logging``."""
    set_verbose(verbose)
    configure_logging(LogFormat.TEXT, stream=io.StringIO())

    levels = {name: logging.getLogger(name).level for name in LIBRARY_LOGGERS}
    assert levels == dict.fromkeys(
        ("aiokafka", "kafka", "faust", "mode", "httpx", "httpcore"), expected
    )


def test_retried_coordinator_error_is_not_an_error_line(
    quiet_libraries: object,
) -> None:
    """aiokafka's ERROR about a coordinator it retries is hidden without ``-v``.

    This is the line a fresh broker printed among the demo's lines.
    """
    set_verbose(False)
    stream = io.StringIO()
    configure_logging(LogFormat.TEXT, stream=stream)

    logging.getLogger("aiokafka.consumer.group_coordinator").error(
        "Group Coordinator Request failed: %s",
        kafka_errors.GroupCoordinatorNotAvailableError(),
    )
    logging.getLogger("aiokafka.client").error(
        'Unable connect to "%s:%s": %s',
        "127.0.0.1",
        9,
        ConnectionRefusedError(111, "refused"),
    )

    assert stream.getvalue() == ""


def test_a_service_cancelled_while_stopping_is_not_an_error_line(
    quiet_libraries: object,
) -> None:
    """faust logs an agent it cancelled on stop as crashed: not an error."""
    set_verbose(False)
    stream = io.StringIO()
    configure_logging(LogFormat.JSON, stream=stream)

    try:
        raise asyncio.CancelledError
    except asyncio.CancelledError:
        logging.getLogger("faust.agents.actor").exception(
            "[%s]: Crashed reason=%r", "Agent", asyncio.CancelledError()
        )

    assert stream.getvalue() == ""


def test_retried_error_is_info_with_verbose(quiet_libraries: object) -> None:
    """With ``-v`` the retried condition is shown, as INFO."""
    set_verbose(True)
    stream = io.StringIO()
    configure_logging(LogFormat.JSON, stream=stream)

    logging.getLogger("aiokafka.consumer.group_coordinator").error(
        "Group Coordinator Request failed: %s",
        kafka_errors.GroupCoordinatorNotAvailableError(),
    )

    entry = json.loads(stream.getvalue())
    assert entry["level"] == "info"
    assert entry["logger"] == "aiokafka.consumer.group_coordinator"
    assert entry["msg"].startswith("Group Coordinator Request failed: ")


@pytest.mark.parametrize(
    ("logger", "argument"),
    [
        pytest.param(
            "aiokafka.consumer.group_coordinator",
            kafka_errors.UnsupportedVersionError(),
            id="library-fatal-error",
        ),
        pytest.param(
            "turnstream.kafka.actor", ConnectionRefusedError(111, "x"), id="own-logger"
        ),
    ],
)
def test_errors_that_are_not_retried_stay_errors(
    quiet_libraries: object, logger: str, argument: BaseException
) -> None:
    """Only a library's retriable conditions are demoted; the rest stay ERROR."""
    set_verbose(False)
    stream = io.StringIO()
    configure_logging(LogFormat.JSON, stream=stream)

    logging.getLogger(logger).error("failed: %s", argument)

    assert json.loads(stream.getvalue())["level"] == "error"


@pytest.mark.parametrize(
    ("logger", "message", "argument"),
    [
        pytest.param(
            "aiokafka.cluster",
            "Topic %s is not authorized for this client",
            "t.turnstream.deltas.v1",
            id="aiokafka-metadata",
        ),
        pytest.param(
            "aiokafka.consumer.group_coordinator",
            "Unknown error fetching offsets for %s: %r",
            kafka_errors.TopicAuthorizationFailedError("t"),
            id="aiokafka-offsets",
        ),
        pytest.param(
            "faust.app.base",
            "[%s]: Crashed reason=%r",
            RuntimeError("Error while sending: TopicAuthorizationFailedError('t')"),
            id="faust-crash",
        ),
        pytest.param(
            "asyncio",
            "Future exception was never retrieved\nfuture: %s",
            "<Future finished exception=TopicAuthorizationFailedError({'t'})>",
            id="asyncio-orphan",
        ),
    ],
)
def test_a_library_report_of_an_acl_denial_is_not_an_error_line(
    quiet_libraries: object, logger: str, message: str, argument: object
) -> None:
    """turnstream reports a denial once, naming the grant: a library's own ERROR
    about it (each partition, each service it crashed) is INFO (a library's
    hidden without ``-v``)."""
    set_verbose(False)
    stream = io.StringIO()
    configure_logging(LogFormat.JSON, stream=stream)

    if message.count("%") == 2:
        logging.getLogger(logger).error(message, "App", argument)
    else:
        logging.getLogger(logger).error(message, argument)

    levels = [json.loads(line)["level"] for line in stream.getvalue().splitlines()]
    assert set(levels) <= {"info"}, stream.getvalue()


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _limited(clock: _Clock) -> tuple[logging.Logger, io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TextFormatter())
    handler.addFilter(RepeatFilter(("aiokafka",), interval=30.0, clock=clock))
    logger = logging.getLogger(f"aiokafka.test-{id(clock)}")
    logger.handlers = [handler]
    logger.propagate = False
    logger.setLevel(logging.WARNING)
    return logger, stream


def _messages(stream: io.StringIO) -> list[str]:
    return [line.split(": ", 1)[1] for line in stream.getvalue().splitlines()]


def test_repeat_filter_logs_the_first_then_a_summary_per_interval() -> None:
    """One template repeated: the first line, then ``repeated=N`` after 30 s."""
    clock = _Clock()
    logger, stream = _limited(clock)

    for node in range(5):  # one template, different arguments
        logger.warning("Unable connect to node with id %s", node)
        clock.now += 5.0
    assert _messages(stream) == ["Unable connect to node with id 0"]

    clock.now = 130.0  # 30 s after the first line
    logger.warning("Unable connect to node with id %s", 7)
    clock.now += 1.0
    logger.warning("Unable connect to node with id %s", 8)

    assert _messages(stream) == [
        "Unable connect to node with id 0",
        "Unable connect to node with id 7 repeated=4",
    ]

    clock.now = 161.0  # next interval: one held back since the summary
    logger.warning("Unable connect to node with id %s", 9)
    clock.now = 200.0  # and then a quiet interval: no count to report
    logger.warning("Unable connect to node with id %s", 10)

    assert _messages(stream)[2:] == [
        "Unable connect to node with id 9 repeated=1",
        "Unable connect to node with id 10",
    ]


def test_repeat_filter_keeps_templates_levels_and_other_loggers_apart() -> None:
    """Another template or level is a run of its own; other loggers pass."""
    clock = _Clock()
    logger, stream = _limited(clock)
    own = logging.getLogger("turnstream.test-repeat")
    own_stream = io.StringIO()
    own_handler = logging.StreamHandler(own_stream)
    own_handler.addFilter(RepeatFilter(("aiokafka",), clock=clock))
    own.handlers = [own_handler]
    own.propagate = False

    logger.warning("heartbeat failed: %s", "a")
    logger.warning("heartbeat failed: %s", "b")
    logger.warning("fetch failed: %s", "a")
    logger.error("heartbeat failed: %s", "c")
    own.warning("kept %s", 1)
    own.warning("kept %s", 2)

    assert _messages(stream) == [
        "heartbeat failed: a",
        "fetch failed: a",
        "heartbeat failed: c",
    ]
    assert own_stream.getvalue().splitlines() == ["kept 1", "kept 2"]


class _Recording(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_condition_log_reports_each_change_of_state_once() -> None:
    """The same state again is silent; a new state is one line with ``state``."""
    handler = _Recording()
    records = handler.records
    logger = logging.getLogger("turnstream.test-condition")
    logger.handlers = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    condition = ConditionLog(logger)

    changes = [
        condition.update("unreachable", "kafka unreachable"),
        condition.update("unreachable", "kafka unreachable"),
        condition.update("reachable", "kafka reachable again", level=logging.INFO),
        condition.update("reachable", "kafka reachable again", level=logging.INFO),
    ]

    assert changes == [True, False, True, False]
    assert [(r.getMessage(), r.levelname, r.__dict__["state"]) for r in records] == [
        ("kafka unreachable", "WARNING", "unreachable"),
        ("kafka reachable again", "INFO", "reachable"),
    ]
    assert condition.state == "reachable"


def test_configure_logging_rate_limits_the_loggers_asked_for(
    quiet_libraries: object,
) -> None:
    """A service may add its own logger to the rate-limited ones."""
    stream = io.StringIO()
    configure_logging(
        LogFormat.TEXT,
        stream=stream,
        rate_limited=(*LIBRARY_LOGGERS, "turnstream.test-retry"),
    )
    retry, other = (
        logging.getLogger("turnstream.test-retry.commit"),
        logging.getLogger("turnstream.test-other"),
    )

    for attempt in range(3):
        retry.warning("commit failed, retrying (attempt %d)", attempt)
        other.warning("not limited %d", attempt)

    messages = [line.split(": ", 1)[1] for line in stream.getvalue().splitlines()]
    assert messages == [
        "commit failed, retrying (attempt 0)",
        "not limited 0",
        "not limited 1",
        "not limited 2",
    ]
