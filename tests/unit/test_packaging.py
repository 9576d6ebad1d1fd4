"""Packaging: the wheel carries the wire contract, and the CLI reports the version.

The schema directory and the topic set are package data mapped from their one
source in the tree, so the wheel's copy is byte-identical to the checkout's.
Where a C compiler is, the wheel also carries the codec's extension, where
the package imports it from.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import hatch_build
import pytest
from typer.testing import CliRunner

import turnstream
from turnstream import resources
from turnstream.cli.main import app

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m build``: the sdist, then the wheel built from the sdist."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(  # noqa: S603 - our own interpreter and checkout
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=110,
    )
    (built,) = out.glob("turnstream-*.whl")
    return built


@pytest.mark.slow
def test_wheel_carries_the_codec_extension_beside_its_plans(wheel: Path) -> None:
    """The build hook puts ``_native`` where ``wire/_accel/native_plan`` loads it."""
    if hatch_build.compiler() is None:
        pytest.skip("no C compiler here: the wheel is pure Python")
    suffix = str(sysconfig.get_config_var("EXT_SUFFIX"))
    with zipfile.ZipFile(wheel) as archive:
        built = [n for n in archive.namelist() if n.endswith(suffix)]
    assert built == [f"turnstream/wire/_accel/_native{suffix}"]


@pytest.mark.slow
def test_wheel_carries_every_schema_file_and_the_topic_set(wheel: Path) -> None:
    """Every ``schemas/`` file and ``infra/topics.yaml`` is in the wheel, same bytes."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        expected = {
            f"turnstream/_data/schemas/{p.relative_to(ROOT / 'schemas').as_posix()}": p
            for p in (ROOT / "schemas").rglob("*")
            if p.is_file()
        }
        expected["turnstream/_data/topics.yaml"] = ROOT / "infra" / "topics.yaml"
        missing = sorted(set(expected) - names)
        assert not missing, missing[:5]
        for name, source in expected.items():
            assert archive.read(name) == source.read_bytes(), name
        assert "turnstream/py.typed" in names


def test_checkout_resources_are_the_tree_files(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Editable install: the checkout's files; the setting overrides the schemas."""
    monkeypatch.delenv(resources.SCHEMA_DIR_ENV, raising=False)
    assert resources.schema_dir() == ROOT / "schemas"
    assert resources.topic_set_file() == ROOT / "infra" / "topics.yaml"
    assert resources.schema_dir("/elsewhere") == Path("/elsewhere")


def test_cli_version_prints_the_installed_version() -> None:
    """``turnstream --version`` prints the distribution's version."""
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"turnstream {turnstream.__version__}"
    assert turnstream.__version__ != "0+unknown"


def _image_build_inputs(dockerfile: str) -> set[str]:
    """The sources the Dockerfile copies before its first ``pip`` build step."""
    copied: set[str] = set()
    for raw in dockerfile.splitlines():
        line = raw.strip()
        if line.startswith("RUN pip"):
            return copied
        if line.startswith("COPY ") and "--from=" not in line:
            *sources, _target = line.split()[1:]
            copied.update(s.rstrip("/") for s in sources)
    raise AssertionError("the Dockerfile never builds the package")


def test_the_image_copies_every_build_input_before_it_builds() -> None:
    """``infra/Dockerfile`` builds the wheel from what pyproject says it is made of:
    the package, the build hook, and every force-included path."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    hatch = config["tool"]["hatch"]["build"]
    needed = {"pyproject.toml", config["project"]["readme"]}
    needed.update(hatch["targets"]["wheel"]["packages"])
    needed.update(hatch["targets"]["wheel"]["force-include"])
    needed.update(hook["path"] for hook in hatch.get("hooks", {}).values())
    copied = _image_build_inputs(
        (ROOT / "infra" / "Dockerfile").read_text(encoding="utf-8")
    )

    def covered(path: str) -> bool:
        return any(path == c or path.startswith(f"{c}/") for c in copied)

    missing = sorted(p for p in needed if not covered(p))
    assert not missing, f"infra/Dockerfile builds without {missing}"
