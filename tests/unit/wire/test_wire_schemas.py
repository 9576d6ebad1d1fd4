"""The .avsc files and the Python value types describe the same contract.

Pins, both ways: every Python event/command class has its record in the right
envelope union and every union branch has its class; every record's fields
match the model's fields (names, optionality, defaults); every enum's
symbols match its StrEnum and carry a default; the set loads, is bounded and
has no orphan files.
"""

from __future__ import annotations

import json
import shutil
import types
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest
from pydantic import BaseModel
from tests.unit.wire.golden import SCHEMA_DIR

from turnstream import commands, content, events, state
from turnstream.commands import CommandBase
from turnstream.errors import ConfigError
from turnstream.events import (
    ENDURING_EVENT_TYPES,
    EPHEMERAL_EVENT_TYPES,
    EVENT_TYPES,
    AnyEvent,
    EnduringEvent,
    EphemeralEvent,
)
from turnstream.wire import SchemaSet, Topic
from turnstream.wire.schemas import (
    NAMESPACE,
    fingerprint_of,
    load_schema_file,
    load_topic_schemas,
)

MANIFEST = json.loads((SCHEMA_DIR / "topics.json").read_text())


def avsc(name: str) -> dict[str, Any]:
    """The raw JSON of ``turnstream.v1.<name>.avsc``."""
    path = SCHEMA_DIR / f"{NAMESPACE}.{name}.avsc"
    return json.loads(path.read_text())


def _definitions(schema: object) -> list[dict[str, Any]]:
    """Every named type a schema defines, nested definitions included."""
    found: list[dict[str, Any]] = []
    if isinstance(schema, list):
        for branch in schema:
            found += _definitions(branch)
    elif isinstance(schema, dict):
        if schema.get("type") in ("record", "enum", "fixed"):
            found.append(schema)
        for field in schema.get("fields", []):
            found += _definitions(field["type"])
        for key in ("items", "values"):
            found += _definitions(schema.get(key))
        if isinstance(schema.get("type"), (dict, list)):
            found += _definitions(schema["type"])
    return found


def named(name: str) -> dict[str, Any]:
    """The definition of ``turnstream.v1.<name>``, in its own file or nested."""
    for path in sorted(SCHEMA_DIR.glob("*.avsc")):
        for schema in _definitions(json.loads(path.read_text())):
            if schema["name"] == name:
                return schema
    raise AssertionError(f"{name} is defined nowhere")


def fields_of(name: str) -> dict[str, dict[str, Any]]:
    return {f["name"]: f for f in avsc(name)["fields"]}


def branch_names(name: str, field: str) -> list[str]:
    union = fields_of(name)[field]["type"]
    if isinstance(union, dict):
        union = union["items"]
    return [b.rpartition(".")[2] for b in union]


COMMAND_TYPES = (
    commands.SubmitInput,
    commands.Interrupt,
    commands.RespondGate,
    commands.Retract,
    commands.Shutdown,
    commands.DeleteLoop,
)

# ---------------------------------------------------------------- unions


def test_event_envelope_union_is_exactly_the_enduring_events() -> None:
    """Journal union ↔ ENDURING_EVENT_TYPES, both ways and in declared order."""
    assert branch_names("EventEnvelope", "payload") == [
        t.__name__ for t in ENDURING_EVENT_TYPES
    ]


def test_delta_envelope_union_is_exactly_the_ephemeral_events() -> None:
    """Deltas union ↔ EPHEMERAL_EVENT_TYPES; no ephemeral record in the journal."""
    deltas = branch_names("DeltaEnvelope", "payload")
    assert set(deltas) == {t.__name__ for t in EPHEMERAL_EVENT_TYPES}
    assert not set(deltas) & set(branch_names("EventEnvelope", "payload"))


def test_every_event_type_has_a_record_in_exactly_one_envelope() -> None:
    journal = set(branch_names("EventEnvelope", "payload"))
    deltas = set(branch_names("DeltaEnvelope", "payload"))
    for event_type in EVENT_TYPES:
        name = event_type.__name__
        assert (name in journal) != (name in deltas), name
        assert (name in journal) is (event_type in ENDURING_EVENT_TYPES), name


def test_python_unions_agree_with_type_tuples() -> None:
    """The alias unions list the same classes as the runtime tuples."""
    assert set(get_args(AnyEvent)) == set(EVENT_TYPES)
    assert set(get_args(EnduringEvent)) == set(ENDURING_EVENT_TYPES)
    assert set(get_args(EphemeralEvent)) == set(EPHEMERAL_EVENT_TYPES)


def test_command_envelope_union_is_exactly_the_commands() -> None:
    assert set(get_args(commands.AnyCommand)) == set(COMMAND_TYPES)
    assert set(CommandBase.__subclasses__()) == set(COMMAND_TYPES)
    assert branch_names("CommandEnvelope", "payload") == [
        t.__name__ for t in COMMAND_TYPES
    ]


def _union_members(alias: Any) -> list[str]:
    args = get_args(alias)
    if args and get_origin(alias) is not types.UnionType and len(args) >= 1:
        # Annotated[Union, Field]: the first argument is the union.
        inner = get_args(args[0])
        if inner:
            args = inner
    return sorted(a.__name__ for a in args)


@pytest.mark.parametrize(
    ("record", "field", "alias"),
    [
        pytest.param("UserMessage", "blocks", content.Block, id="blocks"),
        pytest.param(
            "ToolResultBlock", "content", content.ToolResultContent, id="result"
        ),
        pytest.param("TokenDelta", "chunk", content.Chunk, id="chunks"),
        pytest.param("LoopState", "messages", content.Conversation, id="history"),
    ],
)
def test_content_unions_match(record: str, field: str, alias: Any) -> None:
    assert sorted(branch_names(record, field)) == _union_members(alias)


def test_step_group_union_is_ai_then_tool_results() -> None:
    assert branch_names("StepDone", "messages") == ["AIMessage", "ToolResultMessage"]


# ------------------------------------------------------------------ fields

_EVENT_RECORDS = [(t.__name__, t, {"header", "type"}) for t in EVENT_TYPES]
_COMMAND_BASE = set(CommandBase.model_fields)
_COMMAND_RECORDS = [(t.__name__, t, _COMMAND_BASE | {"type"}) for t in COMMAND_TYPES]
_VALUE_RECORDS = [
    (name, cls, {"type", "role"})
    for name, cls in [
        ("TextBlock", content.TextBlock),
        ("RefusalBlock", content.RefusalBlock),
        ("ImageBlock", content.ImageBlock),
        ("ThinkingBlock", content.ThinkingBlock),
        ("ToolUseBlock", content.ToolUseBlock),
        ("ToolResultBlock", content.ToolResultBlock),
        ("TextChunk", content.TextChunk),
        ("RefusalChunk", content.RefusalChunk),
        ("ThinkingChunk", content.ThinkingChunk),
        ("ToolUseChunk", content.ToolUseChunk),
        ("ImageChunk", content.ImageChunk),
        ("UserMessage", content.UserMessage),
        ("AIMessage", content.AIMessage),
        ("ToolResultMessage", content.ToolResultMessage),
        ("Usage", content.Usage),
        ("FailureInfo", events.FailureInfo),
        ("Header", events.Header),
        ("Cause", events.Cause),
        ("OpenTurn", state.OpenTurn),
        ("LoopState", state.LoopState),
    ]
]


def _allows_none(annotation: Any) -> bool:
    return type(None) in get_args(annotation)


def _as_avro_default(value: Any) -> Any:
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, tuple):
        return [_as_avro_default(v) for v in value]
    if isinstance(value, BaseModel):
        return {k: _as_avro_default(v) for k, v in value.model_dump().items()}
    return value


@pytest.mark.parametrize(
    ("record", "model", "skip"),
    [
        pytest.param(*r, id=r[0])
        for r in _EVENT_RECORDS + _COMMAND_RECORDS + _VALUE_RECORDS
    ],
)
def test_record_fields_match_model(
    record: str, model: type[BaseModel], skip: set[str]
) -> None:
    """Same field names; optional ⇔ nullable; default ⇔ Avro default, equal."""
    avro = fields_of(record)
    python = {n: f for n, f in model.model_fields.items() if n not in skip}
    assert list(avro) == list(python), "field names (and order) differ"
    for name, info in python.items():
        spec = avro[name]
        nullable = isinstance(spec["type"], list) and "null" in spec["type"]
        assert nullable == _allows_none(info.annotation), f"{name}: optionality"
        assert ("default" not in spec) == info.is_required(), f"{name}: default"
        if "default" in spec:
            assert spec["default"] == _as_avro_default(info.default), f"{name}"


def test_command_envelope_carries_the_command_base() -> None:
    avro = fields_of("CommandEnvelope")
    assert list(avro) == [*CommandBase.model_fields, "payload"]
    assert avro["agency"]["default"] == CommandBase.model_fields["agency"].default.value


# ------------------------------------------------------------------- enums

_ENUMS = [
    ("Agency", [m.value for m in events.Agency]),
    ("RejectReason", [m.value for m in events.RejectReason]),
    ("CancelReason", [m.value for m in events.CancelReason]),
    ("GateCloseReason", [m.value for m in events.GateCloseReason]),
    ("FailureKind", [m.value for m in events.FailureKind]),
    (
        "PermissionEffect",
        list(get_args(events.PermissionDecided.model_fields["effect"].annotation)),
    ),
]


@pytest.mark.parametrize(
    ("name", "values"), [pytest.param(*e, id=e[0]) for e in _ENUMS]
)
def test_enum_symbols_match_python_values(name: str, values: list[str]) -> None:
    """Symbols equal the StrEnum values, in order, and a default is declared."""
    schema = named(name)
    assert schema["symbols"] == values
    assert schema["default"] in schema["symbols"]


def test_failure_kind_defaults_to_unknown() -> None:
    """Old readers map a failure kind they do not know to 'unknown'."""
    assert named("FailureKind")["default"] == events.FailureKind.UNKNOWN.value


def test_every_enum_in_the_set_has_a_default() -> None:
    for path in SCHEMA_DIR.glob("*.avsc"):
        for schema in _definitions(json.loads(path.read_text())):
            if schema["type"] == "enum":
                assert "default" in schema, f"{schema['name']} in {path.name}"


# Enums whose fallback is a real symbol on purpose: a reader that meets an
# unknown value must act fail-secure, not guess.
_FAIL_SECURE_DEFAULTS = {"Agency": "machine", "PermissionEffect": "deny"}


@pytest.mark.parametrize("name", [pytest.param(e[0], id=e[0]) for e in _ENUMS])
def test_enum_default_means_unknown_unless_fail_secure(name: str) -> None:
    """An unknown symbol never reads as a real-looking reason."""
    default = named(name)["default"]
    assert default == _FAIL_SECURE_DEFAULTS.get(name, default)
    if name not in _FAIL_SECURE_DEFAULTS:
        assert default in ("unknown", "unspecified")


def test_enum_field_defaults_refer_only_to_earlier_files() -> None:
    """Avro's multi-file parser accepts the fragments in file-name order.

    Java's ``SchemaParser`` (Avro 1.12.0 to 1.12.2) checks a field default
    when it reads the field: an enum default on a field typed by an enum of a
    file not read yet is refused ("Invalid default for field kind"). A record
    default against a not-yet-read record passes. Name order is the natural
    order, so every enum-typed field with a default names an enum whose file
    sorts earlier (or defines it inline).
    """
    paths = sorted(SCHEMA_DIR.glob("*.avsc"))
    order = {p.name.removesuffix(".avsc"): i for i, p in enumerate(paths)}
    enums = {
        name
        for name, path in zip(order, paths, strict=True)
        if json.loads(path.read_text())["type"] == "enum"
    }
    for i, path in enumerate(paths):
        for schema in _definitions(json.loads(path.read_text())):
            for field in schema.get("fields", []):
                kind = field["type"]
                if "default" in field and isinstance(kind, str) and kind in enums:
                    assert order[kind] < i, f"{path.name}: {field['name']} -> {kind}"


def test_permission_effect_literal_is_what_the_model_accepts() -> None:
    assert (
        get_origin(events.PermissionDecided.model_fields["effect"].annotation)
        is Literal
    )


# ------------------------------------------------------------ schema set


def test_files_are_named_by_full_name_and_none_is_orphaned() -> None:
    """<namespace>.<Name>.avsc, and every file is used by a topic schema."""
    used: set[str] = set()
    for name in MANIFEST["topics"].values():
        used |= _referenced(name, set())
    for path in SCHEMA_DIR.glob("*.avsc"):
        schema = json.loads(path.read_text())
        full = f"{schema['namespace']}.{schema['name']}"
        assert path.name == f"{full}.avsc"
        assert schema["namespace"] == NAMESPACE
        assert full in used, f"{path.name} is not reachable from any topic schema"


def _referenced(full: str, seen: set[str]) -> set[str]:
    if full in seen:
        return seen
    seen.add(full)
    text = (SCHEMA_DIR / f"{full}.avsc").read_text()
    for path in SCHEMA_DIR.glob("*.avsc"):
        other = path.name.removesuffix(".avsc")
        if f'"{other}"' in text:
            _referenced(other, seen)
    return seen


def test_manifest_maps_every_topic() -> None:
    assert set(MANIFEST["topics"]) == {t.value for t in Topic}


def test_schema_set_loads_with_distinct_fingerprints(schema_set: SchemaSet) -> None:
    prints = [schema_set.writer_schema(t).fingerprint for t in Topic]
    assert all(len(p) == 8 for p in prints)
    assert len(set(prints)) == len(prints)
    for topic in Topic:
        current = schema_set.writer_schema(topic)
        assert fingerprint_of(current.parsed) == current.fingerprint
        assert schema_set.reader_for(topic, current.fingerprint) is current


def test_history_sets_are_readable(schema_set: SchemaSet) -> None:
    """Every history snapshot's fingerprints are in the read map."""
    assert (SCHEMA_DIR / "history" / "v1").is_dir()
    for version_dir in (SCHEMA_DIR / "history").iterdir():
        for topic, schema in load_topic_schemas(version_dir, version_dir.name).items():
            assert schema_set.reader_for(topic, schema.fingerprint) is not None


def _copy_set(scratch_dir: Path) -> Path:
    target = scratch_dir / "schemas"
    target.mkdir()
    for path in [*SCHEMA_DIR.glob("*.avsc"), SCHEMA_DIR / "topics.json"]:
        shutil.copy(path, target / path.name)
    return target


def _edit(directory: Path, name: str, change: Any) -> None:
    path = directory / f"{NAMESPACE}.{name}.avsc"
    schema = json.loads(path.read_text())
    change(schema)
    path.write_text(json.dumps(schema))


@pytest.mark.parametrize(
    ("items", "kind"),
    [
        pytest.param("null", "array", id="array-of-null"),
        pytest.param(
            {"type": "record", "name": "Empty", "fields": []},
            "array",
            id="array-of-empty",
        ),
    ],
)
def test_zero_width_array_items_are_refused_at_load(
    scratch_dir: Path, items: Any, kind: str
) -> None:
    """A 2**62-item array of zero-byte items would spin: refused at start-up."""
    directory = _copy_set(scratch_dir)
    _edit(
        directory,
        "Header",
        lambda s: s["fields"].append(
            {"name": "pad", "type": {"type": kind, "items": items}, "default": []}
        ),
    )
    with pytest.raises(ConfigError, match="zero bytes wide"):
        SchemaSet.load(directory)


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        pytest.param(
            lambda d: (d / "topics.json").unlink(), "cannot read", id="no-manifest"
        ),
        pytest.param(
            lambda d: (d / "topics.json").write_text(
                '{"namespace": "x", "topics": {}}'
            ),
            "namespace",
            id="bad-namespace",
        ),
        pytest.param(
            lambda d: (d / f"{NAMESPACE}.Header.avsc").unlink(),
            "unknown type",
            id="missing-named-type",
        ),
        pytest.param(
            lambda d: (d / f"{NAMESPACE}.LoopState.avsc").unlink(),
            "is missing",
            id="missing-topic-schema",
        ),
        pytest.param(
            lambda d: (d / f"{NAMESPACE}.Usage.avsc").write_text("{not json"),
            "does not parse",
            id="malformed-json",
        ),
        pytest.param(
            # fastavro's load_schema recurses until the interpreter crashes here.
            lambda d: (d / f"{NAMESPACE}.Usage.avsc").write_text(
                (d / f"{NAMESPACE}.Usage.avsc")
                .read_text()
                .replace('"name": "Usage"', '"name": "TokenUsage"')
            ),
            "not its file name",
            id="misnamed-file",
        ),
        pytest.param(
            lambda d: (d / f"{NAMESPACE}.Usage.avsc").unlink(),
            "unknown type turnstream.v1.Usage",
            id="dangling-reference",
        ),
    ],
)
def test_broken_schema_dir_is_a_config_error(
    scratch_dir: Path, breakage: Any, message: str
) -> None:
    directory = _copy_set(scratch_dir)
    breakage(directory)
    with pytest.raises(ConfigError, match=message):
        SchemaSet.load(directory)


def test_load_schema_file_matches_the_topic_loader(schema_set: SchemaSet) -> None:
    """The single-schema loader expands and fingerprints the same way."""
    parsed = load_schema_file(SCHEMA_DIR, f"{NAMESPACE}.EventEnvelope")
    assert fingerprint_of(parsed) == schema_set.writer_schema(Topic.EVENTS).fingerprint
    with pytest.raises(ConfigError, match="is missing"):
        load_schema_file(SCHEMA_DIR, f"{NAMESPACE}.Nope")


def test_load_schema_file_refuses_a_misnamed_file(scratch_dir: Path) -> None:
    """Where fastavro's load_schema would recurse until the interpreter dies."""
    directory = _copy_set(scratch_dir)
    _edit(directory, "Usage", lambda s: s.update(name="TokenUsage"))
    with pytest.raises(ConfigError, match="not its file name"):
        load_schema_file(directory, f"{NAMESPACE}.TurnDone")
