"""The loop-actor deployable: turnstream's loops as a Kafka consumer-group member.

A table of contents:

- ``settings``: :data:`SETTINGS` (every setting declared once: the CLI's options
  and ``docs/settings.md`` are generated from it) and :class:`ActorSettings`,
  validated once from flags and environment (:func:`parse_settings`);
- ``app``: the composition root -- :func:`build_service`, :func:`run_service`;
- ``startup``: :func:`run`, every start-up step of ``turnstream actor run``
  (broker probe, topics, ``/metrics``, signals, the service);
- ``model_choice``: :class:`ModelChoice`, the model spec checked at start-up;
- ``agents``: the hosted agents -- :func:`load_agent` (``--agent
  package.module:attribute``) and :func:`hosted_agents` (those, or the built-in
  ``turnstream`` agent of ``--model``/``--tools``/``--system-prompt``);
- ``tools``: the demo tool set;
- ``gc_policy``: the process's garbage-collector threshold (``--gc-threshold``);
- ``instance``: the static group membership, one instance id per local slot;
- ``metrics_http``: the health endpoint, Prometheus ``/metrics`` and ``/ready``;
- ``__main__``: ``python -m turnstream.loop_actor``, an alias of the one entry
  point, ``turnstream actor run`` (which reads the flags and installs the signal
  handlers).

Composition root: may import every layer; nothing imports it.
"""

from turnstream.loop_actor.agents import DEMO_AGENT_NAME, hosted_agents, load_agent
from turnstream.loop_actor.app import Built, build_service, run_service
from turnstream.loop_actor.settings import ActorSettings, parse_settings
from turnstream.loop_actor.startup import run
from turnstream.loop_actor.tools import DemoTool, tool_set

__all__ = [
    "DEMO_AGENT_NAME",
    "ActorSettings",
    "Built",
    "DemoTool",
    "build_service",
    "hosted_agents",
    "load_agent",
    "parse_settings",
    "run",
    "run_service",
    "tool_set",
]
