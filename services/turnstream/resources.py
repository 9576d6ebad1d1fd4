"""Where the wire contract's files are: the schemas and the declared topic set.

Owns :func:`schema_dir` and :func:`topic_set_file`. One source of truth, no
copies in the tree: the checkout's ``schemas/`` and ``infra/topics.yaml`` are
what a source checkout (or an editable install) reads, and the wheel build
maps the same files into the package as ``turnstream/_data/schemas`` and
``turnstream/_data/topics.yaml`` (hatch ``force-include`` in ``pyproject.toml``),
so an installed wheel reads its own copy. Order: the directory passed in, else
the one the process's composition root set with :func:`use_schema_dir` (the
CLI hands in ``TURNSTREAM_SCHEMA_DIR``), the installed package data, the
checkout. Reads no environment. A leaf: imports only the standard library.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["SCHEMA_DIR_ENV", "schema_dir", "topic_set_file", "use_schema_dir"]

SCHEMA_DIR_ENV = "TURNSTREAM_SCHEMA_DIR"
"""Setting naming the schema directory; overrides the packaged one."""

_CHECKOUT = Path(__file__).resolve().parents[2]
_chosen: Path | None = None
"""The schema directory the composition root chose (``None``: the packaged one)."""


def use_schema_dir(directory: str | Path | None) -> None:
    """Make ``directory`` this process's schema directory (blank: the packaged one).

    Called once at start-up by the composition root.
    """
    global _chosen  # noqa: PLW0603 - the process-wide choice, set once at start-up
    text = str(directory).strip() if directory is not None else ""
    _chosen = Path(text) if text else None


def _packaged(name: str) -> Path | None:
    """``turnstream/_data/<name>`` of an installed wheel, if it is a real file."""
    located = resources.files("turnstream") / "_data" / name
    if isinstance(located, Path) and located.exists():
        return located
    return None


def schema_dir(override: str | Path | None = None) -> Path:
    """The schema directory: ``override``, else the chosen one, else the packaged.

    The chosen one is :func:`use_schema_dir`'s; the last resort the checkout's.
    """
    text = str(override).strip() if override is not None else ""
    if text:
        return Path(text)
    return _chosen or _packaged("schemas") or _CHECKOUT / "schemas"


def topic_set_file() -> Path:
    """The declared topic set: the packaged ``topics.yaml``, else the checkout's."""
    return _packaged("topics.yaml") or _CHECKOUT / "infra" / "topics.yaml"
