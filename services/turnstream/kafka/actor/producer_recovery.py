"""Keeping a partition writer's transactional producer usable after a failure.

Owns :class:`ProducerRecovery`: it starts the partition's transactional
producer, and after a failed transaction ends that transaction on the
coordinator before anything else is written -- abort, then re-initialise the
producer, whose ``InitProducerId`` aborts whatever the coordinator still holds
(aiokafka's abort alone may end it client-side only) -- and, for a commit
whose answer was lost, finds out whether it happened by looking for one of its
records. A re-initialisation bumps the epoch, so it asks ``still_owner`` first:
a zombie must never fence the real owner. Also owns
:func:`transaction_refusal`, the ACL refusal aiokafka keeps to itself. What a
failure means for the writer's requests stays the writer's
(:mod:`~turnstream.kafka.actor.writer`).

Part of ``turnstream.kafka`` (the only aiokafka importer).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from turnstream.errors import TransportError
from turnstream.kafka.actor.transaction import Outcome, Phase, TransactionBuilder
from turnstream.kafka.actor.writer_settings import WriterSettings, WriterState
from turnstream.kafka.clients import KafkaClients, stop_client
from turnstream.kafka.errors import KafkaAuthorizationError
from turnstream.kafka.faults import Fault, classify
from turnstream.kafka.reader import record_visible

__all__ = ["ProducerRecovery", "transaction_refusal"]

# The writer's log lines keep the writer's logger (operators filter on it).
_log = logging.getLogger("turnstream.kafka.actor.writer")


class ProducerRecovery:
    """Starts the partition's producer, and recovers it after a failed transaction.

    Args:
        txn: the transactions (their producer and phase) to recover.
        clients: builds the transactional producer.
        settings: timeouts and retry delays.
        transactional_id: the stable transactional id.
        still_owner: whether this process still owns the partition.
        is_open: whether the writer is still open.
        broke: turns the writer FENCED or FAILED.
        note_denial: keeps the first ACL denial.
    """

    def __init__(
        self,
        *,
        txn: TransactionBuilder,
        clients: KafkaClients,
        settings: WriterSettings,
        transactional_id: str,
        still_owner: Callable[[], bool],
        is_open: Callable[[], bool],
        broke: Callable[[WriterState], None],
        note_denial: Callable[[Exception], None],
    ) -> None:
        self.partition = txn.partition
        self._txn = txn
        self._clients = clients
        self._settings = settings
        self._transactional_id = transactional_id
        self._still_owner = still_owner
        self._is_open = is_open
        self._broke = broke
        self._note_denial = note_denial

    async def new_producer(self, seconds: float) -> Any:
        """A started transactional producer (its start fences older epochs)."""
        producer = self._clients.transactional_producer(
            self._transactional_id,
            transaction_timeout_ms=self._settings.transaction_timeout_ms,
        )
        await self._clients.start(producer, operation="start producer", seconds=seconds)
        return producer

    async def recover(self, exc: Exception, outcome: Outcome, deadline: float) -> str:
        """After a failed transaction: ``"retry"``, ``"committed"`` or ``"stop"``."""
        phase, self._txn.phase = self._txn.phase, Phase.IDLE
        fault = classify(exc)
        if fault is Fault.FENCED:
            self._broke(WriterState.FENCED)
            return "stop"
        if phase is Phase.OPEN:
            # Abort, then re-initialise whatever the abort did: aiokafka's abort
            # after an abortable error ends the transaction client-side only
            # (module docstring), and a refused record leaves the idempotent
            # sequence numbers behind the broker's. InitProducerId aborts what
            # the coordinator still holds; nothing of it becomes visible.
            await self._abort(deadline)
            if not self._is_open():
                return "stop"
            return "retry" if await self._rebuild(deadline) else "stop"
        # The transaction's state is unknown (committing, fatal, abort failed):
        # a fresh producer resolves it on the coordinator.
        if not await self._rebuild(deadline):
            return "stop"
        if phase is not Phase.COMMITTING or outcome.probe is None:
            return "retry"
        return await self._committed_or_not(outcome, deadline)

    async def _committed_or_not(self, outcome: Outcome, deadline: float) -> str:
        """Whether a commit whose answer was lost happened: look for its record."""
        assert outcome.probe is not None  # noqa: S101 - checked by the caller
        assert outcome.probe_offset is not None  # noqa: S101 - set with probe
        try:
            async with asyncio.timeout(max(deadline - time.monotonic(), 0.001)):
                visible = await record_visible(
                    self._clients, outcome.probe, outcome.probe_offset
                )
        except (TimeoutError, TransportError):
            _log.error("commit outcome unknown", extra={"partition": self.partition})
            self._broke(WriterState.FAILED)
            return "stop"
        return "committed" if visible else "retry"

    async def _abort(self, deadline: float) -> bool:
        try:
            async with asyncio.timeout(max(deadline - time.monotonic(), 0.001)):
                await self._txn.producer.abort_transaction()
        except Exception as exc:  # noqa: BLE001 - any failure: rebuild instead
            if classify(exc) is Fault.FENCED:
                self._broke(WriterState.FENCED)
            return False
        return True

    async def _rebuild(self, deadline: float) -> bool:
        if not self._is_open():
            return False
        if not self._still_owner():
            # Re-initialising would bump the epoch and fence the real owner.
            self._broke(WriterState.FENCED)
            return False
        old, self._txn.producer = self._txn.producer, None
        await stop_client(old, seconds=min(self._settings.close_timeout, 2.0))
        backoff = self._settings.backoff_initial
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._broke(WriterState.FAILED)
                return False
            try:
                self._txn.producer = await self.new_producer(remaining)
            except KafkaAuthorizationError as exc:
                # Re-initialising cannot succeed until an operator grants it:
                # stop now (the coordinator aborts the open transaction on
                # its timeout) rather than retry until the deadline.
                self._note_denial(exc)
                self._broke(WriterState.FAILED)
                return False
            except TransportError:
                await asyncio.sleep(min(backoff, max(remaining, 0)))
                backoff = min(backoff * 2, self._settings.backoff_max)
                continue
            return True


def transaction_refusal(producer: Any) -> BaseException | None:
    """Why aiokafka put the open transaction into error, if it did.

    A refused AddPartitionsToTxn (an ACL denies a partition's topic) or
    TxnOffsetCommit is recorded only on the transaction manager's waiter; the
    next call (``send_offsets_to_transaction``) then fails with
    ``IllegalOperation``, which says nothing of the ACL, and an abort replaces
    the waiter, leaving its exception unobserved (asyncio logs it at ERROR).
    Reading it here both names the cause and observes it.
    """
    manager = getattr(producer, "_txn_manager", None)
    waiter = getattr(manager, "_transaction_waiter", None)
    if not isinstance(waiter, asyncio.Future) or not waiter.done():
        return None
    if waiter.cancelled():
        return None
    return waiter.exception()
