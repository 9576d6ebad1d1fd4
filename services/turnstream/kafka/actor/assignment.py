"""How the commands partitions are shared out among the service's processes.

Owns :func:`assignors`: the partition assignment strategies the service's
consumer offers its group, most preferred first. The sticky assignor keeps a
partition with its owner across rebalances whenever the balance allows it, so
a member joining or leaving moves only the partitions it must; the range
assignor stays second so a group still running an older release (range only)
agrees on a protocol during a rolling upgrade.

aiokafka's sticky assignor keeps the member's previous assignment on the
*class*, so two consumers in one process would overwrite each other's
history; each consumer gets a subclass of its own. Part of
``turnstream.kafka``.
"""

from __future__ import annotations

from typing import Any

from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.sticky.sticky_assignor import (
    StickyPartitionAssignor,
)

__all__ = ["assignors"]


def assignors() -> tuple[type[Any], ...]:
    """Fresh strategies for one consumer: sticky (with its own memory), range."""
    sticky = type(
        "ServiceStickyAssignor",
        (StickyPartitionAssignor,),
        {
            "member_assignment": None,
            "generation": StickyPartitionAssignor.DEFAULT_GENERATION_ID,
            "_latest_partition_movements": None,
        },
    )
    return (sticky, RangePartitionAssignor)
