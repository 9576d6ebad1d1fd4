"""Identifier types shared by every layer.

Owns the ``NewType`` wrappers over :class:`uuid.UUID` and the one place that
mints them. Imports nothing from turnstream.
"""

from __future__ import annotations

import uuid
from typing import NewType

SessionId = NewType("SessionId", uuid.UUID)
LoopId = NewType("LoopId", uuid.UUID)
TurnId = NewType("TurnId", uuid.UUID)
StepId = NewType("StepId", uuid.UUID)
CommandId = NewType("CommandId", uuid.UUID)
EventId = NewType("EventId", uuid.UUID)
ToolExecutionId = NewType("ToolExecutionId", uuid.UUID)
GateId = NewType("GateId", uuid.UUID)

__all__ = [
    "CommandId",
    "EventId",
    "GateId",
    "LoopId",
    "SessionId",
    "StepId",
    "ToolExecutionId",
    "TurnId",
    "new_uuid",
]


def new_uuid() -> uuid.UUID:
    """Return a random RFC 4122 version-4 UUID (the default id source)."""
    return uuid.uuid4()
