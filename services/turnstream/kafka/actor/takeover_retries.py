"""When a partition whose takeover failed may be taken over again.

Owns :class:`TakeoverRetries`: per partition, a jittered backoff
(:class:`~turnstream.kafka.backoff.Backoff`) and the time before which the
consumer loop must not try again, so a partition that cannot be opened or
rebuilt right now (Kafka unreachable, a loop not restorable yet) is retried
without flooding the broker or the log. A failing streak is logged by its
caller once; its end is logged here once. Part of ``turnstream.kafka``.
"""

from __future__ import annotations

import asyncio
import logging

from turnstream.kafka.actor.membership import SERVICE_LOG
from turnstream.kafka.backoff import Backoff

__all__ = ["TakeoverRetries"]

_log = logging.getLogger(SERVICE_LOG)


class TakeoverRetries:
    """The partitions whose takeover failed: when each may be tried again.

    Args:
        initial: the first delay's upper bound, in seconds.
        cap: the largest delay's upper bound, in seconds.
    """

    def __init__(self, *, initial: float, cap: float) -> None:
        self._initial = initial
        self._cap = cap
        self._retries: dict[int, tuple[Backoff, float]] = {}

    def __contains__(self, partition: int) -> bool:
        """Whether ``partition`` is in a failing streak."""
        return partition in self._retries

    def later(self, partition: int) -> None:
        """Back the next takeover attempt of ``partition`` off (jittered)."""
        backoff, _ = self._retries.get(partition) or (
            Backoff(self._initial, self._cap),
            0.0,
        )
        not_before = asyncio.get_running_loop().time() + backoff.next()
        self._retries[partition] = (backoff, not_before)

    def due(self, partition: int) -> bool:
        """Whether ``partition`` may be tried now."""
        retry = self._retries.get(partition)
        return retry is None or asyncio.get_running_loop().time() >= retry[1]

    def forget(self, partition: int) -> None:
        """Drop ``partition``'s streak without a word (it is not ours any more)."""
        self._retries.pop(partition, None)

    def taken_over(self, partition: int) -> None:
        """A takeover succeeded: log the end of a failing streak once."""
        retry = self._retries.pop(partition, None)
        if retry is not None:
            _log.info(
                "partition taken over again",
                extra={"partition": partition, "attempts": retry[0].failures + 1},
            )
