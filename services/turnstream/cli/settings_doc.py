"""The settings reference, ``docs/settings.md``, generated from the declarations.

Owns :data:`DEPLOYABLES` (each deployable's command and its declared settings)
and :func:`render`, which writes one table per deployable plus one for the
Kafka and logging settings several commands share (each setting in exactly one
table). ``python -m turnstream.cli.settings_doc`` rewrites the file;
``--check`` exits 1 when it is stale (a unit test does the same).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from turnstream.analytics.settings import SETTINGS as ANALYTICS_SETTINGS
from turnstream.config import (
    BOOTSTRAP,
    LOG_FORMAT,
    LOG_LEVEL,
    PARTITIONS,
    REPLICATION_FACTOR,
    SCHEMA_DIR,
    SECURITY,
    TIMEOUT,
    TOPIC_PREFIX,
    TOPIC_SUFFIX,
    Setting,
)
from turnstream.gateway.settings import KAFKA as GATEWAY_KAFKA
from turnstream.gateway.settings import SETTINGS as GATEWAY_SETTINGS
from turnstream.loop_actor.settings import SETTINGS as ACTOR_SETTINGS

__all__ = ["DEPLOYABLES", "KAFKA", "SHARED", "Deployable", "main", "render", "rows"]


@dataclass(frozen=True, slots=True)
class Deployable:
    """A command that runs a deployable, and the settings it declares."""

    title: str
    command: tuple[str, ...]
    settings: tuple[Setting, ...]


KAFKA: Final = (BOOTSTRAP, TIMEOUT, TOPIC_PREFIX, TOPIC_SUFFIX, *SECURITY)
"""The Kafka option group of every command that talks to Kafka."""

SHARED: Final[tuple[Setting, ...]] = (
    *KAFKA,
    PARTITIONS,
    REPLICATION_FACTOR,
    SCHEMA_DIR,
    LOG_FORMAT,
    LOG_LEVEL,
)
"""Settings several commands take, listed once in their own table."""

DEPLOYABLES: Final = (
    Deployable("The loop actor", ("actor", "run"), ACTOR_SETTINGS),
    Deployable(
        "The analytics worker",
        ("analytics", "run"),
        (*ANALYTICS_SETTINGS, LOG_FORMAT, LOG_LEVEL, *KAFKA),
    ),
    Deployable("The HTTP gateway", ("gateway",), (*GATEWAY_SETTINGS, *GATEWAY_KAFKA)),
)

_HEADER: Final = """\
# Settings reference

Generated from the settings declarations by `python -m turnstream.cli.settings_doc`
(do not edit by hand). Each setting is a flag and an environment variable; the
flag wins. Secrets (API keys, the SASL and TLS key passwords) are read from the
environment only, never a flag, and never printed.
"""


def _key(setting: Setting) -> tuple[str | None, str | None]:
    return setting.flag, setting.env


_SHARED_KEYS: Final = {_key(s) for s in SHARED}
_SHARED_ENVS: Final = {s.env: s for s in SHARED if s.env}


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _row(setting: Setting, default: str) -> str:
    flags = ", ".join(f"`{f}`" for f in setting.flags) or "(environment only)"
    env = f"`{setting.env}`" if setting.env else ""
    return f"| {flags} | {env} | {_cell(default)} | {_cell(setting.help)} |"


def _default(setting: Setting) -> str:
    if setting.default is None or setting.default == "":
        return ""
    return f"`{setting.default}`"


def own(deployable: Deployable) -> list[Setting]:
    """The deployable's settings that are not in the shared table."""
    return [
        s
        for s in deployable.settings
        if _key(s) not in _SHARED_KEYS and s.env not in _SHARED_ENVS
    ]


def rows(settings: Sequence[Setting], notes: dict[str, str] | None = None) -> str:
    """A Markdown table of ``settings`` (``notes``: extra default text by name)."""
    lines = [
        "| Flag | Variable | Default | Description |",
        "| --- | --- | --- | --- |",
    ]
    for setting in settings:
        default = _default(setting)
        extra = (notes or {}).get(setting.name)
        if extra:
            default = f"{default} ({extra})" if default else extra
        lines.append(_row(setting, default))
    return "\n".join(lines)


def _shared_notes() -> dict[str, str]:
    """Where a command shows a shared setting with its own default."""
    notes: dict[str, list[str]] = {}
    for deployable in DEPLOYABLES:
        for setting in deployable.settings:
            shared = _SHARED_ENVS.get(setting.env or "")
            if shared is not None and setting.default != shared.default:
                command = " ".join(deployable.command)
                notes.setdefault(shared.name, []).append(
                    f"`{command}`: `{setting.default}`"
                )
    return {name: "; ".join(texts) for name, texts in notes.items()}


def render() -> str:
    """The whole reference."""
    parts = [_HEADER]
    for deployable in DEPLOYABLES:
        command = " ".join(deployable.command)
        parts.append(
            f"## {deployable.title}: `turnstream {command}`\n\n"
            f"The shared settings below apply too.\n\n{rows(own(deployable))}\n"
        )
    parts.append(
        "## Shared: Kafka connection, security, topics, schemas and logs\n\n"
        "Every command that talks to Kafka takes the connection and security "
        "settings; the deployables above take all of them.\n\n"
        f"{rows(SHARED, _shared_notes())}\n"
    )
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    """Write ``docs/settings.md`` (``--check``: exit 1 if it differs)."""
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    paths = [a for a in args if a != "--check"]
    target = Path(paths[0]) if paths else Path("docs/settings.md")
    text = render()
    if check:
        current = target.read_text(encoding="utf-8") if target.exists() else ""
        return 0 if current == text else 1
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
