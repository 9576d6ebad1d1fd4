"""The Kafka connection option group every command that talks to Kafka takes.

Owns :func:`kafka_options`, a decorator that adds one set of options to a typer
command -- ``--bootstrap``, ``--timeout``, the security flags and, where the
command names topics, ``--topic-prefix``/``--topic-suffix``, all generated from
their declarations in :mod:`turnstream.config` -- and resolves them, flags over
the environment and validated together, into one
:class:`~turnstream.cli.settings.KafkaTarget` passed to the command as its
``target`` argument. The SASL and TLS key passwords come only from the
environment, never a flag. A bad value is a one-line error and exit 2 (through
:func:`~turnstream.cli.failures.exit_on_errors`), before the command runs.

The options are added to the command's signature (``__signature__`` and
``__annotations__``), which is what typer reads, so ``--help`` lists them like
the command's own. Must not import aiokafka.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any, TypeVar

from turnstream.cli.failures import exit_on_errors
from turnstream.cli.setting_options import annotated, option, splice_parameters
from turnstream.cli.settings import KafkaTarget
from turnstream.config import (
    BOOTSTRAP,
    SECURITY,
    TIMEOUT,
    TOPIC_PREFIX,
    TOPIC_SUFFIX,
    Setting,
)

__all__ = ["BootstrapOption", "TopicAffixes", "kafka_options"]

F = TypeVar("F", bound=Callable[..., Any])

BootstrapOption = Annotated[str | None, option(BOOTSTRAP)]


class TopicAffixes(StrEnum):
    """Where a command's topic-name prefix and suffix come from."""

    FLAGS = "flags"
    """``--topic-prefix``/``--topic-suffix``, else ``TURNSTREAM_TOPIC_*``."""
    ENV = "env"
    """``TURNSTREAM_TOPIC_PREFIX``/``_SUFFIX`` only."""
    NONE = "none"
    """Always the default names."""


def _parameter(setting: Setting, default: object = None) -> inspect.Parameter:
    return inspect.Parameter(
        setting.name,
        inspect.Parameter.KEYWORD_ONLY,
        default=default,
        annotation=annotated(setting),
    )


def kafka_options(
    *, timeout: float = 10.0, topics: TopicAffixes = TopicAffixes.ENV
) -> Callable[[F], F]:
    """Give a command the Kafka option group; it receives ``target: KafkaTarget``.

    Args:
        timeout: the default of ``--timeout`` for this command.
        topics: where the topic-name prefix and suffix come from.
    """
    settings = [BOOTSTRAP, dataclasses.replace(TIMEOUT, default=timeout)]
    if topics is TopicAffixes.FLAGS:
        settings += [TOPIC_PREFIX, TOPIC_SUFFIX]
    settings += [s for s in SECURITY if s.flags]
    names = [s.name for s in settings]
    security = [s.name for s in SECURITY if s.flags]

    def decorate(command: F) -> F:
        signature = inspect.signature(command, eval_str=True)
        added = [
            _parameter(s, timeout if s.name == "timeout" else None) for s in settings
        ]

        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> Any:
            given = {name: kwargs.pop(name) for name in names if name in kwargs}
            affixes: dict[str, str | None] = {}
            if topics is TopicAffixes.FLAGS:
                # The CLI read TURNSTREAM_TOPIC_* into the flags already.
                affixes = {
                    "prefix": given.get("topic_prefix") or "",
                    "suffix": given.get("topic_suffix") or "",
                }
            elif topics is TopicAffixes.NONE:
                affixes = {"prefix": "", "suffix": ""}
            with exit_on_errors():
                target = KafkaTarget.resolve(
                    bootstrap=given.get("bootstrap"),
                    env=os.environ,
                    timeout=given.get("timeout", timeout),
                    security={k: given.get(k) for k in security},
                    **affixes,
                )
            return command(*args, target=target, **kwargs)

        splice_parameters(run, signature, replaced="target", added=added)
        return run  # type: ignore[return-value]

    return decorate
