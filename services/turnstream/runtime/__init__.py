"""The loop runtime: pure asyncio and ports; no Kafka, no Avro, no HTTP.

Table of contents (one module per thing it owns):

- ``ports`` -- the protocols the runtime is written against: ``Journal``,
  ``LiveHub``/``EventSource``, ``Clock``, ``IdSource``, ``Tool`` (+ traits,
  ``OpenedTool`` with its host-managed ``ToolResource``),
  ``AccessPolicy``; ``model_client`` -- the ``ModelClient`` port;
- ``config`` -- ``LoopConfig``, ``ToolLimits``;
- ``effects`` -- ``StagedRecord``: records a tool call stages
  (``ToolContext.stage_record``), committed with its step;
- ``agent`` -- ``Agent`` (the user's definition of what a loop runs),
  ``AccessRules``, ``AgentHost`` (the agents a service hosts);
  ``function_tool`` -- ``@tool``: tools from typed functions;
- ``actor`` -- ``LoopActor``: the single owner and writer of one loop;
  ``mailbox`` (its lanes and messages), ``supervision`` (its turn tasks),
  ``input_queue`` (queued input), ``gates`` (open approval gates);
- ``turn`` / ``step`` / ``tools`` -- a turn's steps, one model call, one tool
  batch; ``handshake`` -- what a turn may ask of its actor; ``accumulate`` --
  chunks into one message; ``output_schema`` -- structured-output checks;
- ``hooks`` -- Around/Guard hooks; ``stamping`` -- event headers and ids;
  ``user_code`` -- interface checks of the user's clients and tools, and the
  ERROR log (type and frames, never the message) of what they raise;
- ``subscription`` -- ``EventFilter`` and the bounded ``Subscription``;
- ``fold`` / ``restore`` -- journal to state, and restore;
- ``session`` -- the ``Session`` protocol; ``local_session`` -- the embedded
  ``LocalSession``;
- ``machine`` -- the loop's transitions, in layers: ``machine_state`` (its
  state), ``turn_start`` (admission, turn start, resume), ``turn_end``
  (terminal handling); ``writer`` -- the durable-then-live write path;
  ``turn_handle`` -- the actor's handle on its turn.

The runtime never imports ``turnstream.wire``, ``turnstream.kafka``,
``turnstream.memory`` or ``turnstream.testing``: adapters depend on it, not the
reverse.
"""

from turnstream.runtime.accumulate import INTERRUPTED_NOTICE, TRUNCATED_NOTICE
from turnstream.runtime.actor import LoopActor, LoopStatus
from turnstream.runtime.agent import AccessRules, Agent, AgentHost
from turnstream.runtime.config import LoopConfig, RestorePolicy, ToolLimits
from turnstream.runtime.effects import StagedRecord
from turnstream.runtime.errors import (
    CommitError,
    EffectError,
    LoopClosedError,
    RestoreError,
)
from turnstream.runtime.fold import fold_loop
from turnstream.runtime.function_tool import TypedTool, tool
from turnstream.runtime.gates import GateAnswer
from turnstream.runtime.hooks import (
    Around,
    Denial,
    Guard,
    HookCall,
    HookResult,
    HookRunner,
    HookSet,
    Operation,
    Outcome,
    compile_hooks,
    deny,
)
from turnstream.runtime.local_session import LocalSession
from turnstream.runtime.model_client import (
    ModelClient,
    ModelEvent,
    ModelRequest,
    StreamEnd,
    ToolSpec,
)
from turnstream.runtime.ports import (
    AccessPolicy,
    AccessRequest,
    ApprovalTool,
    AuditableTool,
    Clock,
    EventSource,
    IdempotentTool,
    IdSource,
    Journal,
    LiveHub,
    NoAccessPolicy,
    OpenedTool,
    RandomIds,
    Recovery,
    SequentialTool,
    SubscribableHub,
    SystemClock,
    Tool,
    ToolContext,
    ToolOutput,
    ToolResource,
)
from turnstream.runtime.restore import restore_loop
from turnstream.runtime.session import Content, LoopSetup, Session, as_message
from turnstream.runtime.subscription import EventFilter, LoopScope, Subscription

__all__ = [
    "INTERRUPTED_NOTICE",
    "TRUNCATED_NOTICE",
    "AccessPolicy",
    "AccessRequest",
    "AccessRules",
    "Agent",
    "AgentHost",
    "ApprovalTool",
    "Around",
    "AuditableTool",
    "Clock",
    "CommitError",
    "Content",
    "Denial",
    "EffectError",
    "EventFilter",
    "EventSource",
    "GateAnswer",
    "Guard",
    "HookCall",
    "HookResult",
    "HookRunner",
    "HookSet",
    "IdSource",
    "IdempotentTool",
    "Journal",
    "LiveHub",
    "LocalSession",
    "LoopActor",
    "LoopClosedError",
    "LoopConfig",
    "LoopScope",
    "LoopSetup",
    "LoopStatus",
    "ModelClient",
    "ModelEvent",
    "ModelRequest",
    "NoAccessPolicy",
    "OpenedTool",
    "Operation",
    "Outcome",
    "RandomIds",
    "Recovery",
    "RestoreError",
    "RestorePolicy",
    "SequentialTool",
    "Session",
    "StagedRecord",
    "StreamEnd",
    "SubscribableHub",
    "Subscription",
    "SystemClock",
    "Tool",
    "ToolContext",
    "ToolLimits",
    "ToolOutput",
    "ToolResource",
    "ToolSpec",
    "TypedTool",
    "as_message",
    "compile_hooks",
    "deny",
    "fold_loop",
    "restore_loop",
    "tool",
]
