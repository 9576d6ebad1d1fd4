"""The loop-actor deployable: turnstream's loops as a Kafka consumer-group member.

A table of contents:

- ``settings``: :class:`ActorSettings`, validated once from the flags of
  ``turnstream actor run`` and the environment (:func:`parse_settings`);
- ``app``: the composition root -- :func:`build_service`, :func:`run_service`;
- ``tools``: the demo tool set;
- ``__main__``: ``python -m turnstream.loop_actor``, an alias of the one entry
  point, ``turnstream actor run`` (which reads the flags and installs the signal
  handlers).

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
