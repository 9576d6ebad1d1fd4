"""Agents: the user's definition of what a loop runs, and the set a service hosts.

Owns :class:`Agent` (name, system prompt, model and the models a submit may
choose, tools, hooks, access policy, tool limits, output schema, timeouts),
the access policies :class:`AccessRules` (per tool: allow / ask / deny) and
:class:`NoAccessPolicy` (what an agent without a policy gets: every call
denied, ``access_gate_missing``), and :class:`AgentHost` (the agents one
service hosts, turned into the :class:`~turnstream.runtime.session.LoopSetup`
of each loop by the agent the loop is bound to).

A loop is bound to one agent by its first submit (``SubmitInput.agent``, or
the host's single agent when it names none); the binding is the ``agent_name``
of its ``LoopStarted`` and of its state, so a restored loop keeps it on any
process. A host asked for an agent it does not have answers with a refusing
setup (``LoopConfig.hosted`` false), never with another agent's configuration.

Tools that run on a shared resource (:class:`~turnstream.runtime.ports.OpenedTool`,
e.g. an MCP server's tools) get it opened by :meth:`AgentHost.tools_open`
when the host starts and closed, in reverse order, when it stops.

Model clients are code with endpoints and keys: the composition root builds
them (one per agent, from :attr:`Agent.model`) and hands them in. Imports
runtime modules and value types; never an adapter.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from turnstream.errors import ConfigError
from turnstream.ids import LoopId
from turnstream.runtime.config import (
    DEFAULT_COMMIT_TIMEOUT,
    DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_MAX_RESUMES,
    DEFAULT_STEP_TIMEOUT,
    DEFAULT_TOOL_TIMEOUT,
    LoopConfig,
    OnRestore,
    RestorePolicy,
    ToolLimits,
)
from turnstream.runtime.hooks import HookRunner, HookSet, compile_hooks
from turnstream.runtime.model_client import ModelClient
from turnstream.runtime.ports import (
    AccessEffect,
    AccessPolicy,
    AccessRequest,
    NoAccessPolicy,
    OpenedTool,
    Tool,
    ToolResource,
)
from turnstream.runtime.session import LoopSetup
from turnstream.runtime.user_code import check_model_client

__all__ = [
    "AccessRules",
    "Agent",
    "AgentHost",
    "NoAccessPolicy",
    "model_name",
]

_log = logging.getLogger(__name__)

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
_RULES = ("allow", "ask", "deny")


def model_name(spec: str) -> str:
    """The model name of a ``provider:name`` spec (a bare name is itself)."""
    _, _, name = spec.partition(":")
    return name.strip() or spec.strip()


class AccessRules:
    """Per-tool access, decided without a prompt unless the rule is ``ask``.

    Every call is decided in call order: a tool in ``allow`` runs (a durable
    ``PermissionDecided{approve}`` first), one in ``ask`` opens an approval
    gate and waits for ``RespondGate``, one in ``deny`` -- or in no list, with
    the default ``"deny"`` -- gets ``PermissionDecided{deny}`` and an error
    result; the tool never runs.

    Args:
        allow: tool names that run without asking.
        ask: tool names that need a person's approval (a gate).
        deny: tool names that never run.
        default: the rule of a tool in no list.

    Raises:
        ConfigError: a tool in two lists, or an unknown default.
    """

    __slots__ = ("allow", "ask", "default", "deny")

    def __init__(
        self,
        *,
        allow: Iterable[str] = (),
        ask: Iterable[str] = (),
        deny: Iterable[str] = (),
        default: str = "deny",
    ) -> None:
        self.allow = frozenset(allow)
        self.ask = frozenset(ask)
        self.deny = frozenset(deny)
        if default not in _RULES:
            raise ConfigError("access.default", f"must be one of {_RULES}")
        self.default = default
        seen: dict[str, str] = {}
        for rule, names in (
            ("allow", self.allow),
            ("ask", self.ask),
            ("deny", self.deny),
        ):
            for tool_name in names:
                if tool_name in seen:
                    raise ConfigError(
                        "access",
                        f"tool {tool_name!r} is in both {seen[tool_name]} and {rule}",
                    )
                seen[tool_name] = rule

    def rule_for(self, tool_name: str) -> str:
        """``"allow"``, ``"ask"`` or ``"deny"`` for one tool."""
        if tool_name in self.allow:
            return "allow"
        if tool_name in self.ask:
            return "ask"
        if tool_name in self.deny:
            return "deny"
        return self.default

    async def decide(self, request: AccessRequest) -> AccessEffect:
        """The decision for one call (by its tool's name)."""
        rule = self.rule_for(request.tool_name)
        if rule == "allow":
            return "approve"
        if rule == "ask":
            return "ask"
        return "deny"


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Agent:
    """What a loop runs: the user's agent, defined in code.

    Attributes:
        name: the binding key (1-64 chars of ``[A-Za-z0-9_.-]``); loops keep
            the agent of this name for their life.
        model: the default model, as ``provider:name`` (``demo``,
            ``openai:gpt-4o-mini``, ``anthropic:claude-…``) or a bare name
            for a client the service is given.
        models: further model names (same provider) a submit may choose.
        system_prompt: sent with every request; never part of history.
        tools: the tools offered to the model (``@tool`` functions or any
            :class:`~turnstream.runtime.ports.Tool`).
        hooks: turn / step / inference / tool-call hooks.
        access: the access policy; ``None`` denies every call (and the
            service says so at start-up).
        limits: tool limits per turn.
        output_schema: JSON Schema the final answer must match, if any.
        max_tokens: the default output cap per step.
        step_timeout: seconds one model call may take.
        tool_timeout: seconds one tool call may take.
        drain_timeout: seconds a cancelled turn may take to end.
        reopen_after_shutdown: a submit after a client's ``Shutdown`` reopens
            the loop instead of being refused ``shutting_down``.
        on_restore: what the next owner does with a turn a crash left open:
            ``"interrupt"`` (default, the contract's rule: ``TurnInterrupted``)
            or ``"continue"`` (``TurnResumed``, then the next model request
            from the committed history).
        max_resumes: a continuing turn resumed this many times already ends
            ``TurnFailed{resume_limit}`` on the next restore (a crash loop).
        display_name: a label carried by ``LoopStarted``.
        client: a model client of your own (your endpoint, your credentials);
            ``None``: the service builds one from ``model``.
    """

    name: str
    model: str
    models: tuple[str, ...] = ()
    system_prompt: str = ""
    tools: Sequence[Tool] = ()
    hooks: HookSet | None = None
    access: AccessPolicy | None = None
    limits: ToolLimits = field(default_factory=ToolLimits)
    output_schema: Mapping[str, object] | None = None
    max_tokens: int | None = None
    step_timeout: float = DEFAULT_STEP_TIMEOUT
    tool_timeout: float = DEFAULT_TOOL_TIMEOUT
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT
    reopen_after_shutdown: bool = False
    on_restore: OnRestore = "interrupt"
    max_resumes: int = DEFAULT_MAX_RESUMES
    display_name: str = ""
    client: ModelClient | None = None

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ConfigError("agent.name", "1-64 chars of [A-Za-z0-9_.-]")
        object.__setattr__(self, "tools", tuple(self.tools))
        object.__setattr__(self, "models", tuple(self.models))
        if self.client is not None:
            check_model_client(self.client, "agent.client")
        if self.access is not None and not callable(
            getattr(self.access, "decide", None)
        ):
            raise ConfigError(
                "agent.access",
                f"access policy {type(self.access).__qualname__} has no 'decide'",
            )
        self.loop_config()  # validates everything LoopConfig checks

    @property
    def model_name(self) -> str:
        """The default model's name (without its provider)."""
        return model_name(self.model)

    def loop_config(
        self, *, commit_timeout: float = DEFAULT_COMMIT_TIMEOUT
    ) -> LoopConfig:
        """The configuration every loop of this agent runs with."""
        return LoopConfig(
            model=self.model_name,
            models=tuple(model_name(m) for m in self.models),
            system_prompt=self.system_prompt,
            tools=tuple(self.tools),
            limits=self.limits,
            output_schema=self.output_schema,
            max_tokens=self.max_tokens,
            step_timeout=self.step_timeout,
            tool_timeout=self.tool_timeout,
            drain_timeout=self.drain_timeout,
            commit_timeout=commit_timeout,
            agent_name=self.name,
            display_name=self.display_name,
            reopen_after_shutdown=self.reopen_after_shutdown,
            restore=RestorePolicy(
                on_restore=self.on_restore, max_resumes=self.max_resumes
            ),
        )

    def access_policy(self) -> AccessPolicy:
        """The policy calls are decided by (:class:`NoAccessPolicy` if none)."""
        return self.access if self.access is not None else NoAccessPolicy()

    def hook_runner(self) -> HookRunner:
        """The compiled hooks (validated)."""
        return compile_hooks(self.hooks) if self.hooks is not None else HookRunner()


class AgentHost:
    """The agents one service hosts, and the setup of each loop.

    Args:
        agents: the hosted agents (names unique; at least one).
        client_for: the model client of an agent (built by the composition
            root, which owns endpoints and keys).
        commit_timeout: seconds each journal commit may take.

    Raises:
        ConfigError: no agent, a repeated name, an agent that fails
            validation (hooks, limits, schema), or a client without
            ``name`` or ``stream``.
    """

    def __init__(
        self,
        agents: Sequence[Agent],
        client_for: Callable[[Agent], ModelClient],
        *,
        commit_timeout: float = DEFAULT_COMMIT_TIMEOUT,
    ) -> None:
        if not agents:
            raise ConfigError("agents", "host at least one agent")
        names = [a.name for a in agents]
        if len(set(names)) != len(names):
            raise ConfigError("agents", "agent names must be unique")
        self.agents = tuple(agents)
        self._commit_timeout = commit_timeout
        clients = {agent.name: client_for(agent) for agent in agents}
        for name, client in clients.items():
            check_model_client(client, f"agent {name}: model")
        self._setups = {
            agent.name: LoopSetup(
                config=agent.loop_config(commit_timeout=commit_timeout),
                model=clients[agent.name],
                hooks=agent.hook_runner(),
                access_policy=agent.access_policy(),
            )
            for agent in agents
        }

    def tool_resources(self) -> tuple[ToolResource, ...]:
        """The distinct resources of every hosted agent's tools, in tool order."""
        seen: dict[int, ToolResource] = {}
        for agent in self.agents:
            for tool in agent.tools:
                if isinstance(tool, OpenedTool):
                    resource = tool.resource()
                    seen.setdefault(id(resource), resource)
        return tuple(seen.values())

    @contextlib.asynccontextmanager
    async def tools_open(self) -> AsyncIterator[None]:
        """Open the tools' resources for the body; close them in reverse order.

        Run the service inside it: its loops have stopped (and so called
        their last tool) when the body returns, so nothing uses a resource
        while it closes. Opening never raises (a resource that cannot start
        logs so and retries on its next use).
        """
        resources = self.tool_resources()
        try:
            for resource in resources:
                await resource.open()
            yield
        finally:
            for resource in reversed(resources):
                await resource.aclose()

    @property
    def names(self) -> tuple[str, ...]:
        """The hosted agents' names, in the order given."""
        return tuple(a.name for a in self.agents)

    def warnings(self) -> list[str]:
        """Start-up messages: agents whose tool calls are all denied."""
        return [
            f"agent {a.name!r} has no access policy: every tool call is denied "
            "(give it access=AccessRules(...))"
            for a in self.agents
            if a.access is None and a.tools
        ]

    def setup_for(self, loop_id: LoopId, agent: str) -> LoopSetup:
        """The setup of a loop bound to (or asking for) ``agent``.

        ``""`` means the host's single agent. An agent not hosted here -- or
        ``""`` while several are -- gets a refusing setup: its inputs are
        answered ``TurnRejected{unknown_agent}``.
        """
        if not agent and len(self._setups) == 1:
            return next(iter(self._setups.values()))
        setup = self._setups.get(agent)
        if setup is not None:
            return setup
        first = next(iter(self._setups.values()))
        return LoopSetup(
            config=LoopConfig(
                model=first.config.model,
                agent_name=agent,
                commit_timeout=self._commit_timeout,
                hosted=False,
            ),
            model=first.model,
        )
