"""Where the wire contract's files are: the schemas and the declared topic set.

Owns :func:`schema_dir` and :func:`topic_set_file`. One source of truth, no
copies in the tree: the checkout's ``schemas/`` and ``infra/topics.yaml`` are
what a source checkout (or an editable install) reads, and the wheel build
maps the same files into the package as ``turnstream/_data/schemas`` and
``turnstream/_data/topics.yaml`` (hatch ``force-include`` in ``pyproject.toml``),
so an installed wheel reads its own copy. Order: an explicit setting
(``TURNSTREAM_SCHEMA_DIR``), the installed package data, the checkout. A leaf:
imports only the standard library.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

__all__ = ["SCHEMA_DIR_ENV", "schema_dir", "topic_set_file"]

SCHEMA_DIR_ENV = "TURNSTREAM_SCHEMA_DIR"
"""Setting naming the schema directory; overrides the packaged one."""

_CHECKOUT = Path(__file__).resolve().parents[2]


def _packaged(name: str) -> Path | None:
    """``turnstream/_data/<name>`` of an installed wheel, if it is a real file."""
    located = resources.files("turnstream") / "_data" / name
    if isinstance(located, Path) and located.exists():
        return located
    return None


def schema_dir() -> Path:
    """The schema directory: the setting, else the packaged set, else the checkout."""
    override = os.environ.get(SCHEMA_DIR_ENV, "").strip()
    if override:
        return Path(override)
    return _packaged("schemas") or _CHECKOUT / "schemas"


def topic_set_file() -> Path:
    """The declared topic set: the packaged ``topics.yaml``, else the checkout's."""
    return _packaged("topics.yaml") or _CHECKOUT / "infra" / "topics.yaml"
