"""The schema-compatibility check CI runs, against committed snapshots.

The current set must read every ``schemas/history/<version>/`` set (full
mode: old readers must read new data too, bar appended union branches). The
check must fail on each change ``schemas/README.md`` forbids and pass on each
it allows — shown on deliberate mutations of a copy of the current set.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.unit.wire.golden import SCHEMA_DIR

from turnstream.wire.compat import Mode, check_sets, load_git_set, main
from turnstream.wire.schemas import NAMESPACE, load_topic_schemas

HISTORY = sorted(p for p in (SCHEMA_DIR / "history").iterdir() if p.is_dir())
CURRENT = load_topic_schemas(SCHEMA_DIR, "current")


@pytest.mark.parametrize("old_dir", HISTORY, ids=lambda p: p.name)
def test_current_set_reads_every_history_snapshot(old_dir: Path) -> None:
    report = check_sets(
        load_topic_schemas(old_dir, old_dir.name),
        CURRENT,
        mode=Mode.FULL,
        fixtures=old_dir / "fixtures",
    )
    assert report.problems == []
    fixtures = len(list((old_dir / "fixtures").glob("*.bin")))
    assert report.checked >= fixtures + 4 * 32  # samples per topic + fixtures


def test_history_v1_exists_and_pins_the_first_release() -> None:
    assert [p.name for p in HISTORY][:1] == ["v1"]
    assert (SCHEMA_DIR / "history" / "v1" / "topics.json").is_file()


# ---------------------------------------------------------------- mutations


def _copy(scratch_dir: Path) -> Path:
    target = scratch_dir / "new"
    target.mkdir()
    for path in [*SCHEMA_DIR.glob("*.avsc"), SCHEMA_DIR / "topics.json"]:
        shutil.copy(path, target / path.name)
    return target


def _edit(
    name: str, change: Callable[[dict[str, Any]], object]
) -> Callable[[Path], None]:
    def apply(directory: Path) -> None:
        path = directory / f"{NAMESPACE}.{name}.avsc"
        schema = json.loads(path.read_text())
        change(schema)
        path.write_text(json.dumps(schema))

    return apply


def _field(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return next(f for f in schema["fields"] if f["name"] == name)


def _failure_kind(schema: dict[str, Any]) -> dict[str, Any]:
    """The FailureKind enum, defined inline in FailureInfo's ``kind`` field."""
    kind: dict[str, Any] = _field(schema, "kind")["type"]
    return kind


def _add_event_branch(directory: Path) -> None:
    new = {
        "type": "record",
        "name": "ContextMeasured",
        "namespace": NAMESPACE,
        "fields": [{"name": "tokens", "type": "long"}],
    }
    (directory / f"{NAMESPACE}.ContextMeasured.avsc").write_text(json.dumps(new))
    _edit(
        "EventEnvelope",
        lambda s: _field(s, "payload")["type"].append(f"{NAMESPACE}.ContextMeasured"),
    )(directory)


def _rename_usage(*, alias: bool) -> Callable[[Path], None]:
    """Rename the Usage record (file, name and every reference)."""

    def apply(directory: Path) -> None:
        old = directory / f"{NAMESPACE}.Usage.avsc"
        schema = json.loads(old.read_text())
        schema["name"] = "TokenUsage"
        old.unlink()
        for path in directory.glob("*.avsc"):
            text = path.read_text().replace(
                f'"{NAMESPACE}.Usage"', f'"{NAMESPACE}.TokenUsage"'
            )
            path.write_text(text)
        if alias:
            schema["aliases"] = [f"{NAMESPACE}.Usage"]
        (directory / f"{NAMESPACE}.TokenUsage.avsc").write_text(json.dumps(schema))

    return apply


def _swap_first_two(union: list[Any]) -> None:
    union[0], union[1] = union[1], union[0]


INCOMPATIBLE = [
    pytest.param(
        _edit("TurnStarted", lambda s: _field(s, "turn_index").update(type="string")),
        "type changed",
        id="change-type",
    ),
    pytest.param(
        _edit("EventEnvelope", lambda s: _field(s, "payload")["type"].pop(3)),
        "union branches removed",
        id="remove-union-branch",
    ),
    pytest.param(
        _edit("EventEnvelope", lambda s: _swap_first_two(_field(s, "payload")["type"])),
        "reordered",
        id="reorder-union",
    ),
    pytest.param(
        _edit(
            "Header",
            lambda s: s["fields"].append({"name": "trace", "type": "string"}),
        ),
        "added without a default",
        id="add-field-without-default",
    ),
    pytest.param(
        _edit("TextBlock", lambda s: s["fields"].clear()),
        "removed without a default",
        id="remove-field-without-default",
    ),
    pytest.param(
        _edit("TurnStarted", lambda s: _field(s, "turn_index").update(name="index")),
        "added without a default",
        id="rename-field-without-alias",
    ),
    pytest.param(
        _edit("FailureInfo", lambda s: _failure_kind(s)["symbols"].remove("provider")),
        "enum symbols removed",
        id="remove-enum-symbol",
    ),
    pytest.param(
        _edit("FailureInfo", lambda s: _failure_kind(s).pop("default")),
        "enum has no default",
        id="enum-without-default",
    ),
    pytest.param(
        _edit("GateOpened", lambda s: _field(s, "gate_id").update(type="string")),
        "logical type changed",
        id="drop-logical-type",
    ),
    pytest.param(
        _rename_usage(alias=False), "renamed", id="rename-record-without-alias"
    ),
    pytest.param(
        _edit("TurnRejected", lambda s: _field(s, "reason").update(type="string")),
        "type changed",
        id="enum-to-string",
    ),
]


@pytest.mark.parametrize(("mutate", "expected"), INCOMPATIBLE)
def test_check_fails_on_incompatible_changes(
    scratch_dir: Path, mutate: Callable[[Path], None], expected: str
) -> None:
    directory = _copy(scratch_dir)
    mutate(directory)
    report = check_sets(CURRENT, load_topic_schemas(directory, "new"))
    assert report.problems, "the mutation was not detected"
    assert any(expected in p.message for p in report.problems), report.problems


COMPATIBLE = [
    pytest.param(
        _edit(
            "Header",
            lambda s: s["fields"].append(
                {"name": "trace", "type": "string", "default": ""}
            ),
        ),
        Mode.FULL,
        id="add-field-with-default",
    ),
    pytest.param(_add_event_branch, Mode.FULL, id="append-union-branch"),
    pytest.param(
        _edit(
            "FailureInfo",
            lambda s: _failure_kind(s)["symbols"].append("context_limit"),
        ),
        Mode.FULL,
        id="append-enum-symbol",
    ),
    pytest.param(
        _edit("LoopStarted", lambda s: s["fields"].pop()),
        Mode.FULL,
        id="remove-field-with-default",
    ),
    pytest.param(
        _edit("TurnStarted", lambda s: s.update(doc="changed docs")),
        Mode.FULL,
        id="edit-doc",
    ),
    pytest.param(
        _edit(
            "TurnStarted",
            lambda s: _field(s, "turn_index").update(
                name="index", aliases=["turn_index"]
            ),
        ),
        Mode.BACKWARD,
        id="rename-field-with-alias-backward",
    ),
    pytest.param(
        _rename_usage(alias=True), Mode.BACKWARD, id="rename-record-with-alias"
    ),
]


@pytest.mark.parametrize(("mutate", "mode"), COMPATIBLE)
def test_check_passes_allowed_changes(
    scratch_dir: Path, mutate: Callable[[Path], None], mode: Mode
) -> None:
    directory = _copy(scratch_dir)
    mutate(directory)
    report = check_sets(CURRENT, load_topic_schemas(directory, "new"), mode=mode)
    assert report.problems == []
    assert report.checked > 0


def test_dynamic_read_catches_what_it_reads(scratch_dir: Path) -> None:
    """Old records really are read across: the sample reader reports failures."""
    directory = _copy(scratch_dir)
    _edit("Cause", lambda s: _field(s, "agency").update(type="string"))(directory)
    report = check_sets(CURRENT, load_topic_schemas(directory, "new"))
    assert any(p.path.startswith("sample") for p in report.problems)


# ---------------------------------------------------------------- the CLI


def test_cli_exit_status(scratch_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--schemas", str(SCHEMA_DIR), "--no-git"]) == 0
    assert "ok current reads" in capsys.readouterr().out

    broken = _copy(scratch_dir)
    _edit("TurnStarted", lambda s: _field(s, "turn_index").update(type="string"))(
        broken
    )
    status = main(
        [
            "--schemas",
            str(broken),
            "--no-git",
            "--against",
            str(SCHEMA_DIR / "history" / "v1"),
        ]
    )
    assert status == 1
    assert "INCOMPATIBLE" in capsys.readouterr().out


def test_cli_snapshot_freezes_the_current_set(scratch_dir: Path) -> None:
    directory = _copy(scratch_dir)
    assert main(["--schemas", str(directory), "snapshot", "v9"]) == 0
    frozen = directory / "history" / "v9"
    assert (frozen / "topics.json").is_file()
    assert main(["--schemas", str(directory), "--no-git"]) == 0
    with pytest.raises(FileExistsError):
        main(["--schemas", str(directory), "snapshot", "v9"])


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(  # noqa: S603 - fixed argv, no shell
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],  # noqa: S607
        cwd=cwd,
        check=True,
        capture_output=True,
    )


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_base_is_compared(
    scratch_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--base REF`` reads the committed set with ``git show`` and compares."""
    repo = scratch_dir / "repo"
    schemas = repo / "schemas"
    schemas.mkdir(parents=True)
    for path in [*SCHEMA_DIR.glob("*.avsc"), SCHEMA_DIR / "topics.json"]:
        shutil.copy(path, schemas / path.name)
    _git(repo, "init", "-q")
    assert load_git_set(schemas, "HEAD") is None  # no commit yet
    _git(repo, "add", "schemas")
    _git(repo, "commit", "-q", "-m", "schemas")
    loaded = load_git_set(schemas, "HEAD")
    assert loaded is not None
    old, tmp = loaded
    shutil.rmtree(tmp)
    assert {s.fingerprint for s in old.values()} == {
        s.fingerprint for s in CURRENT.values()
    }

    _edit("EventEnvelope", lambda s: _field(s, "payload")["type"].pop(0))(schemas)
    assert main(["--schemas", str(schemas), "--base", "HEAD"]) == 1
    assert "INCOMPATIBLE current vs git HEAD" in capsys.readouterr().out
