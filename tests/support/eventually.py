"""``assert_eventually``: the one sanctioned way for a test to wait.

Tests never ``sleep``; they state a condition and let this helper poll it until it
holds or the deadline passes, then fail with the last assertion's message.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

__all__ = ["assert_eventually"]

T = TypeVar("T")


@overload
async def assert_eventually(
    fn: Callable[[], Awaitable[T]],
    *,
    timeout: float = ...,
    interval: float = ...,
    message: str = ...,
) -> T: ...


@overload
async def assert_eventually(
    fn: Callable[[], T],
    *,
    timeout: float = ...,
    interval: float = ...,
    message: str = ...,
) -> T: ...


async def assert_eventually(
    fn: Callable[[], Any],
    *,
    timeout: float = 10.0,
    interval: float = 0.1,
    message: str = "condition did not hold",
) -> Any:
    """Call ``fn`` until it passes; return its result.

    An attempt passes when ``fn`` (sync or async) neither raises ``AssertionError``
    nor returns ``False``. Each async attempt is bounded by the time left, so a
    hanging call cannot overrun the deadline. Other exceptions propagate at once.

    Args:
        fn: the check; raise ``AssertionError`` (or return ``False``) while unmet.
        timeout: seconds before giving up.
        interval: seconds between attempts.
        message: prefix of the failure message.

    Raises:
        AssertionError: the check still failed at the deadline (the last failure is
            chained and quoted).
    """
    deadline = time.monotonic() + timeout
    attempts = 0
    last: AssertionError | None = None
    while True:
        attempts += 1
        remaining = deadline - time.monotonic()
        try:
            outcome = fn()
            if inspect.isawaitable(outcome):
                async with asyncio.timeout(max(remaining, 0.001)):
                    outcome = await outcome
            if outcome is False:
                raise AssertionError("check returned False")
            return outcome
        except AssertionError as exc:
            last = exc
        except TimeoutError:
            last = AssertionError(
                f"attempt still running at the {timeout:g} s deadline"
            )
        if time.monotonic() + interval > deadline:
            break
        await asyncio.sleep(interval)
    raise AssertionError(
        f"{message} within {timeout:g} s ({attempts} attempts); last failure: {last}"
    ) from last
