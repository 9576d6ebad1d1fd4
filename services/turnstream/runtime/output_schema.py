"""Structured output: a minimal JSON Schema check of a turn's final answer.

Owns :func:`check_schema` (is a schema one this module understands),
:func:`find_mismatch` (where an instance breaks a schema) and
:func:`check_structured_output` (the final-answer rule). Supported keywords:
``type`` (a name or a list of names), ``properties``, ``required``,
``additionalProperties`` (boolean only), ``items`` (one schema) and ``enum``.
Other keywords are ignored, so a richer schema is checked only partly.

Errors name a JSON path, never a value: outputs may hold user data. Imports
only value types and errors.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence

from turnstream.content import AIMessage, RefusalBlock, TextBlock
from turnstream.errors import StructuredOutputError

__all__ = ["check_schema", "check_structured_output", "find_mismatch"]

_TYPES = frozenset(
    {"object", "array", "string", "number", "integer", "boolean", "null"}
)


def check_schema(schema: Mapping[str, object], path: str = "$") -> None:
    """Check that ``schema`` uses the supported keywords correctly.

    Raises:
        ValueError: the first problem, naming its path in the schema.
    """
    kind = schema.get("type")
    if kind is not None:
        names = kind if isinstance(kind, list) else [kind]
        if not names or not all(isinstance(n, str) and n in _TYPES for n in names):
            raise ValueError(f"{path}: unsupported type")
    props = schema.get("properties")
    if props is not None:
        if not isinstance(props, Mapping):
            raise ValueError(f"{path}: properties must be an object")
        for name, sub in props.items():
            if not isinstance(sub, Mapping):
                raise ValueError(f"{path}.{name}: a property schema must be an object")  # noqa: TRY004 - callers expect ValueError for any bad schema
            check_schema(sub, f"{path}.{name}")
    required = schema.get("required")
    if required is not None and not (
        isinstance(required, list) and all(isinstance(r, str) for r in required)
    ):
        raise ValueError(f"{path}: required must be a list of names")
    extra = schema.get("additionalProperties")
    if extra is not None and not isinstance(extra, bool):
        raise ValueError(f"{path}: only boolean additionalProperties is supported")
    items = schema.get("items")
    if items is not None:
        if not isinstance(items, Mapping):
            raise ValueError(f"{path}: items must be one schema object")
        check_schema(items, f"{path}[]")
    enum = schema.get("enum")
    if enum is not None and not isinstance(enum, list):
        raise ValueError(f"{path}: enum must be a list")


_CHECKS: dict[str, Callable[[object], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    # JSON Schema numbers exclude booleans (Python's bool is an int).
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
}


def _type_matches(value: object, name: str) -> bool:
    check = _CHECKS.get(name)
    return check is not None and check(value)


def find_mismatch(
    value: object, schema: Mapping[str, object], path: str = "$"
) -> str | None:
    """Return the path of the first place ``value`` breaks ``schema``, or ``None``."""
    kind = schema.get("type")
    if kind is not None:
        names: Sequence[object] = kind if isinstance(kind, list) else [kind]
        if not any(isinstance(n, str) and _type_matches(value, n) for n in names):
            return path
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        return path
    if isinstance(value, dict):
        return _object_mismatch(value, schema, path)
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, Mapping):
        for index, item in enumerate(value):
            found = find_mismatch(item, items, f"{path}[{index}]")
            if found is not None:
                return found
    return None


def _object_mismatch(
    value: dict[object, object], schema: Mapping[str, object], path: str
) -> str | None:
    required = schema.get("required")
    if isinstance(required, list):
        for name in required:
            if name not in value:
                return f"{path}.{name}"
    props = schema.get("properties")
    props = props if isinstance(props, Mapping) else {}
    for name, sub in props.items():
        if name in value and isinstance(sub, Mapping):
            found = find_mismatch(value[name], sub, f"{path}.{name}")
            if found is not None:
                return found
    if schema.get("additionalProperties") is False:
        for name in value:
            if name not in props:
                return f"{path}.{name}"
    return None


def _reject_constant(token: str) -> object:
    # NaN and Infinity are not JSON; Python's parser accepts them by default.
    raise ValueError(token)


def check_structured_output(message: AIMessage, schema: Mapping[str, object]) -> None:
    """Check that a final answer is JSON text matching ``schema``.

    Raises:
        StructuredOutputError: ``model_refusal``, ``missing_output``,
            ``invalid_json`` or ``schema_mismatch`` (with the failing path).
    """
    if any(isinstance(b, RefusalBlock) for b in message.blocks):
        raise StructuredOutputError("model_refusal")
    text = "".join(b.text for b in message.blocks if isinstance(b, TextBlock))
    if not text.strip():
        raise StructuredOutputError("missing_output")
    try:
        value: object = json.loads(text, parse_constant=_reject_constant)
    except ValueError:
        raise StructuredOutputError("invalid_json") from None
    where = find_mismatch(value, schema)
    if where is not None:
        raise StructuredOutputError("schema_mismatch", where)
