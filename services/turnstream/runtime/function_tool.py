"""Tools from plain typed Python functions.

Owns :func:`tool` (the decorator) and :class:`TypedTool` (a
:class:`~turnstream.runtime.ports.Tool` around one function). The input schema
the model sees is derived from the function's signature -- or, when its one
argument is a pydantic model, from that model -- and every call's input is
validated against it before the function runs. A parameter annotated
:class:`~turnstream.runtime.ports.ToolContext` receives the call's context and
is not part of the schema. Sync functions run in a worker thread, so they never
block the loop's actor (one that overruns the tool timeout keeps its thread
until it returns; the call has failed by then); coroutine functions are awaited.

What a function returns becomes the result: ``str`` as text, a
:class:`~turnstream.runtime.ports.ToolOutput` as is, a pydantic model as its
JSON, anything else as JSON (``json.dumps``). Invalid input is an error result
naming the fields (never their values); an exception is an error result too
(the runtime's rule). Imports ports, the model port and errors; never an
adapter.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable
from typing import Any, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from turnstream.errors import ConfigError
from turnstream.runtime.model_client import ToolSpec
from turnstream.runtime.ports import ToolContext, ToolOutput

__all__ = ["TypedTool", "tool"]

_MAX_DESCRIPTION = 1024


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _description(fn: Callable[..., object], given: str | None) -> str:
    if given is not None:
        return given
    doc = inspect.getdoc(fn) or ""
    return doc.split("\n\n", 1)[0].replace("\n", " ").strip()[:_MAX_DESCRIPTION]


def _schema_text(model: type[BaseModel]) -> str:
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    return json.dumps(schema, separators=(",", ":"), sort_keys=True)


def _problem(error: ValidationError) -> str:
    """Which fields are wrong, and how -- never the values sent."""
    parts = []
    for item in error.errors(include_input=False, include_url=False)[:5]:
        where = ".".join(str(p) for p in item["loc"]) or "input"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


def _output(value: object) -> ToolOutput:
    if isinstance(value, ToolOutput):
        return value
    if isinstance(value, str):
        return ToolOutput.text(value)
    if isinstance(value, BaseModel):
        return ToolOutput.text(value.model_dump_json())
    return ToolOutput.text(json.dumps(value, default=str))


class TypedTool:
    """A :class:`~turnstream.runtime.ports.Tool` that calls one typed function.

    Build it with :func:`tool`. It also implements the ``SequentialTool``
    trait (``sequential=True`` runs its calls one at a time), the
    ``IdempotentTool`` trait (``idempotent=True``: a call may run again after
    a crash) and, when given ``audit``, the ``AuditableTool`` trait.
    """

    def __init__(
        self,
        fn: Callable[..., object],
        *,
        name: str | None = None,
        description: str | None = None,
        sequential: bool = False,
        audit: Callable[[str], str] | None = None,
        idempotent: bool = False,
    ) -> None:
        self.fn = fn
        self._sequential = sequential
        self._idempotent = idempotent
        self._audit = audit
        self._is_async = inspect.iscoroutinefunction(fn)
        tool_name = name or fn.__name__
        try:
            hints = get_type_hints(fn)
        except (NameError, TypeError) as exc:
            raise ConfigError(
                f"tool {tool_name}", f"unresolvable type: {exc}"
            ) from None
        self._context_param: str | None = None
        self._model_param: str | None = None
        fields: dict[str, Any] = {}
        params = list(inspect.signature(fn).parameters.values())
        for param in params:
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ConfigError(f"tool {tool_name}", "no *args or **kwargs")
            annotation = hints.get(param.name)
            if annotation is None:
                raise ConfigError(
                    f"tool {tool_name}", f"parameter {param.name!r} needs a type"
                )
            if annotation is ToolContext:
                self._context_param = param.name
                continue
            default = ... if param.default is param.empty else param.default
            fields[param.name] = (annotation, default)
        model_types = [
            a
            for n, (a, _) in fields.items()
            if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        if len(fields) == 1 and model_types:
            self._model_param = next(iter(fields))
            self._args: type[BaseModel] = model_types[0]
        else:
            self._args = create_model(f"{tool_name}_input", __base__=_Args, **fields)
        self._spec = ToolSpec(
            name=tool_name,
            description=_description(fn, description),
            input_schema=_schema_text(self._args),
        )

    @property
    def spec(self) -> ToolSpec:
        """Name, description and the derived input schema."""
        return self._spec

    def sequential(self) -> bool:
        """Whether calls of this tool run one at a time."""
        return self._sequential

    def idempotent(self) -> bool:
        """Whether a call may run again after a crash (same idempotency key)."""
        return self._idempotent

    def audit_summary(self, input_json: str) -> str:
        """The ``audit`` callback's summary, else the tool name."""
        return self._audit(input_json) if self._audit else self._spec.name

    async def run(self, input_json: str, ctx: ToolContext) -> ToolOutput:
        """Validate the input, call the function, shape what it returned."""
        try:
            parsed = self._args.model_validate_json(input_json or "{}")
        except ValidationError as exc:
            return ToolOutput.error(f"invalid arguments: {_problem(exc)}")
        if self._model_param is not None:
            kwargs: dict[str, object] = {self._model_param: parsed}
        else:
            kwargs = {k: getattr(parsed, k) for k in type(parsed).model_fields}
        if self._context_param is not None:
            kwargs[self._context_param] = ctx
        if self._is_async:
            result = await _awaitable(self.fn(**kwargs))
        else:
            result = await asyncio.to_thread(self.fn, **kwargs)
        return _output(result)


async def _awaitable(value: object) -> object:
    if inspect.isawaitable(value):
        return await value
    return value


@overload
def tool(fn: Callable[..., object], /) -> TypedTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    sequential: bool = False,
    audit: Callable[[str], str] | None = None,
    idempotent: bool = False,
) -> Callable[[Callable[..., object]], TypedTool]: ...


def tool(
    fn: Callable[..., object] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    sequential: bool = False,
    audit: Callable[[str], str] | None = None,
    idempotent: bool = False,
) -> TypedTool | Callable[[Callable[..., object]], TypedTool]:
    """Make a tool of a typed function (``@tool`` or ``@tool(name=...)``).

    Args:
        fn: the function (sync or ``async``); its docstring's first paragraph
            is the description unless ``description`` is given.
        name: the tool name (default: the function's name).
        description: what the model is told the tool does.
        sequential: run this tool's calls one at a time.
        audit: a redacted one-line summary of a call's input JSON, for
            events and approval gates (default: the tool name).
        idempotent: a call approved before a crash, whose result was never
            committed, runs again when the turn resumes (with the same
            ``ToolContext.idempotency_key``); without it such a call is not
            run again and the model gets an ``outcome unknown`` error.

    Raises:
        ConfigError: a parameter without a type, ``*args``/``**kwargs``, or a
            type pydantic cannot describe.
    """

    def wrap(f: Callable[..., object]) -> TypedTool:
        return TypedTool(
            f,
            name=name,
            description=description,
            sequential=sequential,
            audit=audit,
            idempotent=idempotent,
        )

    if fn is not None:
        return wrap(fn)
    return wrap
