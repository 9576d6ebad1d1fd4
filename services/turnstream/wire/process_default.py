"""One process-wide default value, built on first use unless installed first.

Owns :class:`ProcessDefault`, the holder behind ``default_codec`` and
``default_analytics_codec``: composition roots install a value built from the
configured schema directory, and anything that asks before that gets one
built by the holder's loader (the checkout's ``schemas/``). Pure: imports
nothing of the project.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["ProcessDefault"]

_T = TypeVar("_T")


class ProcessDefault(Generic[_T]):
    """The installed value, or the one ``load`` builds when none is installed."""

    def __init__(self, load: Callable[[], _T]) -> None:
        self._load = load
        self._value: _T | None = None

    def install(self, value: _T | None) -> None:
        """Use ``value`` from now on (``None`` resets: the next ``get`` loads)."""
        self._value = value

    def get(self) -> _T:
        """The installed value, loading (and keeping) one if there is none.

        Raises:
            whatever ``load`` raises; nothing is kept then.
        """
        if self._value is None:
            self._value = self._load()
        return self._value
