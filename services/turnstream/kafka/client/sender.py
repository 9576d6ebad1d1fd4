"""A session's command sender: one producer, one command record per send.

Owns :class:`CommandSender`, the commands side of
:class:`~turnstream.kafka.client.session.KafkaSession`: it starts the
idempotent ``acks=all`` producer (an ACL denial names the commands topic),
sends a command keyed by its loop id to the partition computed for that key,
refuses a record over the topic's size unsent, and replaces the producer when
its sequence state broke; and :func:`record_size`. Part of
``turnstream.kafka``; imports the wire codec, never the session.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka.errors import (
    InvalidProducerEpoch,
    KafkaError,
    MessageSizeTooLargeError,
    OutOfOrderSequenceNumber,
    RecordTooLargeError,
    UnknownProducerId,
)

from turnstream.commands import AnyCommand
from turnstream.errors import (
    CommandNotConfirmedError,
    CommandTooLargeError,
    TransportError,
)
from turnstream.ids import CommandId
from turnstream.kafka.clients import KafkaClients, stop_client
from turnstream.kafka.diagnose import authorization_error
from turnstream.kafka.errors import KafkaAuthorizationError
from turnstream.kafka.faults import transport_error
from turnstream.kafka.records import loop_key, partition_for
from turnstream.kafka.topology import COMMAND_RECORD_OVERHEAD
from turnstream.runtime.tracing import TRACEPARENT
from turnstream.wire import Codec

__all__ = ["CommandSender", "record_size"]

_log = logging.getLogger(__name__)

_BROKEN_PRODUCER = (OutOfOrderSequenceNumber, UnknownProducerId, InvalidProducerEpoch)
"""Producer errors no retry recovers from: the producer itself must be replaced."""


def record_size(value: bytes, key: bytes, headers: Sequence[tuple[str, bytes]]) -> int:
    """A one-record batch's size as the broker counts it (an upper bound)."""
    header_bytes = sum(len(name.encode()) + len(data) for name, data in headers)
    return len(value) + len(key) + header_bytes + COMMAND_RECORD_OVERHEAD


@dataclass(eq=False, repr=False, kw_only=True)
class CommandSender:
    """The commands producer of one session (see the module docstring)."""

    clients: KafkaClients
    topic: str
    codec: Codec
    partitions: int
    max_command_bytes: int
    _producer: Any = field(init=False, default=None)
    _broken: bool = field(init=False, default=False)

    @property
    def started(self) -> bool:
        """Whether the producer started (and was not stopped)."""
        return self._producer is not None

    async def _started_producer(self) -> Any:
        """A new idempotent producer, started (``TransportError`` if not)."""
        producer = self.clients.idempotent_producer("session")
        await self.clients.start(producer, operation="start producer")
        return producer

    async def start(self) -> None:
        """Start the producer.

        Raises:
            KafkaAuthorizationError: an ACL denies Write on the commands topic.
            TransportError: Kafka could not be reached in time.
        """
        try:
            self._producer = await self._started_producer()
        except TransportError as exc:
            # Since Kafka 3.0 an idempotent producer's InitProducerId needs
            # Write on some topic: name the one it writes, not the cluster.
            denied = authorization_error(
                exc.__cause__ or exc,
                security=self.clients.security,
                operation="start the commands producer",
                permission="Write",
                resource=self.topic,
            )
            if denied is not None and denied.resource_type == "Cluster":
                denied = KafkaAuthorizationError(
                    principal=denied.principal,
                    permission="Write",
                    resource_type="Topic",
                    resource=self.topic,
                    operation="start the commands producer",
                )
            if denied is not None:
                raise denied from exc
            raise

    async def stop(self) -> None:
        """Stop the producer (bounded by the request timeout)."""
        producer, self._producer = self._producer, None
        if producer is not None:
            await stop_client(producer, seconds=self.clients.connection.request_timeout)

    async def _renew(self) -> None:
        """Replace a producer whose sequence state broke (see :meth:`send`).

        A start that fails (the broker is not back yet) leaves the old one in
        place; the next send tries again.
        """
        try:
            producer = await self._started_producer()
        except TransportError:
            return  # the broker is not back yet: the next send tries again
        old, self._producer = self._producer, producer
        self._broken = False
        if old is not None:
            await stop_client(old, seconds=self.clients.connection.connect_timeout)
        _log.info("commands producer renewed after a sequence error")

    async def send(
        self, command: AnyCommand, *, traceparent: str | None = None
    ) -> CommandId:
        """Send ``command``; return its id once the broker has it.

        See :meth:`~turnstream.kafka.client.session.KafkaSession.send` (the
        caller checks that the producer started).
        """
        if self._broken:
            await self._renew()
        value = self.codec.marshal_command(command)
        key = loop_key(command.loop_id)
        headers = self.codec.kafka_headers(command)
        if traceparent is not None:
            headers.append((TRACEPARENT, traceparent.encode("ascii")))
        size = record_size(value, key, headers)
        if size > self.max_command_bytes:
            raise CommandTooLargeError(
                command.command_id,
                command.loop_id,
                size=size,
                limit=self.max_command_bytes,
            )
        try:
            async with asyncio.timeout(self.clients.connection.request_timeout):
                await self._producer.send_and_wait(
                    self.topic,
                    value,
                    key=key,
                    partition=partition_for(key, self.partitions),
                    headers=headers,
                )
        except (MessageSizeTooLargeError, RecordTooLargeError) as exc:
            # The topic takes less than this client was told: refused, never
            # stored, so "it may still arrive" would be wrong advice.
            raise CommandTooLargeError(
                command.command_id, command.loop_id, size=size, limit=None
            ) from exc
        except (TimeoutError, KafkaError) as exc:
            denied = authorization_error(
                exc,
                security=self.clients.security,
                operation="send a command",
                permission="Write",
                resource=self.topic,
            )
            if denied is not None:  # refused, not lost: it never arrives
                raise denied from exc
            if isinstance(exc, _BROKEN_PRODUCER):
                # The idempotent producer's sequence state no longer matches
                # the broker's (seen after a broker restart): it would refuse
                # every later send. A fresh producer (new producer id) sends
                # the next attempt; a retry by command id is applied once.
                self._broken = True
            reason = transport_error("send command", exc).reason
            raise CommandNotConfirmedError(
                command.command_id, command.loop_id, reason
            ) from exc
        return CommandId(command.command_id)
