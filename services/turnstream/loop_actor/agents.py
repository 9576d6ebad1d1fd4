"""The agents a loop-actor service hosts: loaded by import path, or the demo.

Owns :func:`load_agent` (``package.module:attribute`` -> an
:class:`~turnstream.runtime.agent.Agent`), :func:`hosted_agents` (the
``--agent`` settings, or the built-in agent) and :data:`DEMO_AGENT_NAME`.

Without ``--agent`` the service hosts one built-in agent named ``turnstream``
made of ``--model``, ``--tools`` and ``--system-prompt``; its access policy is
explicit: the demo tools (``add``, ``word_count``) are allowed, anything else is
denied. Loops made before agents existed are bound to that name, so they keep
running. Part of the composition root.
"""

from __future__ import annotations

import importlib
import inspect
import os
import traceback
from collections.abc import Callable
from types import ModuleType

from turnstream.errors import ConfigError
from turnstream.loop_actor.settings import ActorSettings
from turnstream.loop_actor.tools import tool_set
from turnstream.runtime.agent import AccessRules, Agent

__all__ = ["DEMO_AGENT_NAME", "hosted_agents", "load_agent"]

DEMO_AGENT_NAME = "turnstream"
"""The built-in agent's name (also the binding of loops made before agents)."""


def load_agent(path: str) -> Agent:
    """Import ``package.module:attribute``: an :class:`Agent` or a function making one.

    Raises:
        ConfigError: the module cannot be imported, the attribute is missing,
            or it is not an agent.
    """
    module_name, _, attribute = path.partition(":")
    module = _import(path, module_name.strip())
    value: object = getattr(module, attribute.strip(), None)
    if value is None:
        raise ConfigError("agent", f"{path!r}: {module_name} has no {attribute!r}")
    if not isinstance(value, Agent) and callable(value):
        factory: Callable[[], object] = value
        try:
            inspect.signature(factory).bind()
        except (TypeError, ValueError):
            raise ConfigError(
                "agent", f"{path!r} is a callable that needs arguments, not an Agent"
            ) from None
        value = factory()
    if not isinstance(value, Agent):
        raise ConfigError(
            "agent", f"{path!r} is a {type(value).__name__}, not a turnstream Agent"
        )
    return value


def _import(path: str, module_name: str) -> ModuleType:
    """Import the agent's module; any failure is a usage error (exit 2).

    The message names the exception's type and where it was raised, not its
    text (the same rule as :mod:`turnstream.runtime.user_code`).
    """
    try:
        return importlib.import_module(module_name)
    except ConfigError:
        raise  # an Agent refused at construction already names its setting
    except ImportError as exc:
        missing = exc.name or type(exc).__name__
        if exc.name is not None and not module_name.startswith(exc.name):
            reason = f"importing {module_name!r} failed: no module {missing!r}"
        else:
            reason = (
                f"cannot import {module_name!r} ({missing}); --agent imports "
                f"from the current directory, {os.getcwd()}"
            )
        raise ConfigError("agent", f"{path!r}: {reason}") from None
    except Exception as exc:  # noqa: BLE001 - the user's module raised while loading
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        raise ConfigError(
            "agent",
            f"{path!r}: importing {module_name!r} raised "
            f"{type(exc).__name__}{where} (try: python -c 'import {module_name}')",
        ) from None


def demo_agent(settings: ActorSettings) -> Agent:
    """The built-in agent: ``--model``, ``--tools``, ``--system-prompt``."""
    tools = tool_set(settings.tools)
    return Agent(
        name=DEMO_AGENT_NAME,
        model=settings.model,
        system_prompt=settings.system_prompt,
        tools=tools,
        access=AccessRules(allow=[t.spec.name for t in tools]),
    )


def hosted_agents(settings: ActorSettings) -> tuple[Agent, ...]:
    """The agents ``settings`` name (import paths), else the built-in one.

    Raises:
        ConfigError: an agent cannot be loaded.
    """
    if not settings.agents:
        return (demo_agent(settings),)
    return tuple(load_agent(path) for path in settings.agents)
