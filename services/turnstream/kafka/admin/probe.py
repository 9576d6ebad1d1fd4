"""Admin-client plumbing: open a bounded admin session and probe broker readiness.

Owns ``admin_session`` (an ``AIOKafkaAdminClient`` whose start, calls and close all
run under timeouts and whose failures become typed turnstream errors; it is built by
:class:`~turnstream.kafka.clients.KafkaClients`, so TLS and SASL settings reach it
exactly as they reach producers and consumers), ``check_broker``
(the readiness probe: metadata plus a DescribeConfigs admin call),
``broker_answers``, the synchronous wrapper the development broker manager polls,
``describe_replication`` (broker count and ``default.replication.factor``, what
``topics apply`` decides replication from), ``transactional_round_trip``, the
deeper self-check ``turnstream smoke`` runs, and ``check_worker_grants`` (the
group and transactional-id grants ``analytics run`` checks before faust starts).
``bounded`` and ``denied_by_code`` turn an ACL denial into
:class:`~turnstream.kafka.errors.KafkaAuthorizationError` (exit 6 on the
command line), never a transport error.

Part of ``turnstream.kafka``, the only package allowed to import aiokafka.
"""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from io import BytesIO
from typing import Any, TypeVar

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    TopicAuthorizationFailedError,
)
from aiokafka.protocol.types import Array, Int16, String

from turnstream.errors import TransportError
from turnstream.kafka.clients import KafkaClients, start_client, stop_client
from turnstream.kafka.connection import KafkaConnection
from turnstream.kafka.diagnose import (
    CLUSTER,
    authorization_error,
    diagnose_connection,
    principal,
)
from turnstream.kafka.errors import BrokerUnreachableError, KafkaAuthorizationError
from turnstream.kafka.faults import transport_error
from turnstream.kafka.security import KafkaSecurity

__all__ = [
    "ClusterInfo",
    "ClusterReplication",
    "RoundTrip",
    "admin_clients",
    "admin_session",
    "bounded",
    "broker_answers",
    "check_broker",
    "check_worker_grants",
    "describe_replication",
    "group_members",
    "transactional_round_trip",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """What a successful readiness probe learned.

    Attributes:
        cluster_id: the KRaft cluster id.
        controller_id: the active controller's node id.
        broker_ids: ids of the registered brokers.
    """

    cluster_id: str
    controller_id: int
    broker_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ClusterReplication:
    """What a cluster says about replicating new topics.

    Attributes:
        brokers: how many brokers are registered (unfenced).
        default_replication_factor: the broker's ``default.replication.factor``.
        default_is_set: whether that value was configured (broker file or dynamic
            config) rather than Kafka's built-in default of 1.
    """

    brokers: int
    default_replication_factor: int
    default_is_set: bool


# Kafka's TOPIC_AUTHORIZATION_FAILED and CLUSTER_AUTHORIZATION_FAILED codes.
_DENIED = (29, 31)
_GROUP_AUTHORIZATION_FAILED = 30
# DescribeConfigs config_source of a value nobody configured.
_DEFAULT_CONFIG_SOURCE = 5


async def bounded(
    awaitable: Awaitable[T],
    *,
    seconds: float,
    operation: str,
    security: KafkaSecurity | None = None,
    permission: str = "Describe",
) -> T:
    """Await ``awaitable`` under a timeout, turning aiokafka failures into ours.

    Args:
        awaitable: one network call.
        seconds: the time limit.
        operation: names the call in the error (e.g. ``"describe configs"``).
        security: whose principal a denial names.
        permission: the ACL operation the call needs, named by a denial.

    Raises:
        KafkaAuthorizationError: an ACL denies the call.
        TransportError: the call timed out or aiokafka raised ``KafkaError``.
    """
    try:
        async with asyncio.timeout(seconds):
            return await awaitable
    except TimeoutError:
        raise TransportError(
            operation, f"timed out after {seconds:g} s", retriable=True
        ) from None
    except KafkaError as exc:
        denied = authorization_error(
            exc, security=security, operation=operation, permission=permission
        )
        if denied is not None:
            raise denied from exc
        raise TransportError(
            operation, f"{type(exc).__name__}: {exc}", retriable=bool(exc.retriable)
        ) from exc


def denied_by_code(
    code: int,
    *,
    security: KafkaSecurity | None,
    operation: str,
    permission: str,
    resource: str,
) -> KafkaAuthorizationError | None:
    """The typed denial for a response's error code, or ``None`` if it is none.

    Args:
        code: Kafka's error code for one entry of a response.
        security: whose principal was refused.
        operation: what was being done.
        permission: the ACL operation the request needs.
        resource: the topic the entry is about (a Cluster denial names the
            cluster instead).
    """
    if code not in _DENIED:
        return None
    cluster = code == _DENIED[1]
    return KafkaAuthorizationError(
        principal=principal(security),
        permission=permission,
        resource_type="Cluster" if cluster else "Topic",
        resource=CLUSTER if cluster else resource,
        operation=operation,
    )


def admin_clients(
    conn: KafkaConnection, security: KafkaSecurity | None = None
) -> KafkaClients:
    """The client factory every admin call of this module builds its clients from.

    Args:
        conn: where Kafka is, and the per-call timeouts.
        security: protocol, SASL and TLS settings; plaintext by default.
    """
    return KafkaClients(
        connection=conn, security=security or KafkaSecurity(), client_id="turnstream"
    )


@asynccontextmanager
async def admin_session(
    conn: KafkaConnection, *, security: KafkaSecurity | None = None
) -> AsyncIterator[AIOKafkaAdminClient]:
    """Yield a started admin client; close it on exit.

    Args:
        conn: where Kafka is, and the per-call timeouts.
        security: protocol, SASL and TLS settings; plaintext by default.

    Raises:
        ConfigError: a TLS file of ``security`` cannot be loaded.
        BrokerUnreachableError: bootstrapping failed or timed out.
    """
    client = admin_clients(conn, security).admin()
    try:
        try:
            async with asyncio.timeout(conn.connect_timeout):
                await client.start()
        except TimeoutError:
            raise BrokerUnreachableError(
                conn.bootstrap, f"no answer within {conn.connect_timeout:g} s"
            ) from None
        except (KafkaError, OSError) as exc:
            # aiokafka logs why the bootstrap failed and raises only that it
            # did: find the cause (a refused login, an untrusted certificate …).
            diagnosed = await diagnose_connection(conn, security or KafkaSecurity())
            if diagnosed is not None:
                raise diagnosed from exc
            if isinstance(exc, KafkaConnectionError):
                raise BrokerUnreachableError(
                    conn.bootstrap,
                    "connection failed; is a broker running there? "
                    "(local one: `turnstream broker up`)",
                ) from exc
            raise BrokerUnreachableError(
                conn.bootstrap, str(exc) or type(exc).__name__
            ) from exc
        yield client
    finally:
        async with asyncio.timeout(conn.request_timeout):
            await client.close()


async def check_broker(
    conn: KafkaConnection, *, security: KafkaSecurity | None = None
) -> ClusterInfo:
    """Succeed only when the cluster answers admin calls.

    An open port is not enough: the broker must have registered with the controller
    (metadata lists it) and answer a DescribeConfigs request.

    Args:
        conn: where Kafka is, and the per-call timeouts.
        security: protocol, SASL and TLS settings; plaintext by default.

    Raises:
        ConfigError: a TLS file of ``security`` cannot be loaded.
        BrokerUnreachableError: any step failed or timed out.
    """
    try:
        async with admin_session(conn, security=security) as admin:
            cluster: dict[str, Any] = await bounded(
                admin.describe_cluster(),
                seconds=conn.request_timeout,
                operation="describe cluster",
            )
            brokers = tuple(int(b["node_id"]) for b in cluster.get("brokers", []))
            controller = int(cluster.get("controller_id", -1))
            if not brokers or controller < 0:
                raise BrokerUnreachableError(
                    conn.bootstrap, "no broker registered with the controller yet"
                )
            resource = ConfigResource(
                ConfigResourceType.BROKER, str(brokers[0]), configs={"node.id": None}
            )
            responses = await bounded(
                admin.describe_configs([resource]),
                seconds=conn.request_timeout,
                operation="describe broker configs",
            )
            for response in responses:
                for entry in response.to_object()["resources"]:
                    # A denied DescribeConfigs is still an answer from a broker
                    # that serves admin requests: no cluster permission needed.
                    if entry["error_code"] not in (0, *_DENIED):
                        raise BrokerUnreachableError(
                            conn.bootstrap,
                            f"DescribeConfigs failed with error {entry['error_code']}",
                        )
            return ClusterInfo(str(cluster.get("cluster_id")), controller, brokers)
    except TransportError as exc:
        if isinstance(exc, BrokerUnreachableError) or not exc.is_retriable:
            raise
        raise BrokerUnreachableError(conn.bootstrap, str(exc)) from exc


async def describe_replication(
    admin: Any, conn: KafkaConnection, security: KafkaSecurity | None = None
) -> ClusterReplication:
    """Ask a started admin client how many brokers run and how they replicate.

    Args:
        admin: a started ``AIOKafkaAdminClient`` (or a stand-in with its methods).
        conn: the per-call timeouts.
        security: whose principal a denial names.

    Raises:
        KafkaAuthorizationError: DescribeConfigs on the cluster is denied
            (administration: run it as an admin principal).
        TransportError: a call failed, timed out, or no broker is registered.
    """
    cluster: dict[str, Any] = await bounded(
        admin.describe_cluster(),
        seconds=conn.request_timeout,
        operation="describe cluster",
    )
    brokers = sorted(int(b["node_id"]) for b in cluster.get("brokers", []))
    if not brokers:
        raise TransportError(
            "describe cluster", "no broker registered yet", retriable=True
        )
    key = "default.replication.factor"
    resource = ConfigResource(
        ConfigResourceType.BROKER, str(brokers[0]), configs={key: None}
    )
    responses = await bounded(
        admin.describe_configs([resource]),
        seconds=conn.request_timeout,
        operation="describe broker configs",
    )
    value, source = "1", _DEFAULT_CONFIG_SOURCE
    for response in responses:
        for entry in response.to_object()["resources"]:
            denied = denied_by_code(
                entry["error_code"],
                security=security,
                operation="describe broker configs",
                permission="DescribeConfigs",
                resource=CLUSTER,
            )
            if denied is not None:
                raise denied
            if entry["error_code"] != 0:
                raise TransportError(
                    "describe broker configs",
                    entry.get("error_message") or f"error {entry['error_code']}",
                    retriable=False,
                )
            for config in entry["config_entries"]:
                if config["config_names"] == key and config["config_value"]:
                    value = config["config_value"]
                    source = int(config.get("config_source", _DEFAULT_CONFIG_SOURCE))
    return ClusterReplication(
        brokers=len(brokers),
        default_replication_factor=int(value),
        default_is_set=source != _DEFAULT_CONFIG_SOURCE,
    )


def broker_answers(
    bootstrap: str,
    timeout: float = 5.0,
    *,
    brokers: int = 1,
    security: KafkaSecurity | None = None,
) -> bool:
    """Synchronous readiness probe for ``turnstream.devbroker.DevBroker``.

    Must be called from a thread without a running event loop.

    Args:
        bootstrap: the broker's ``host:port`` (or a cluster's list).
        timeout: bound for the connect and for each admin call.
        brokers: how many brokers must be registered (a cluster's node count).
        security: how to log in (a secured broker's admin); plaintext by default.
    """
    conn = KafkaConnection(
        bootstrap=bootstrap, request_timeout=timeout, connect_timeout=timeout
    )
    try:
        info = asyncio.run(check_broker(conn, security=security))
    except TransportError:
        return False
    return len(info.broker_ids) >= brokers


@dataclass(frozen=True, slots=True)
class RoundTrip:
    """The outcome of ``transactional_round_trip``.

    Attributes:
        topic: the scratch topic used (deleted afterwards).
        partition: the partition written.
        offset: the offset the committed record got.
        key: the key written and read back.
        value: the value written and read back.
        seconds: wall time from the first send to reading the record back.
    """

    topic: str
    partition: int
    offset: int
    key: bytes
    value: bytes
    seconds: float


async def transactional_round_trip(
    conn: KafkaConnection,
    *,
    topic: str | None = None,
    security: KafkaSecurity | None = None,
) -> RoundTrip:
    """Write one record in a committed transaction and read it back ``read_committed``.

    Creates a one-partition scratch topic, writes with a transactional (hence
    idempotent) producer, reads with a ``read_committed`` consumer, and deletes the
    topic again. Proves that transactions, the transaction coordinator and fetches
    work end to end.

    Args:
        conn: where Kafka is, and the per-call timeouts.
        topic: the scratch topic name; a unique ``turnstream.smoke.<hex>`` by default.
        security: protocol, SASL and TLS settings; plaintext by default.

    Raises:
        ConfigError: a TLS file of ``security`` cannot be loaded.
        BrokerUnreachableError: no admin session could be opened.
        TransportError: a step failed or timed out.
    """
    run = uuid.uuid4().hex[:12]
    topic = topic or f"turnstream.smoke.{run}"
    key, value = b"smoke", f"hello from turnstream smoke {run}".encode()
    seconds = conn.request_timeout
    clients = admin_clients(conn, security)
    async with admin_session(conn, security=security) as admin:
        response = await bounded(
            admin.create_topics(
                [NewTopic(topic, 1, 1)], timeout_ms=conn.request_timeout_ms
            ),
            seconds=seconds + 5,
            operation="create scratch topic",
        )
        for entry in response.to_object()["topic_errors"]:
            denied = denied_by_code(
                entry["error_code"],
                security=security,
                operation=f"create scratch topic {topic}",
                permission="Create",
                resource=topic,
            )
            if denied is not None:
                raise denied
            if entry["error_code"] != 0:
                raise TransportError(
                    f"create scratch topic {topic}",
                    f"error {entry['error_code']}: {entry['error_message']}",
                    retriable=False,
                )
        try:
            return await _round_trip(clients, topic, key, value)
        finally:
            await bounded(
                admin.delete_topics([topic], timeout_ms=conn.request_timeout_ms),
                seconds=seconds + 5,
                operation="delete scratch topic",
            )


async def _round_trip(
    clients: KafkaClients, topic: str, key: bytes, value: bytes
) -> RoundTrip:
    seconds = clients.connection.request_timeout
    producer = clients.transactional_producer(f"turnstream-smoke-{uuid.uuid4().hex}")
    consumer = clients.consumer("smoke", auto_offset_reset="earliest")
    partition = TopicPartition(topic, 0)
    started = time.monotonic()
    try:
        await bounded(producer.start(), seconds=seconds, operation="start producer")
        async with asyncio.timeout(seconds):
            await producer.begin_transaction()
            sent = await producer.send_and_wait(topic, value, key=key, partition=0)
            await producer.commit_transaction()
        await bounded(consumer.start(), seconds=seconds, operation="start consumer")
        consumer.assign([partition])
        await bounded(
            consumer.seek_to_beginning(partition), seconds=seconds, operation="seek"
        )
        record = await bounded(
            consumer.getone(partition), seconds=seconds, operation="read back"
        )
    except TimeoutError:
        raise TransportError(
            "transactional produce", f"timed out after {seconds:g} s", retriable=True
        ) from None
    finally:
        async with asyncio.timeout(seconds):
            await consumer.stop()
        async with asyncio.timeout(seconds):
            await producer.stop()
    if record.key != key or record.value != value or record.offset != sent.offset:
        raise TransportError(
            "transactional round trip",
            f"read back offset {record.offset}, wrote offset {sent.offset}",
            retriable=False,
        )
    return RoundTrip(
        topic, sent.partition, sent.offset, key, value, time.monotonic() - started
    )


async def group_members(
    conn: KafkaConnection,
    group_id: str,
    *,
    topic: str | None = None,
    security: KafkaSecurity | None = None,
) -> int:
    """How many live members consumer group ``group_id`` has (0: none, or no group).

    Used to tell a user that no loop actor is running, rather than let them wait.
    With ``topic``, only members subscribed to it count: one group id may be
    shared by the actors of several topic sets (the default group is), and an
    actor of another set would never answer this one's commands.

    Raises:
        BrokerUnreachableError: bootstrapping failed or timed out.
        KafkaAuthorizationError: Describe on the group is denied (the group
            looks empty then, whoever is in it).
        TransportError: the broker did not answer in time.
    """
    denied = KafkaAuthorizationError(
        principal=principal(security),
        permission="Describe",
        resource_type="Group",
        resource=group_id,
        operation="describe consumer group",
    )
    async with admin_session(conn, security=security) as admin:
        try:
            responses = await bounded(
                admin.describe_consumer_groups([group_id]),
                seconds=conn.request_timeout,
                operation="describe consumer group",
                security=security,
            )
        except KafkaAuthorizationError as exc:
            # Finding the group's coordinator is what is refused: aiokafka
            # names its message, not the group, as the resource.
            raise denied from exc
    count = 0
    for response in responses:
        for group in response.to_object().get("groups", ()):
            if group.get("group") != group_id:
                continue
            if group.get("error_code") == _GROUP_AUTHORIZATION_FAILED:
                raise denied
            for member in group.get("members") or ():
                if topic is None or topic in _subscription(member):
                    count += 1
    return count


def _subscription(member: dict[str, Any]) -> list[str]:
    """The topics a consumer-protocol member subscribed to (empty: unreadable).

    Every version of the consumer protocol's metadata starts with the version
    and the subscribed topics; later versions only add fields after them.
    """
    raw = member.get("member_metadata") or b""
    try:
        data = BytesIO(raw)
        Int16.decode(data)  # the metadata's version
        topics = Array(String("utf-8")).decode(data)
    except (ValueError, struct.error):
        return []
    return [t for t in topics or () if isinstance(t, str)]


async def check_worker_grants(
    conn: KafkaConnection,
    *,
    security: KafkaSecurity | None,
    group_id: str,
    topic: str,
    transactional_id: str | None,
) -> None:
    """Check the group and transactional-id grants a stream worker needs.

    A worker (faust) denied these does not fail: it waits for its group or
    its transactions forever. Asked first, each is one request that fails
    at once: the group's committed offset for ``topic`` (Read on the group,
    Describe on the topic, which Read implies; no join, so running members
    are not disturbed) and, for exactly-once, a
    transactional producer's initialisation under ``transactional_id``
    (Write on the transactional id; it writes nothing).

    Raises:
        KafkaAuthorizationError: an ACL denies one of them.
        TransportError: the broker could not be asked.
    """
    clients = admin_clients(conn, security)
    seconds = conn.request_timeout
    consumer = clients.consumer("preflight", group_id=group_id)
    await start_client(
        consumer, seconds=seconds, operation="start consumer", security=security
    )
    try:
        async with asyncio.timeout(seconds):
            await consumer.committed(TopicPartition(topic, 0))
    except (TimeoutError, KafkaError) as exc:
        cause: BaseException = exc
        if type(exc) is KafkaError and "TopicAuthorizationFailed" in str(exc):
            # aiokafka re-raises a denied partition of OffsetFetch as a bare
            # KafkaError naming the error: the topic is hidden (no Read).
            cause = TopicAuthorizationFailedError(topic)
        raise transport_error(
            f"read the offsets of group {group_id}",
            cause,
            security=security,
            permission="Read",
            resource=group_id,
        ) from exc
    finally:
        await stop_client(consumer, seconds=seconds)
    if transactional_id is None:
        return
    producer = clients.transactional_producer(transactional_id)
    await start_client(
        producer,
        seconds=seconds,
        operation=f"start a transactional producer as {transactional_id}",
        security=security,
    )
    await stop_client(producer, seconds=seconds)
