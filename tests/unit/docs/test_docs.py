"""README.md and docs/: every relative link resolves, every sample is accounted for.

- A relative link (here, and in the READMEs of schemas/ and analytics/) names a
  file or directory of the tree, and its ``#anchor`` a heading of that file
  (GitHub's anchors). Links to other sites are not fetched.
- A ``python``, ``py``, ``bash``, ``sh``, ``shell`` or ``console`` block has a
  marker on the line above it: ``<!-- run by PATH … -->`` where PATH (a test, or
  ``.ci/run``) names the document it runs the block from, or
  ``<!-- illustrative: why -->`` for a block no test runs as written (one that
  needs a secured broker, a Jaeger, an installation).
- The README's quick start shows ``make test``, the command ``.ci/run`` runs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.support.markdown import (
    ROOT,
    Block,
    anchors,
    blocks,
    documents,
    linking_documents,
    links,
)

SAMPLE_LANGUAGES = frozenset({"python", "py", "bash", "sh", "shell", "console"})
_RUN_BY = re.compile(r"^<!-- run by (\S+?)[:;,]?(?:\s.*)? -->$")
_ILLUSTRATIVE = re.compile(r"^<!-- illustrative: \S.* -->$")

GENERATED_ELSEWHERE = frozenset({ROOT / "docs" / "settings.md"})
"""Targets written by the settings reference generator: checked once present."""


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _ids(paths: list[Path]) -> list[str]:
    return [_name(p) for p in paths]


def test_the_guides_exist() -> None:
    names = {p.name for p in documents()}
    for guide in (
        "agents.md",
        "client.md",
        "analytics.md",
        "operations.md",
        "security.md",
        "cluster.md",
        "performance.md",
        "development.md",
    ):
        assert guide in names


@pytest.mark.parametrize("path", linking_documents(), ids=_ids(linking_documents()))
def test_every_relative_link_and_anchor_resolves(path: Path) -> None:
    broken: list[str] = []
    for link in links(path):
        if re.match(r"^[a-z][a-z+.-]*:", link.target):  # https:, mailto:, …
            continue
        file_part, _, anchor = link.target.partition("#")
        target = (path.parent / file_part).resolve() if file_part else path
        where = f"{_name(path)}:{link.line} -> {link.target}"
        if not target.exists():
            if target not in GENERATED_ELSEWHERE:
                broken.append(f"{where}: no such file")
            continue
        if anchor and anchor not in anchors(target):
            broken.append(f"{where}: no heading with that anchor")
    assert not broken, "\n".join(broken)


def _samples() -> list[Block]:
    return [b for p in documents() for b in blocks(p) if b.language in SAMPLE_LANGUAGES]


@pytest.mark.parametrize(
    "block", _samples(), ids=[f"{_name(b.path)}:{b.line}" for b in _samples()]
)
def test_every_sample_is_run_by_a_test_or_marked_illustrative(block: Block) -> None:
    if _ILLUSTRATIVE.match(block.above):
        return
    run_by = _RUN_BY.match(block.above)
    assert run_by, (
        f"{_name(block.path)}:{block.line}: a {block.language} block needs "
        "'<!-- run by PATH -->' or '<!-- illustrative: why -->' on the line above"
    )
    runner = ROOT / run_by.group(1)
    assert runner.is_file(), f"{_name(block.path)}:{block.line}: no {runner}"
    document = "README" if block.path.name == "README.md" else _name(block.path)
    assert document in runner.read_text(encoding="utf-8"), (
        f"{_name(runner)} does not read {document}"
    )


def test_the_quick_start_shows_the_test_command_ci_runs() -> None:
    (quick_start,) = [
        b for b in blocks(ROOT / "README.md") if b.body.startswith("make demo")
    ]
    assert re.search(r"^make test\b", quick_start.body, re.MULTILINE)
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^make --no-print-directory test$", ci, re.MULTILINE)


def test_the_anchor_reader_numbers_repeats_as_github_does(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# A `code` title: with, punctuation\n\n## Metrics (`/metrics`)\n\n"
        "```sh\n# not a heading\n```\n\n## Notes\n\n## Notes\n",
        encoding="utf-8",
    )
    assert anchors(page) == {
        "a-code-title-with-punctuation",
        "metrics-metrics",
        "notes",
        "notes-1",
    }
