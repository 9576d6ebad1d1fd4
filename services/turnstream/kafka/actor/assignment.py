"""How the commands partitions are shared out among the service's processes.

Owns :func:`assignors`: the partition assignment strategy the service's
consumer offers its group. The sticky assignor keeps a partition with its owner
across rebalances whenever the balance allows it, so a member joining or
leaving moves only the partitions it must.

Exactly one strategy, on purpose: aiokafka (0.14) sends a JoinGroup request per
configured strategy within one join, each with a different protocol list, and
the broker treats the second as a member changing its metadata during the
rebalance, so it starts another one. Two members joining at once then rebalance
without end (measured: 3 consumers, 70 generations in 8 s, no assignment).
The price: a group still running a release with another strategy must be
stopped before this one joins (the broker refuses a join whose strategies share
none with the group's, ``InconsistentGroupProtocol``).

aiokafka's sticky assignor keeps the member's previous assignment on the
*class*, so two consumers in one process would overwrite each other's
history; each consumer gets a subclass of its own. Part of
``turnstream.kafka``.
"""

from __future__ import annotations

from typing import Any

from aiokafka.coordinator.assignors.sticky.sticky_assignor import (
    StickyPartitionAssignor,
)

__all__ = ["assignors"]


def assignors() -> tuple[type[Any], ...]:
    """A fresh strategy for one consumer: sticky, with its own memory."""
    sticky = type(
        "ServiceStickyAssignor",
        (StickyPartitionAssignor,),
        {
            "member_assignment": None,
            "generation": StickyPartitionAssignor.DEFAULT_GENERATION_ID,
            "_latest_partition_movements": None,
        },
    )
    return (sticky,)
