"""Test fakes and builders for the runtime's ports (never used in production).

Contents:

- :class:`ScriptedModel` and its script items (:class:`Pause`, :class:`Fail`,
  :class:`Hang`, :class:`Stubborn`, :class:`Yield`) and step builders
  (:func:`text_step`, :func:`tool_step`, :func:`call`, :func:`empty_step`,
  :func:`failing_step`);
- :class:`FixedClock`, :class:`SequentialIds`;
- :class:`FunctionTool`, :class:`StaticAccessPolicy`;
- :class:`FlakyJournal` (injectable append failures and stalls);
- :class:`EventRecorder`, :func:`describe`;
- :func:`open_rig` / :class:`Rig` (a one-loop embedded session).

Production-grade in-memory adapters live in :mod:`turnstream.memory`.
"""

from typing import TYPE_CHECKING

from turnstream.testing.clock import EPOCH, FixedClock, IdSourceFailure, SequentialIds
from turnstream.testing.journal import FlakyJournal, JournalFailure
from turnstream.testing.model import (
    Fail,
    Hang,
    Pause,
    Script,
    ScriptedModel,
    ScriptItem,
    Stubborn,
    ToolCallScript,
    Yield,
    call,
    empty_step,
    failing_step,
    text_step,
    tool_step,
)
from turnstream.testing.recorder import (
    Described,
    EventRecorder,
    describe,
    describe_message,
)
from turnstream.testing.rig import Rig, open_rig
from turnstream.testing.tools import FunctionTool, StaticAccessPolicy

__all__ = [
    "EPOCH",
    "Described",
    "EventRecorder",
    "Fail",
    "FixedClock",
    "FlakyJournal",
    "FunctionTool",
    "Hang",
    "IdSourceFailure",
    "JournalFailure",
    "Pause",
    "Rig",
    "Script",
    "ScriptItem",
    "ScriptedModel",
    "SequentialIds",
    "StaticAccessPolicy",
    "Stubborn",
    "ToolCallScript",
    "Yield",
    "call",
    "describe",
    "describe_message",
    "empty_step",
    "failing_step",
    "open_rig",
    "text_step",
    "tool_step",
]


if TYPE_CHECKING:  # the fakes implement the runtime's ports (checked by mypy)
    from turnstream.runtime.model_client import ModelClient
    from turnstream.runtime.ports import AccessPolicy, Clock, IdSource, Journal, Tool

    def _model(model: ScriptedModel) -> ModelClient:
        return model

    def _tool(tool: FunctionTool) -> Tool:
        return tool

    def _policy(policy: StaticAccessPolicy) -> AccessPolicy:
        return policy

    def _clock(clock: FixedClock) -> Clock:
        return clock

    def _ids(ids: SequentialIds) -> IdSource:
        return ids

    def _journal(journal: FlakyJournal) -> Journal:
        return journal
