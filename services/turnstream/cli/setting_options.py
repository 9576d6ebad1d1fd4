"""Typer options generated from settings declarations.

Owns :func:`option` (one :class:`~turnstream.config.Setting` as a typer
option: its flags, its variable, its help with the default) and
:func:`setting_options`, a decorator that gives a command one option per
declared setting with a flag and hands their values to it as one mapping,
``flags``, by setting name -- what the deployables' parsers take. Settings
read from the environment only (secrets) get no option; :func:`environment_epilog`
lists them under the command's help. No command declares a setting's option by
hand. Must not import aiokafka.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Final, TypeVar

import typer

from turnstream.config import Setting

__all__ = [
    "annotated",
    "environment_epilog",
    "option",
    "setting_options",
    "splice_parameters",
]

F = TypeVar("F", bound=Callable[..., Any])

_TYPES: Final[dict[type[object], Any]] = {
    str: str | None,
    int: int | None,
    float: float | None,
    bool: bool,
    list: list[str] | None,
}


def option(setting: Setting) -> Any:
    """``setting`` as a typer option (unset: ``None``; a switch: ``False``)."""
    text = setting.help
    if setting.default not in (None, "", False):
        text = f"{text}  [default: {setting.default}]"
    if setting.env and not setting.flag_reads_env and setting.env not in text:
        # The parser reads this variable, so click does not name it.
        text = f"{text}  [env var: {setting.env}]"
    return typer.Option(
        *setting.flags,
        envvar=setting.env if setting.flag_reads_env else None,
        help=text,
        show_default=False,
        min=setting.minimum,
        max=setting.maximum,
        rich_help_panel=setting.panel,
    )


def annotated(setting: Setting) -> Any:
    """The annotation of a command parameter that takes ``setting``."""
    kind = setting.kind if setting.required else _TYPES[setting.kind]
    return Annotated[kind, option(setting)]


def _parameter(setting: Setting) -> inspect.Parameter:
    default: object = False if setting.kind is bool else None
    return inspect.Parameter(
        setting.name,
        inspect.Parameter.KEYWORD_ONLY,
        default=inspect.Parameter.empty if setting.required else default,
        annotation=annotated(setting),
    )


def splice_parameters(
    run: Callable[..., Any],
    signature: inspect.Signature,
    *,
    replaced: str,
    added: Sequence[inspect.Parameter],
) -> None:
    """Present ``run`` to typer as ``signature``, ``replaced`` swapped for ``added``.

    Typer reads a command's options from its ``__signature__`` and
    ``__annotations__``; the wrapper hands ``replaced`` to the command itself.
    """
    own = [p for p in signature.parameters.values() if p.name != replaced]
    run.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*own, *added]
    )
    run.__annotations__ = {
        **{p.name: p.annotation for p in own},
        **{p.name: p.annotation for p in added},
        "return": signature.return_annotation,
    }


def environment_epilog(settings: Sequence[Setting]) -> str:
    """The help's paragraph naming the settings read from the environment only."""
    names = [s.env for s in settings if not s.flags and s.env]
    return "Environment only (never a flag): " + ", ".join(names) + "."


def setting_options(settings: Sequence[Setting]) -> Callable[[F], F]:
    """Give a command an option per setting with a flag; it receives ``flags``.

    ``flags`` maps every such setting's name to the option's value (``None``
    when neither the flag nor, where the CLI reads it, the variable is set).
    """
    flagged = [s for s in settings if s.flags]

    def decorate(command: F) -> F:
        signature = inspect.signature(command, eval_str=True)
        added = [_parameter(s) for s in flagged]

        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> Any:
            flags = {s.name: kwargs.pop(s.name, None) for s in flagged}
            return command(*args, flags=flags, **kwargs)

        splice_parameters(run, signature, replaced="flags", added=added)
        return run  # type: ignore[return-value]

    return decorate
