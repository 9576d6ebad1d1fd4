"""Commands: what clients send to a loop.

Pins the shared fields and defaults (agency USER for a client command), the
tagged ``Command`` union, frozen/closed models, and that each command type
is named for itself on the wire.
"""

from __future__ import annotations

import typing
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import pytest
from pydantic import TypeAdapter, ValidationError
from tests.unit.wire.golden import BUILDERS

from turnstream.commands import (
    AnyCommand,
    Command,
    CommandBase,
    DeleteLoop,
    Interrupt,
    RespondGate,
    Retract,
    Shutdown,
    SubmitInput,
)
from turnstream.content import TextBlock, UserMessage
from turnstream.events import Agency

COMMAND_TYPES = [SubmitInput, Interrupt, RespondGate, Retract, Shutdown, DeleteLoop]


def _base() -> dict[str, Any]:
    return {
        "command_id": uuid4(),
        "session_id": uuid4(),
        "loop_id": uuid4(),
        "created_at": datetime(2026, 1, 1, tzinfo=UTC),
    }


def test_union_and_subclasses_agree() -> None:
    assert set(typing.get_args(AnyCommand)) == set(COMMAND_TYPES)
    assert set(CommandBase.__subclasses__()) == set(COMMAND_TYPES)


@pytest.mark.parametrize("command_type", COMMAND_TYPES, ids=lambda t: t.__name__)
def test_command_union_parses_each_type(command_type: type[CommandBase]) -> None:
    command = BUILDERS[command_type.__name__]()
    parsed = TypeAdapter(Command).validate_json(command.model_dump_json())
    assert type(parsed) is command_type
    assert parsed == command
    assert command.type == command_type.__name__  # type: ignore[attr-defined]


def test_defaults_of_a_client_command() -> None:
    submit = SubmitInput(**_base(), message=UserMessage())
    assert submit.agency is Agency.USER
    assert submit.no_fold is False
    assert Interrupt(**_base()).agency is Agency.USER


@pytest.mark.parametrize(
    ("command_type", "extra"),
    [
        pytest.param(SubmitInput, {}, id="submit-without-message"),
        pytest.param(RespondGate, {"gate_id": uuid4()}, id="respond-without-action"),
        pytest.param(Retract, {}, id="retract-without-target"),
    ],
)
def test_required_fields(
    command_type: type[CommandBase], extra: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError):
        command_type(**_base(), **extra)


@pytest.mark.parametrize(
    "missing", ["command_id", "session_id", "loop_id", "created_at"]
)
def test_every_command_is_addressed_and_identified(missing: str) -> None:
    fields = _base()
    del fields[missing]
    with pytest.raises(ValidationError):
        Shutdown(**fields)


def test_commands_are_frozen_and_closed() -> None:
    submit = SubmitInput(**_base(), message=UserMessage(blocks=(TextBlock(text="x"),)))
    with pytest.raises(ValidationError):
        submit.no_fold = True  # type: ignore[misc]
    with pytest.raises(ValidationError):
        SubmitInput(**_base(), message=UserMessage(), priority=1)  # type: ignore[call-arg]


def test_type_tag_cannot_be_forged() -> None:
    with pytest.raises(ValidationError):
        Interrupt(**_base(), type="Shutdown")  # type: ignore[arg-type]
    command: Shutdown = Shutdown(**_base())
    assert isinstance(command, CommandBase)
