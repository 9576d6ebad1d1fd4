"""Fixtures of the wire tests: the loaded codec and ``--update-golden``.

``--update-golden`` is recognised when pytest is pointed at this directory
(``pytest tests/unit/wire --update-golden``), because pytest reads options
only from conftests it loads before parsing the command line. From anywhere
else, set ``TURNSTREAM_UPDATE_GOLDEN=1``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.unit.wire.golden import SCHEMA_DIR

from turnstream.wire import Codec, SchemaSet

UPDATE_GOLDEN_ENV = "TURNSTREAM_UPDATE_GOLDEN"


def pytest_addoption(parser: pytest.Parser) -> None:
    # A higher conftest may register the option too; then that one is used.
    with contextlib.suppress(ValueError):
        parser.addoption(
            "--update-golden",
            action="store_true",
            default=False,
            help="rewrite schemas/fixtures from the golden builders",
        )


@pytest.fixture(scope="session")
def update_golden(request: pytest.FixtureRequest) -> bool:
    """Whether golden fixtures are rewritten instead of compared."""
    flag = request.config.getoption("--update-golden", default=False)
    return bool(flag) or os.environ.get(UPDATE_GOLDEN_ENV, "") == "1"


@pytest.fixture(scope="session")
def schema_set() -> SchemaSet:
    """The repository's schema set (current plus history), loaded once."""
    return SchemaSet.load(SCHEMA_DIR)


@pytest.fixture(scope="session")
def codec(schema_set: SchemaSet) -> Codec:
    """A codec over the repository's schemas with the default limit."""
    return Codec(schema_set)


@pytest.fixture
def scratch_dir() -> Iterator[Path]:
    """A private temporary directory, removed after the test.

    Used instead of ``tmp_path``: pytest rotates its numbered base directories
    across sessions, so parallel pytest runs on one machine can delete a
    running session's ``tmp_path``.
    """
    path = Path(tempfile.mkdtemp(prefix="ts-wire-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
