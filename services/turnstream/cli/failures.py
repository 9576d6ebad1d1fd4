"""Errors of every ``turnstream`` command as one clear line and an exit code.

Owns :func:`explain` (an error to ``(message, exit code)``; pure),
:func:`mismatch_hint` and :func:`exit_on_errors` (a context manager that prints
``error: …`` to stderr and exits, no traceback). Every command uses it, so the
codes mean the same everywhere:

- a bad flag, variable, model spec or topic file, a missing topic -- exit 2,
  the setting's own message (``topic X does not exist; run `turnstream topics
  apply` ``);
- topics that exist with other settings -- exit 1, the typed mismatch message;
- a request the broker refused or that cannot succeed on retry (a topic it
  will not create or alter, a failed round trip) -- exit 1;
- Kafka unreachable or not answering -- exit 3, ``cannot reach Kafka at
  HOST:PORT …; start one with `turnstream broker up` ``;
- the SASL login refused -- exit 4, the user, the mechanism and what to check;
- TLS failed (untrusted certificate, hostname mismatch, a protocol that does
  not match the listener) -- exit 5, which setting to change;
- an ACL denies a permission -- exit 6, the principal, the permission and the
  resource (``turnstream acls`` prints the grants);
- anything else turnstream raises on purpose -- exit 1;
- Ctrl-C -- exit 130.

Must not import aiokafka.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import typer
from rich.markup import escape

from turnstream.cli._common import err_console
from turnstream.cli.settings import ExitCode
from turnstream.devbroker import BrokerError
from turnstream.errors import ConfigError, TransportError, TurnstreamError
from turnstream.kafka.admin.topic_changes import is_safe_drift
from turnstream.kafka.errors import (
    BrokerUnreachableError,
    ConfigMismatch,
    KafkaAuthenticationError,
    KafkaAuthorizationError,
    KafkaTlsError,
    TopicAlterError,
    TopicConfigMismatchError,
    TopicCreateError,
)

__all__ = ["exit_on_errors", "explain", "fail", "mismatch_hint"]

_BROKER_HINT = "start one with `turnstream broker up`"
_SECURITY_CODES = {
    KafkaAuthenticationError.kind: ExitCode.AUTHENTICATION,
    KafkaTlsError.kind: ExitCode.TLS,
    KafkaAuthorizationError.kind: ExitCode.AUTHORIZATION,
}


def _config_message(exc: ConfigError) -> str:
    if exc.setting == "topics":
        # The Kafka layer says "topic X does not exist (run `…`)"; one clause here.
        return exc.reason.replace(" (run `", "; run `").removesuffix(")")
    return f"{exc.setting}: {exc.reason}"


def _refused(exc: TransportError) -> bool:
    # The broker answered and said no (or the operation cannot succeed on retry):
    # an operation failure (1), not an unreachable broker (3).
    return isinstance(exc, TopicCreateError | TopicAlterError) or not exc.is_retriable


def mismatch_hint(mismatches: Sequence[ConfigMismatch]) -> str:
    """What to do about topics that differ from ``infra/topics.yaml``."""
    safe = sum(1 for m in mismatches if is_safe_drift(m))
    if safe and safe == len(mismatches):
        return "change them in place with `turnstream topics apply --alter`"
    if safe:
        return (
            "`turnstream topics apply --alter` changes the safe ones in place; "
            "fix or recreate the rest"
        )
    return "fix or recreate the topic(s)"


def explain(exc: BaseException, bootstrap: str | None = None) -> tuple[str, ExitCode]:
    """The one-line message and exit code for ``exc``.

    Args:
        exc: what went wrong.
        bootstrap: the Kafka servers in use, named when Kafka did not answer.
    """
    match exc:
        case ConfigError():
            return _config_message(exc), ExitCode.USAGE
        case TopicConfigMismatchError():
            lines = "; ".join(str(m) for m in exc.mismatches)
            return (
                f"{lines} -- {mismatch_hint(exc.mismatches)} "
                f"(declared in infra/topics.yaml) [{exc.kind}]",
                ExitCode.FAILED,
            )
        case BrokerUnreachableError():
            reason = str(exc.reason).split("; is a broker running")[0]
            return (
                f"cannot reach Kafka at {exc.bootstrap} ({reason}); {_BROKER_HINT}, "
                "or point --bootstrap / KAFKA_BOOTSTRAP_SERVERS at a running cluster",
                ExitCode.UNREACHABLE,
            )
        case TransportError() if not _refused(exc):
            where = bootstrap or "the configured servers"
            return (
                f"cannot reach Kafka at {where} ({exc}); {_BROKER_HINT}",
                ExitCode.UNREACHABLE,
            )
        case BrokerError() | TurnstreamError():
            # Login, TLS and ACL failures are refusals with codes of their own.
            return f"{exc} [{exc.kind}]", _SECURITY_CODES.get(exc.kind, ExitCode.FAILED)
        case _:
            return f"{type(exc).__name__}: {exc}", ExitCode.FAILED


def fail(message: str, code: ExitCode) -> typer.Exit:
    """Print ``error: message`` to stderr; return the ``typer.Exit`` to raise."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    return typer.Exit(int(code))


@contextmanager
def exit_on_errors(bootstrap: str | None = None) -> Iterator[None]:
    """Turn turnstream errors and Ctrl-C into a message and an exit code.

    Args:
        bootstrap: the Kafka servers in use (for the unreachable message).
    """
    try:
        yield
    except (TurnstreamError, BrokerError) as exc:
        message, code = explain(exc, bootstrap)
        raise fail(message, code) from None
    except KeyboardInterrupt:
        # Ctrl-C is how a person stops a following command: no error line.
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
