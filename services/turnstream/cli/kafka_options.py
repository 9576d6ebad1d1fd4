"""The Kafka connection option group every command that talks to Kafka takes.

Owns :func:`kafka_options`, a decorator that adds one set of options to a typer
command -- ``--bootstrap``, ``--timeout``, the security flags of
:mod:`turnstream.cli.security` and, where the command names topics,
``--topic-prefix``/``--topic-suffix`` -- and resolves them, flags over the
environment and validated together, into one
:class:`~turnstream.cli.settings.KafkaTarget` passed to the command as its
``target`` argument. A bad value is a one-line error and exit 2 (through
:func:`~turnstream.cli.failures.exit_on_errors`), before the command runs.

The options are added to the command's signature (``__signature__`` and
``__annotations__``), which is what typer reads, so ``--help`` lists them like
the command's own. Must not import aiokafka.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any, Final, TypeVar

import typer

from turnstream.cli.failures import exit_on_errors
from turnstream.cli.security import (
    SaslMechanismOption,
    SaslUsernameOption,
    SecurityProtocolOption,
    SslCafileOption,
    SslCertfileOption,
    SslKeyfileOption,
    security_flags,
)
from turnstream.cli.settings import ENV, KafkaTarget

__all__ = ["BootstrapOption", "TopicAffixes", "kafka_options"]

F = TypeVar("F", bound=Callable[..., Any])

_PANEL: Final = "Kafka connection"
_SECURITY: Final = (
    "security_protocol",
    "sasl_mechanism",
    "sasl_username",
    "ssl_cafile",
    "ssl_certfile",
    "ssl_keyfile",
)

BootstrapOption = Annotated[
    str | None,
    typer.Option(
        "--bootstrap",
        "-b",
        help="Kafka host:port[,host:port]; default $KAFKA_BOOTSTRAP_SERVERS, "
        "else the local broker 127.0.0.1:19092.",
        show_default=False,
        rich_help_panel=_PANEL,
    ),
]


class TopicAffixes(StrEnum):
    """Where a command's topic-name prefix and suffix come from."""

    FLAGS = "flags"
    """``--topic-prefix``/``--topic-suffix``, else ``TURNSTREAM_TOPIC_*``."""
    ENV = "env"
    """``TURNSTREAM_TOPIC_PREFIX``/``_SUFFIX`` only."""
    NONE = "none"
    """Always the default names."""


def _timeout_option(default: float) -> inspect.Parameter:
    annotation = Annotated[
        float,
        typer.Option(
            "--timeout",
            min=0.1,
            envvar=ENV.KAFKA_TIMEOUT,
            help="Seconds allowed for each Kafka call (connect, send, read).",
            rich_help_panel=_PANEL,
        ),
    ]
    return inspect.Parameter(
        "timeout",
        inspect.Parameter.KEYWORD_ONLY,
        default=default,
        annotation=annotation,
    )


def _affix_option(name: str, flags: tuple[str, ...], env: str) -> inspect.Parameter:
    annotation = Annotated[
        str | None,
        typer.Option(
            *flags,
            envvar=env,
            help=f"{'Prepended to' if name == 'topic_prefix' else 'Appended to'} "
            "every topic name (an isolated topic set).",
            show_default=False,
            rich_help_panel=_PANEL,
        ),
    ]
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation
    )


_SECURITY_ANNOTATIONS: Final = {
    "security_protocol": SecurityProtocolOption,
    "sasl_mechanism": SaslMechanismOption,
    "sasl_username": SaslUsernameOption,
    "ssl_cafile": SslCafileOption,
    "ssl_certfile": SslCertfileOption,
    "ssl_keyfile": SslKeyfileOption,
}


def kafka_options(
    *, timeout: float = 10.0, topics: TopicAffixes = TopicAffixes.ENV
) -> Callable[[F], F]:
    """Give a command the Kafka option group; it receives ``target: KafkaTarget``.

    Args:
        timeout: the default of ``--timeout`` for this command.
        topics: where the topic-name prefix and suffix come from.
    """

    def decorate(command: F) -> F:
        signature = inspect.signature(command, eval_str=True)
        own = [p for p in signature.parameters.values() if p.name != "target"]
        added = [
            inspect.Parameter(
                "bootstrap",
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=BootstrapOption,
            ),
            _timeout_option(timeout),
        ]
        if topics is TopicAffixes.FLAGS:
            added += [
                _affix_option(
                    "topic_prefix", ("--topic-prefix", "--prefix"), ENV.TOPIC_PREFIX
                ),
                _affix_option(
                    "topic_suffix", ("--topic-suffix", "--suffix"), ENV.TOPIC_SUFFIX
                ),
            ]
        added += [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=annotation,
            )
            for name, annotation in _SECURITY_ANNOTATIONS.items()
        ]
        names = [p.name for p in added]

        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> Any:
            given = {name: kwargs.pop(name) for name in names if name in kwargs}
            affixes: dict[str, str | None] = {}
            if topics is TopicAffixes.FLAGS:
                affixes = {
                    "prefix": given.get("topic_prefix"),
                    "suffix": given.get("topic_suffix"),
                }
            elif topics is TopicAffixes.NONE:
                affixes = {"prefix": "", "suffix": ""}
            with exit_on_errors():
                target = KafkaTarget.resolve(
                    bootstrap=given.get("bootstrap"),
                    env=os.environ,
                    timeout=given.get("timeout", timeout),
                    security=security_flags(**{k: given.get(k) for k in _SECURITY}),
                    **affixes,
                )
            return command(*args, target=target, **kwargs)

        run.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*own, *added]
        )
        run.__annotations__ = {
            **{p.name: p.annotation for p in own},
            **{p.name: p.annotation for p in added},
            "return": signature.return_annotation,
        }
        return run  # type: ignore[return-value]

    return decorate
