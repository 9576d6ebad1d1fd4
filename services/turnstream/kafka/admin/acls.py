"""The least-privilege Kafka ACLs of each turnstream role, and applying them.

Owns :class:`Acl` (one ALLOW grant: principal, operation, resource, pattern),
:class:`Role`, :func:`role_acls` (what the actor, client and analytics
principals need, for a topic set and group) and :func:`apply_acls` (create them
through the admin API as a principal allowed to alter ACLs).

What each role needs, and why:

* **actor** -- Read the commands topic and its consumer group (it consumes and
  commits offsets in its transactions); Read events and loops (restore after a
  takeover); Write events, loops, deltas and the dead-letter topic; Write on the
  transactional ids ``{txn_prefix}-{group}-`` (prefix; one per commands
  partition); Write on each topic its agents' tools stage records to (the
  effect topics: the records go out in the actor's transactions).
* **client** (``chat``, ``tail``, the Session API) -- Write commands; Read
  events and deltas (no consumer group: it assigns partitions); Describe the
  actors' group (``chat`` checks that an actor runs).
* **analytics** -- Read events and its consumer group ``{app_id}``; Create
  and Write its output topic (it never reads it); Create, Read and Write the
  topics prefixed ``{app_id}-`` (its changelog, restored on start); Write its
  transactional ids (prefix ``{app_id}-``, exactly-once).

No role needs a Cluster permission: the start-up check tolerates a denied
DescribeConfigs, and since Kafka 3.0 an idempotent producer needs only Write
on a topic it writes and a transactional one Write on its transactional id
(not IdempotentWrite on the cluster; the secured lane runs every role without
it). Kafka has no per-key ACL: a principal that may read the events topic reads
every loop's events, and one that may write commands can address any loop.

Part of ``turnstream.kafka`` (the only aiokafka importer).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Final

from aiokafka.protocol.admin import CreateAclsRequest

from turnstream.errors import ConfigError, TransportError
from turnstream.kafka.admin.probe import admin_session, bounded
from turnstream.kafka.connection import KafkaConnection
from turnstream.kafka.diagnose import CLUSTER
from turnstream.kafka.errors import KafkaAuthorizationError
from turnstream.kafka.security import KafkaSecurity
from turnstream.kafka.topology import TopicNames

__all__ = [
    "Acl",
    "AclOperation",
    "PatternType",
    "ResourceType",
    "Role",
    "RoleNames",
    "apply_acls",
    "role_acls",
]

_ALLOW: Final = 3
_ANY_HOST: Final = "*"
_CLUSTER_AUTHORIZATION_FAILED: Final = 31
_SECURITY_DISABLED: Final = 54


class _KafkaCode(IntEnum):
    """A Kafka protocol code whose name Kafka's tools print in CamelCase."""

    @property
    def label(self) -> str:
        """As Kafka's tools print it (``IdempotentWrite``, ``TransactionalId``)."""
        return "".join(part.capitalize() for part in self.name.split("_"))


class AclOperation(_KafkaCode):
    """Kafka's ACL operations (the codes of the wire protocol)."""

    READ = 3
    WRITE = 4
    CREATE = 5
    DESCRIBE = 8
    IDEMPOTENT_WRITE = 12


class ResourceType(_KafkaCode):
    """Kafka's ACL resource types."""

    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


class PatternType(IntEnum):
    """How the resource name matches: exactly, or as a prefix."""

    LITERAL = 3
    PREFIXED = 4


class Role(StrEnum):
    """The principals a turnstream deployment has."""

    ACTOR = "actor"
    CLIENT = "client"
    ANALYTICS = "analytics"


@dataclass(frozen=True, slots=True, kw_only=True)
class Acl:
    """One ALLOW grant (any host).

    Attributes:
        principal: e.g. ``User:actor``.
        operation: what is allowed.
        resource_type: on which kind of resource.
        resource: its name (``kafka-cluster`` for the cluster).
        pattern: literal name or prefix.
    """

    principal: str
    operation: AclOperation
    resource_type: ResourceType
    resource: str
    pattern: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        pattern = "prefix " if self.pattern is PatternType.PREFIXED else ""
        return (
            f"ALLOW {self.principal} {self.operation.label} "
            f"{self.resource_type.label} {pattern}{self.resource}"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RoleNames:
    """The names the ACLs are about.

    Attributes:
        topics: the topic set (with the deployment's prefix and suffix).
        group_id: the loop actors' consumer group.
        txn_prefix: the actors' transactional-id prefix.
        analytics_app_id: the analytics worker's app id (= group).
        analytics_topic: the analytics worker's output topic.
        effect_topics: the topics the actors' tools stage records to
            (``ToolContext.stage_record``).
    """

    topics: TopicNames
    group_id: str = "turnstream-loop-actor"
    txn_prefix: str = "turnstream"
    analytics_app_id: str = "turnstream-analytics"
    analytics_topic: str = "turnstream.analytics.v1"
    effect_topics: tuple[str, ...] = ()


def _grant(
    principal: str,
    operation: AclOperation,
    name: str,
    pattern: PatternType = PatternType.LITERAL,
    *,
    on: ResourceType = ResourceType.TOPIC,
) -> Acl:
    return Acl(
        principal=principal,
        operation=operation,
        resource_type=on,
        resource=name,
        pattern=pattern,
    )


def role_acls(role: Role, principal: str, names: RoleNames) -> tuple[Acl, ...]:
    """The grants ``principal`` needs to act as ``role`` (module docstring)."""
    if not principal.strip() or ":" not in principal:
        raise ConfigError(
            "principal", f"{principal!r}: expected TYPE:NAME, e.g. User:x"
        )
    read, write, create = AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE
    t = names.topics
    prefixed = PatternType.PREFIXED
    match role:
        case Role.ACTOR:
            return (
                _grant(principal, read, t.commands),
                _grant(principal, read, names.group_id, on=ResourceType.GROUP),
                _grant(principal, read, t.events),
                _grant(principal, read, t.loops),
                _grant(principal, read, t.history),
                _grant(principal, write, t.events),
                _grant(principal, write, t.loops),
                _grant(principal, write, t.history),
                _grant(principal, write, t.deltas),
                _grant(principal, write, t.dead_letters),
                _grant(
                    principal,
                    write,
                    f"{names.txn_prefix}-{names.group_id}-",
                    prefixed,
                    on=ResourceType.TRANSACTIONAL_ID,
                ),
                *(_grant(principal, write, topic) for topic in names.effect_topics),
            )
        case Role.CLIENT:
            return (
                _grant(principal, write, t.commands),
                _grant(principal, read, t.events),
                _grant(principal, read, t.deltas),
                _grant(
                    principal,
                    AclOperation.DESCRIBE,
                    names.group_id,
                    on=ResourceType.GROUP,
                ),
            )
        case Role.ANALYTICS:
            app = names.analytics_app_id
            return (
                _grant(principal, read, t.events),
                _grant(principal, read, app, on=ResourceType.GROUP),
                # It only publishes to its output topic (readers of the
                # snapshots are principals of their own).
                *(
                    _grant(principal, operation, names.analytics_topic)
                    for operation in (create, write)
                ),
                *(
                    _grant(principal, operation, f"{app}-", prefixed)
                    for operation in (create, write, read)
                ),
                _grant(
                    principal,
                    write,
                    f"{app}-",
                    prefixed,
                    on=ResourceType.TRANSACTIONAL_ID,
                ),
            )
    raise AssertionError(role)  # pragma: no cover - the match is exhaustive


async def apply_acls(
    conn: KafkaConnection,
    acls: Iterable[Acl],
    *,
    security: KafkaSecurity | None = None,
) -> int:
    """Create ``acls`` (an existing identical grant is left as it is).

    Returns:
        How many grants were sent.

    Raises:
        KafkaAuthorizationError: this principal may not alter ACLs.
        TransportError: the broker refused a grant, or has no authorizer.
    """
    wanted: Sequence[Acl] = tuple(acls)
    async with admin_session(conn, security=security) as admin:
        for acl in wanted:
            request = CreateAclsRequest(
                acl.resource_type.value,
                acl.resource,
                acl.pattern.value,
                acl.principal,
                _ANY_HOST,
                acl.operation.value,
                _ALLOW,
            )
            response = await bounded(
                admin._send_request(request),
                seconds=conn.request_timeout,
                operation="create ACLs",
            )
            for code, message in response.creation_responses:
                _check(code, message, acl, security or KafkaSecurity())
    return len(wanted)


def _check(code: int, message: str | None, acl: Acl, security: KafkaSecurity) -> None:
    if code == 0:
        return
    if code == _CLUSTER_AUTHORIZATION_FAILED:
        raise KafkaAuthorizationError(
            principal=f"User:{security.sasl_username or 'ANONYMOUS'}",
            permission="Alter",
            resource_type="Cluster",
            resource=CLUSTER,
            operation="create ACLs",
        )
    reason = message or f"error {code}"
    if code == _SECURITY_DISABLED:
        reason = "the broker has no authorizer (authorizer.class.name unset)"
    raise TransportError(f"create ACL {acl}", reason, retriable=False)
