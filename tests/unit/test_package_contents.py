"""House style: every package ``__init__`` is a table of contents.

Each package opens with a docstring saying what it owns, and its ``__all__`` lists
every name it exports exactly once, in ruff's order (constants, classes, then
functions), each of which resolves.
"""

from __future__ import annotations

import importlib

import pytest

PACKAGES = (
    "turnstream.runtime",
    "turnstream.memory",
    "turnstream.testing",
    "turnstream.wire",
    "turnstream.models",
    "turnstream.observability",
    "turnstream.kafka",
    "turnstream.kafka.actor",
    "turnstream.kafka.client",
    "turnstream.kafka.admin",
    "turnstream.loop_actor",
    "turnstream.devbroker",
    "turnstream.client",
)


def _ruff_order(name: str) -> tuple[int, str]:
    if name.isupper():
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


@pytest.mark.parametrize("name", PACKAGES)
def test_package_init_is_a_table_of_contents(name: str) -> None:
    """Docstring present; ``__all__`` unique, in order, and every name resolves."""
    package = importlib.import_module(name)
    assert (package.__doc__ or "").strip(), f"{name} has no docstring"
    names = list(package.__all__)
    assert len(set(names)) == len(names), f"{name}.__all__ repeats a name"
    assert names == sorted(names, key=_ruff_order), f"{name}.__all__ is not sorted"
    for exported in names:
        assert not exported.startswith("_")
        assert getattr(package, exported) is not None
