"""No class of the package grows past ~400 lines without saying why.

A class that large usually holds more than one responsibility; the house rule
is to split it, or to say in its docstring why it stays whole (a sentence
such as "Over 400 lines on purpose: ..."). The check reads the source, so it
runs in the unit lane.
"""

from __future__ import annotations

import ast
from pathlib import Path

import turnstream

LIMIT = 400
"""Lines of a class (decorators excluded) before it must explain its size."""

MARK = "lines on purpose"
"""How a docstring says why its class stays whole."""

PACKAGE = Path(turnstream.__file__).resolve().parent


def _classes() -> list[tuple[str, int, str]]:
    found: list[tuple[str, int, str]] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                doc = ast.get_docstring(node) or ""
                name = f"{path.relative_to(PACKAGE)}:{node.name}"
                found.append((name, lines, doc))
    return found


def test_the_package_has_classes_to_check() -> None:
    assert len(_classes()) > 100


def test_no_class_over_the_limit_without_a_reason_in_its_docstring() -> None:
    unexplained = [
        f"{name} ({lines} lines)"
        for name, lines, doc in _classes()
        if lines > LIMIT and MARK not in " ".join(doc.split())
    ]
    assert unexplained == []
