"""The observability package's table of contents."""

from __future__ import annotations

from turnstream import observability


def test_observability_all_names_resolve() -> None:
    """__all__ is a table of contents: every name exists, sorted, none private."""
    for name in observability.__all__:
        assert hasattr(observability, name), name
        assert not name.startswith("_")
    assert observability.__all__ == sorted(observability.__all__)
