"""Changing topics after CreateTopics: wait until they are visible, alter safely.

Owns :func:`wait_until_visible` (CreateTopics returns once the controller committed
the topics; a broker's metadata cache catches up a moment later, so a lookup right
after would fail), the safe-drift policy :func:`is_safe_drift` (which differences
between a declared and an existing topic ``turnstream topics apply --alter`` may fix
in place) and :func:`alter_topic_configs`, which applies such a fix without
touching the topic's other settings.

Why not one AlterConfigs call with just the changed keys: aiokafka speaks only the
legacy AlterConfigs API, which *replaces* a topic's whole set of overrides -- every
override left out (``retention.ms=-1`` on the journal, say) silently falls back to
the broker default. So the current overrides are read first (DescribeConfigs,
``config_source`` = dynamic topic config), sent back with the changes merged in,
and read back again. A change someone else makes between the read and the write is
lost; ``--alter`` is an operator's command, not something services race on.

Part of ``turnstream.kafka``, the only package allowed to import aiokafka.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import for_code

from turnstream.errors import TransportError
from turnstream.kafka.admin.probe import bounded
from turnstream.kafka.connection import KafkaConnection
from turnstream.kafka.errors import ConfigMismatch, TopicAlterError

__all__ = [
    "SAFE_DRIFT_KEYS",
    "alter_topic_configs",
    "is_safe_drift",
    "safe_changes",
    "topic_layout",
    "topic_overrides",
    "wait_until_visible",
]

_POLL_S: Final = 0.2
_UNKNOWN_TOPIC_OR_PARTITION: Final = 3
_LEADER_NOT_AVAILABLE: Final = 5
_NOT_YET = frozenset({_UNKNOWN_TOPIC_OR_PARTITION, _LEADER_NOT_AVAILABLE})
# DescribeConfigs (v1+) config_source of a value set on the topic itself.
_DYNAMIC_TOPIC_CONFIG: Final = 1

_ANY_VALUE: Final = frozenset({"max.message.bytes"})
_RETENTION: Final = frozenset({"retention.ms", "retention.bytes"})
# Raising it only asks more replicas to acknowledge; no stored record changes.
_UPWARDS: Final = frozenset({"min.insync.replicas"})
SAFE_DRIFT_KEYS: Final = _ANY_VALUE | _RETENTION | _UPWARDS
"""Topic configs ``--alter`` may change in place (retention and min ISR only
upwards)."""


async def wait_until_visible(
    admin: Any, conn: KafkaConnection, partitions: Mapping[str, int]
) -> None:
    """Return once every topic is in the metadata with all partitions led.

    Args:
        admin: a started admin client.
        conn: the per-call timeouts; ``request_timeout`` bounds the whole wait.
        partitions: topic name to its expected partition count.

    Raises:
        TransportError: not visible within ``conn.request_timeout`` seconds, or
            the broker answered with another error.
    """
    pending = dict(partitions)
    try:
        async with asyncio.timeout(conn.request_timeout):
            while pending:
                metadata = await bounded(
                    admin.describe_topics(sorted(pending)),
                    seconds=conn.request_timeout,
                    operation="describe created topics",
                )
                for entry in metadata:
                    name = entry["topic"]
                    code = int(entry["error_code"])
                    if code not in (0, *_NOT_YET):
                        raise _describe_error(name, code)
                    led = [p for p in entry["partitions"] if int(p["leader"]) >= 0]
                    if code == 0 and len(led) == pending.get(name, -1):
                        pending.pop(name, None)
                if pending:
                    await asyncio.sleep(_POLL_S)
    except TimeoutError:
        raise TransportError(
            f"wait for topics {', '.join(sorted(pending))}",
            f"not in the broker's metadata with every partition led after "
            f"{conn.request_timeout:g} s",
            retriable=True,
        ) from None


def is_safe_drift(mismatch: ConfigMismatch) -> bool:
    """Whether ``topics apply --alter`` may fix ``mismatch`` in place. Pure.

    Safe: ``max.message.bytes`` (a limit on new records; nothing stored changes),
    ``retention.ms``/``retention.bytes`` when data is kept at least as long
    as before (``-1``, or a limit no smaller than the current one), and a higher
    ``min.insync.replicas`` (topics created before replication was decided per
    cluster). Never safe: partitions, replication factor, ``cleanup.policy``
    (compacting a journal erases history), shorter retention, a lower min ISR, any
    other key, or a key the broker did not report.
    """
    if mismatch.actual is None:
        return False
    if mismatch.key in _ANY_VALUE:
        return True
    if mismatch.key in _RETENTION:
        return _keeps_data_as_long(mismatch.actual, mismatch.expected)
    if mismatch.key in _UPWARDS:
        return _not_lower(mismatch.actual, mismatch.expected)
    return False


def _not_lower(actual: str, expected: str) -> bool:
    try:
        return int(expected) >= int(actual)
    except ValueError:
        return False


def _keeps_data_as_long(actual: str, expected: str) -> bool:
    try:
        old, new = int(actual), int(expected)
    except ValueError:
        return False
    if new < 0:  # -1: no limit
        return True
    return old >= 0 and new >= old


async def topic_overrides(
    admin: Any, conn: KafkaConnection, topic: str
) -> dict[str, str]:
    """The configs set on ``topic`` itself (not broker or static defaults).

    Raises:
        TopicAlterError: the broker refused, reports no config sources, or hides
            an override's value (so it could not be written back).
        TransportError: the call failed or timed out.
    """
    responses = await bounded(
        admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, configs=None)]
        ),
        seconds=conn.request_timeout,
        operation=f"describe configs of topic {topic}",
    )
    overrides: dict[str, str] = {}
    for entry in _resources(responses):
        _check_answer(topic, entry, reading=True)
        for config in entry["config_entries"]:
            if "config_source" not in config:
                raise TopicAlterError(
                    topic, "the broker reports no config sources", retriable=False
                )
            if config["config_source"] != _DYNAMIC_TOPIC_CONFIG:
                continue
            if config["config_value"] is None:
                raise TopicAlterError(
                    topic,
                    f"override {config['config_names']} is not readable and "
                    "would be lost",
                    retriable=False,
                )
            overrides[config["config_names"]] = config["config_value"]
    return overrides


def topic_layout(entry: Mapping[str, Any]) -> tuple[int, int]:
    """A DescribeTopics answer's partition count and replication factor.

    Raises:
        TransportError: the answer is an error (a caller handles the codes it
            expects before).
    """
    code = int(entry["error_code"])
    if code != 0:
        raise _describe_error(entry["topic"], code)
    partitions = entry["partitions"]
    rf = min((len(p["replicas"]) for p in partitions), default=0)
    return len(partitions), rf


def _resources(responses: Iterable[Any]) -> Iterator[dict[str, Any]]:
    # DescribeConfigs and AlterConfigs answer with a list of responses (one per
    # broker asked), each listing its resources.
    for response in responses:
        yield from response.to_object()["resources"]


def _check_answer(topic: str, entry: Mapping[str, Any], *, reading: bool) -> None:
    """Raise :class:`TopicAlterError` if the broker refused ``topic``'s resource.

    ``reading``: the answer to reading its configs, else to altering them (which
    carries the broker's message).
    """
    code = int(entry["error_code"])
    if code == 0:
        return
    error = for_code(code)
    refusal = f"{error.__name__} ({code})"
    raise TopicAlterError(
        topic,
        f"reading its configs: {refusal}"
        if reading
        else f"{refusal}: {entry['error_message'] or 'no detail'}",
        retriable=bool(error.retriable),
    )


def _describe_error(topic: str, code: int) -> TransportError:
    error = for_code(code)
    return TransportError(
        f"describe topic {topic}",
        f"{error.__name__} ({code})",
        retriable=bool(error.retriable),
    )


async def describe_topic_configs(
    admin: Any,
    conn: KafkaConnection,
    resources: Sequence[ConfigResource],
    *,
    check: Callable[[int, str], None],
) -> dict[str, dict[str, str | None]]:
    """Each topic's config values asked for in ``resources``.

    ``check(code, topic)`` sees each topic's error code first, so a caller can
    raise its own error for a code it handles (a denial, a topic not visible
    yet); any other error is a :class:`TransportError`.

    Raises:
        TransportError: the call failed, or a topic's answer is an error.
    """
    responses = await bounded(
        admin.describe_configs(resources),
        seconds=conn.request_timeout,
        operation="describe topic configs",
    )
    configs: dict[str, dict[str, str | None]] = {}
    for entry in _resources(responses):
        code = int(entry["error_code"])
        check(code, entry["resource_name"])
        if code != 0:
            raise TransportError(
                f"describe configs of topic {entry['resource_name']}",
                entry["error_message"] or f"error {code}",
                retriable=bool(for_code(code).retriable),
            )
        configs[entry["resource_name"]] = {
            c["config_names"]: c["config_value"] for c in entry["config_entries"]
        }
    return configs


async def alter_topic_configs(
    admin: Any, conn: KafkaConnection, topic: str, changes: Mapping[str, str]
) -> dict[str, str]:
    """Set ``changes`` on ``topic``, keeping every other override it has.

    Reads the topic's overrides, writes them back with ``changes`` merged in, then
    waits (bounded by ``conn.request_timeout``) until the broker reports exactly
    that set.

    Args:
        admin: a started admin client.
        conn: the per-call timeouts.
        topic: an existing topic.
        changes: config key to its new value.

    Returns:
        The topic's overrides now in force.

    Raises:
        TopicAlterError: the broker refused the change, an override could not be
            preserved, or the new set was not confirmed in time.
        TransportError: a call failed or timed out.
    """
    merged = {**await topic_overrides(admin, conn, topic), **changes}
    responses = await bounded(
        admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, configs=merged)]
        ),
        seconds=conn.request_timeout,
        operation=f"alter configs of topic {topic}",
    )
    for entry in _resources(responses):
        _check_answer(topic, entry, reading=False)
    await _confirm(admin, conn, topic, merged)
    return merged


async def _confirm(
    admin: Any, conn: KafkaConnection, topic: str, wanted: Mapping[str, str]
) -> None:
    # The answering broker applies the committed change to its metadata a moment
    # after the controller acknowledged it.
    expected = {k: v.strip() for k, v in wanted.items()}
    try:
        async with asyncio.timeout(conn.request_timeout):
            while True:
                found = await topic_overrides(admin, conn, topic)
                if {k: v.strip() for k, v in found.items()} == expected:
                    return
                await asyncio.sleep(_POLL_S)
    except TimeoutError:
        raise TopicAlterError(
            topic,
            f"the new configs were not confirmed within {conn.request_timeout:g} s",
            retriable=True,
        ) from None


def safe_changes(mismatches: Sequence[ConfigMismatch]) -> dict[str, str]:
    """The config changes among ``mismatches`` that ``--alter`` may apply."""
    return {m.key: m.expected for m in mismatches if is_safe_drift(m)}
