"""The interop lane: Java and Go readers and writers against the real contract.

These tests need the example programs built (``make test-interop`` builds them
with Maven and ``go build``, then runs this directory) and a broker. They are
collected only when ``TURNSTREAM_INTEROP=1`` (which ``make test-interop`` sets),
so ``make test``, which collects all of ``tests/``, does not run them a second
time, or fail on a machine that never built the examples.
"""

from __future__ import annotations

import os

import pytest

ENABLE_ENV = "TURNSTREAM_INTEROP"

collect_ignore_glob = [] if os.environ.get(ENABLE_ENV) == "1" else ["test_*.py"]


def pytest_report_header(config: pytest.Config) -> str | None:
    if collect_ignore_glob:
        return f"interop lane off (set {ENABLE_ENV}=1 or run `make test-interop`)"
    return None
