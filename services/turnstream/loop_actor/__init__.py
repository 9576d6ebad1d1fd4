"""The loop-actor deployable: turnstream's loops as a Kafka consumer-group member.

A table of contents:

- ``settings``: :class:`ActorSettings`, read once from flags and environment
  (:func:`parse_settings`);
- ``app``: the composition root -- :func:`build_service`, :func:`run_service`;
- ``tools``: the demo tool set;
- ``__main__``: ``python -m turnstream.loop_actor`` (signal handlers live there).

Composition root: may import every layer; nothing imports it.
"""

from turnstream.loop_actor.app import Built, build_service, run_service
from turnstream.loop_actor.settings import ActorSettings, parse_settings
from turnstream.loop_actor.tools import DemoTool, tool_set

__all__ = [
    "ActorSettings",
    "Built",
    "DemoTool",
    "build_service",
    "parse_settings",
    "run_service",
    "tool_set",
]
