"""A static group member's leave: its partitions move now, not after the session.

Owns :func:`leave_group`. A static member (``group.instance.id``) that stops
does not leave its consumer group (aiokafka, like the Java client, skips the
LeaveGroup of a static member), so the coordinator keeps its partitions for it
until the session timeout: right for a restart in place, a gap of seconds for a
member that is going away for good. LeaveGroup v3 and later (KIP-345) name the
members to remove by instance id, which is how the group's remove-members call
ends a static membership at once. aiokafka has no v3 request, so it is declared
here from Kafka's protocol definition and sent to the group's coordinator.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Int16, Int32, Schema, String

from turnstream.errors import TransportError
from turnstream.kafka.clients import KafkaClients, started_admin
from turnstream.kafka.faults import transport_error

__all__ = ["leave_group"]

_log = logging.getLogger(__name__)

_UNKNOWN_MEMBER_ID = 25
"""The member is not in the group (it left already, or its session expired)."""


class _LeaveGroupResponseV3(Response):  # type: ignore[misc]  # untyped aiokafka base
    API_KEY = 13
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        (
            "members",
            Array(
                ("member_id", String("utf-8")),
                ("group_instance_id", String("utf-8")),
                ("error_code", Int16),
            ),
        ),
    )


class _LeaveGroupRequestV3(RequestStruct):  # type: ignore[misc]  # untyped aiokafka base
    API_KEY = 13
    API_VERSION = 3
    RESPONSE_TYPE = _LeaveGroupResponseV3
    SCHEMA = Schema(
        ("group_id", String("utf-8")),
        (
            "members",
            Array(
                ("member_id", String("utf-8")),
                ("group_instance_id", String("utf-8")),
            ),
        ),
    )


class _LeaveGroupRequest(Request[_LeaveGroupRequestV3]):  # type: ignore[misc]  # untyped aiokafka base
    API_KEY = 13

    def __init__(self, group_id: str, instance_id: str) -> None:
        self._group_id = group_id
        self._member = ("", instance_id)

    def build(self, request_struct_class: type[_LeaveGroupRequestV3]) -> Any:
        return request_struct_class(self._group_id, [self._member])


async def leave_group(
    clients: KafkaClients,
    *,
    group_id: str,
    instance_id: str,
    seconds: float,
) -> bool:
    """Remove the static member ``instance_id`` from ``group_id`` now.

    Call it once the member's consumer has stopped (a running consumer would
    only join again). The instance id names the member (its member id is sent
    empty, as the group's remove-members call does). Bounded by ``seconds``
    per call.

    Returns:
        True when the coordinator removed the member; False when it was not in
        the group any more (nothing to hand over).

    Raises:
        TransportError: the coordinator could not be found or answered with an
            error (typed; the caller decides whether a slow handover matters).
    """
    async with started_admin(clients, seconds=seconds) as admin:
        try:
            async with asyncio.timeout(seconds):
                node = await admin.find_coordinator(group_id)
                response = await admin._client.send(
                    node, _LeaveGroupRequest(group_id, instance_id)
                )
        except (TimeoutError, KafkaError, OSError) as exc:
            raise transport_error(
                "leave the group",
                exc,
                security=clients.security,
                permission="Read",
                resource=group_id,
            ) from exc
    codes = [response.error_code, *(m[2] for m in response.members)]
    if any(code == _UNKNOWN_MEMBER_ID for code in codes):
        return False
    failed = next((code for code in codes if code != 0), None)
    if failed is not None:
        name = for_code(failed).__name__
        raise TransportError("leave the group", f"refused: {name}", retriable=False)
    return True
