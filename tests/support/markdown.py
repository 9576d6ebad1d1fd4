"""What the docs tests read from a Markdown file: fenced blocks, headings, links.

A small reader of the subset the project's Markdown uses (GitHub-flavoured):
backtick fences, ATX headings, inline links. Anchors are GitHub's: the heading's
text lowercased, punctuation but ``-`` and ``_`` dropped, spaces made ``-``, and
``-1``, ``-2``, … appended to repeats.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_FENCE = re.compile(r"^(`{3,})(\S*)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_CODE_SPAN = re.compile(r"(`+).*?\1")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_INLINE_LINK_TEXT = re.compile(r"\[([^\]]*)\]\([^)]*\)")


@dataclass(frozen=True)
class Block:
    """A fenced code block: its info string, body and the line just above it."""

    path: Path
    line: int
    language: str
    body: str
    above: str


@dataclass(frozen=True)
class Link:
    """An inline link's target as written, and where it is."""

    path: Path
    line: int
    target: str


def documents() -> list[Path]:
    """The files whose links and samples the docs tests hold: README and docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def linking_documents() -> list[Path]:
    """The files whose links the docs tests hold: those and the READMEs that
    point into docs/.
    """
    return [
        *documents(),
        ROOT / "schemas" / "README.md",
        ROOT / "services" / "turnstream" / "analytics" / "README.md",
    ]


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fenced blocks."""
    out: list[tuple[int, str]] = []
    fence = ""
    for number, line in enumerate(text.splitlines(), 1):
        match = _FENCE.match(line)
        if fence:
            if match and match.group(1).startswith(fence) and not match.group(2):
                fence = ""
            continue
        if match:
            fence = match.group(1)
            continue
        out.append((number, line))
    return out


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a file, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    index = 0
    while index < len(lines):
        match = _FENCE.match(lines[index])
        if not match:
            index += 1
            continue
        fence, language = match.groups()
        end = index + 1
        while end < len(lines) and lines[end].rstrip() != fence:
            end += 1
        above = lines[index - 1] if index else ""
        body = "\n".join(lines[index + 1 : end])
        out.append(Block(path, index + 1, language, body, above))
        index = end + 1
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (before repeats are numbered)."""
    text = _INLINE_LINK_TEXT.sub(r"\1", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a file, repeats numbered as GitHub does."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, line in _prose_lines(path.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(path: Path) -> list[Link]:
    """Every inline link outside code (fences and code spans); a link's text
    may run over a line break.
    """
    text = path.read_text(encoding="utf-8")
    prose = dict(_prose_lines(text))
    kept = [
        _CODE_SPAN.sub("", prose[number]) if number in prose else ""
        for number in range(1, len(text.splitlines()) + 1)
    ]
    joined = "\n".join(kept)
    return [
        Link(path, joined.count("\n", 0, m.start()) + 1, m.group(1))
        for m in _LINK.finditer(joined)
    ]
