"""The stream cursor's text form: short, URL-safe, exact, and refused when malformed."""

from __future__ import annotations

import re

import pytest

from turnstream.errors import InvalidCursorError
from turnstream.kafka.client import Cursor


@pytest.mark.parametrize(
    "cursor",
    [
        pytest.param(Cursor(0, 0, 0), id="start"),
        pytest.param(Cursor(3, 26, 63, "d"), id="delta"),
        pytest.param(Cursor(11, 2**40, 2**33, "e"), id="large-offsets"),
    ],
)
def test_cursor_round_trips_through_its_text(cursor: Cursor) -> None:
    text = cursor.encode()
    assert re.fullmatch(r"[A-Za-z0-9_-]+", text)
    assert Cursor.decode(text) == cursor


def test_cursor_text_and_offset() -> None:
    """Text: ``<kind><partition>-<events>-<deltas>`` in hex; offset: the item's own."""
    assert Cursor(3, 26, 63, "d").encode() == "d3-1a-3f"
    assert Cursor(3, 26, 63, "d").offset == 62
    assert Cursor(3, 26, 63, "e").offset == 25
    assert Cursor(3, 26, 63).offset is None


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("x1-2-3", id="kind"),
        pytest.param("d1-2", id="short"),
        pytest.param("d1-2-3-4", id="long"),
        pytest.param("d1--2-3", id="negative"),
        pytest.param("d1-zz-3", id="not-hex"),
    ],
)
def test_malformed_cursor_is_refused(text: str) -> None:
    with pytest.raises(InvalidCursorError) as refused:
        Cursor.decode(text)
    assert refused.value.reason == "malformed"
    assert refused.value.kind == "invalid_cursor"
