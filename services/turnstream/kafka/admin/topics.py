"""The declared topic set (``infra/topics.yaml``) and its idempotent application.

Owns the topic spec model and its loading, the resolution of a spec into concrete
topics (partition/replication overrides, name prefix/suffix for isolated test sets),
the replication decision (``choose_replication``: an explicit factor, else the
cluster's ``default.replication.factor``, else ``min(3, brokers)``; never a silent 1
on a multi-broker cluster; ``min.insync.replicas`` = RF - 1 on durable topics),
the pure diff between a declared topic and what the broker reports, and
``apply_topics``: create what is missing (and wait until it is visible), validate
what exists (partition count, replication factor and every declared config key, via
DescribeConfigs), and report each topic as created, OK, altered or mismatched.
Mismatches are never silently accepted; with ``alter=True`` the safe ones
(``topic_changes.is_safe_drift``) are fixed in place and the rest still reported.

Part of ``turnstream.kafka``, the only package allowed to import aiokafka.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import yaml
from aiokafka.admin import NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import for_code
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PositiveInt,
    ValidationError,
    model_validator,
)

from turnstream.errors import ConfigError, TransportError
from turnstream.kafka.admin.probe import (
    ClusterReplication,
    admin_session,
    bounded,
    denied_by_code,
    describe_replication,
)
from turnstream.kafka.admin.topic_changes import (
    alter_topic_configs,
    describe_topic_configs,
    safe_changes,
    topic_layout,
    wait_until_visible,
)
from turnstream.kafka.connection import KafkaConnection
from turnstream.kafka.errors import (
    ConfigMismatch,
    TopicConfigMismatchError,
    TopicCreateError,
)
from turnstream.kafka.security import KafkaSecurity

__all__ = [
    "ApplyReport",
    "DesiredTopic",
    "ReplicationChoice",
    "TopicDefaults",
    "TopicOutcome",
    "TopicResult",
    "TopicSetSpec",
    "TopicSpec",
    "apply_topics",
    "choose_replication",
    "delete_topics",
    "diff_topic",
    "load_topic_set",
    "parse_topic_set",
    "reconcile_topics",
    "resolve_topics",
]

_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_TOPIC_ALREADY_EXISTS = 36
_UNKNOWN_TOPIC_OR_PARTITION = 3
_METADATA_RETRY_S = 0.2
# Config keys whose value is an unordered comma-separated list.
_LIST_KEYS = frozenset({"cleanup.policy"})
_MIN_ISR = "min.insync.replicas"
# Three copies survive one broker loss with acks=all still writable (min ISR 2).
_TARGET_REPLICATION = 3


def _config_value(value: object) -> str:
    # YAML gives ints and bools; Kafka configs are strings ("-1", "true").
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    raise ValueError(f"config values must be scalars, got {type(value).__name__}")


ConfigValue = Annotated[str, BeforeValidator(_config_value)]


def _check_name(name: str) -> str:
    if not _TOPIC_NAME.match(name) or name in {".", ".."}:
        raise ValueError(
            f"{name!r} is not a legal topic name ([A-Za-z0-9._-], 1..249 chars)"
        )
    return name


TopicName = Annotated[str, BeforeValidator(_check_name)]


class TopicDefaults(BaseModel):
    """Settings every topic inherits unless it overrides them.

    ``replication_factor`` unset (the default) means: decided per cluster when the
    set is applied (see ``choose_replication``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    partitions: PositiveInt = 3
    replication_factor: PositiveInt | None = None


class TopicSpec(BaseModel):
    """One declared topic.

    Attributes:
        name: the base name (a prefix/suffix may be added when resolving).
        key: what the record key is (documentation, e.g. ``loop_id``).
        description: one line on what the topic holds.
        partitions: overrides the default partition count.
        durable: whether losing an acknowledged record is data loss; durable topics
            get ``min.insync.replicas`` = RF - 1 (at least 1), so ``acks=all`` means
            "on two brokers" on a cluster. ``false`` for the lossy deltas.
        config: topic configs, validated key by key against the broker.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: TopicName
    key: str
    description: str = ""
    partitions: PositiveInt | None = None
    durable: bool = True
    config: dict[str, ConfigValue] = Field(default_factory=dict)


class TopicSetSpec(BaseModel):
    """The whole of ``infra/topics.yaml``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    defaults: TopicDefaults = TopicDefaults()
    topics: tuple[TopicSpec, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> TopicSetSpec:
        seen: set[str] = set()
        for topic in self.topics:
            if topic.name in seen:
                raise ValueError(f"topic {topic.name} is declared twice")
            seen.add(topic.name)
        return self


def parse_topic_set(text: str, *, source: str = "topics.yaml") -> TopicSetSpec:
    """Parse and validate a topic set from YAML text.

    Raises:
        ConfigError: not YAML, or not a valid topic set (the message says where).
    """
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(source, f"not valid YAML: {exc}") from None
    try:
        return TopicSetSpec.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigError(source, problems) from None


def load_topic_set(path: Path) -> TopicSetSpec:
    """Read and validate ``infra/topics.yaml`` (or another topic set file).

    Raises:
        ConfigError: missing, unreadable or invalid.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(path), f"cannot read: {exc.strerror or exc}") from None
    return parse_topic_set(text, source=str(path))


@dataclass(frozen=True, slots=True)
class DesiredTopic:
    """A concrete topic to create or validate.

    Attributes:
        name: the full topic name.
        partitions: required partition count.
        replication_factor: required replication factor; ``None`` until decided
            from the cluster by ``apply_topics``.
        config: required topic configs (strings, as Kafka reports them).
        durable: gets ``min.insync.replicas`` = RF - 1 once the factor is known.
    """

    name: str
    partitions: int
    replication_factor: int | None
    config: Mapping[str, str] = field(default_factory=dict)
    durable: bool = False

    def with_replication(self, factor: int) -> DesiredTopic:
        """This topic with its replication factor (and a durable one's min ISR)."""
        config = dict(self.config)
        if self.durable and _MIN_ISR not in config:
            config[_MIN_ISR] = str(max(1, factor - 1))
        return DesiredTopic(self.name, self.partitions, factor, config, self.durable)


@dataclass(frozen=True, slots=True)
class ReplicationChoice:
    """The replication factor ``apply_topics`` chose, and why.

    Attributes:
        factor: the replication factor of every undecided topic.
        reason: where it came from, e.g. ``"cluster default"``.
        brokers: how many brokers the cluster has.
    """

    factor: int
    reason: str
    brokers: int

    def describe(self) -> str:
        """E.g. ``replication factor 3 (cluster default, 3 brokers)``."""
        plural = "" if self.brokers == 1 else "s"
        return (
            f"replication factor {self.factor} ({self.reason}, "
            f"{self.brokers} broker{plural})"
        )


def choose_replication(cluster: ClusterReplication) -> ReplicationChoice:
    """Decide the replication factor of topics nobody gave one. Pure.

    The cluster's configured ``default.replication.factor`` wins; a cluster that
    never set it gets ``min(3, brokers)``. Replication factor 1 on several brokers
    is refused: one lost disk would lose journal events, so only an explicit
    ``--replication-factor 1`` may ask for it.

    Raises:
        ConfigError: the choice would be 1 on a multi-broker cluster, or more than
            the brokers there are (naming ``--replication-factor``).
    """
    if cluster.default_is_set:
        factor, reason = cluster.default_replication_factor, "cluster default"
    else:
        factor = min(_TARGET_REPLICATION, cluster.brokers)
        reason = f"min({_TARGET_REPLICATION}, brokers)"
    if factor == 1 and cluster.brokers > 1:
        raise ConfigError(
            "--replication-factor",
            f"the cluster has {cluster.brokers} brokers but its "
            "default.replication.factor is 1: one lost disk would lose events. "
            f"Pass --replication-factor {min(_TARGET_REPLICATION, cluster.brokers)} "
            "(or TURNSTREAM_TOPIC_REPLICATION_FACTOR), or --replication-factor 1 "
            "to accept that",
        )
    if factor > cluster.brokers:
        raise ConfigError(
            "--replication-factor",
            f"the cluster default is {factor} but only {cluster.brokers} broker(s) "
            "are registered; start the others or pass a smaller factor",
        )
    return ReplicationChoice(factor, reason, cluster.brokers)


def resolve_topics(
    spec: TopicSetSpec,
    *,
    partitions: int | None = None,
    replication_factor: int | None = None,
    prefix: str = "",
    suffix: str = "",
) -> tuple[DesiredTopic, ...]:
    """Turn a topic set into concrete topics.

    Args:
        spec: the declared set.
        partitions: overrides every topic's partition count.
        replication_factor: overrides the default replication factor.
        prefix: prepended to every name (tests apply isolated copies).
        suffix: appended to every name.

    Returns:
        The topics; without an override or a declared default their replication
        factor is ``None``, decided from the cluster by ``apply_topics``.

    Raises:
        ConfigError: an override is not positive or a resulting name is illegal.
    """
    if partitions is not None and partitions < 1:
        raise ConfigError("partitions", f"{partitions} is not a positive count")
    if replication_factor is not None and replication_factor < 1:
        raise ConfigError("replication factor", f"{replication_factor} is not positive")
    rf = replication_factor or spec.defaults.replication_factor
    resolved: list[DesiredTopic] = []
    for topic in spec.topics:
        name = f"{prefix}{topic.name}{suffix}"
        try:
            _check_name(name)
        except ValueError as exc:
            raise ConfigError("topic name prefix/suffix", str(exc)) from None
        count = partitions or topic.partitions or spec.defaults.partitions
        desired = DesiredTopic(name, count, None, dict(topic.config), topic.durable)
        resolved.append(desired.with_replication(rf) if rf else desired)
    return tuple(resolved)


def _normalise(key: str, value: str) -> str:
    value = value.strip()
    if key in _LIST_KEYS:
        return ",".join(
            sorted(part.strip() for part in value.split(",") if part.strip())
        )
    return value


def diff_topic(
    desired: DesiredTopic,
    *,
    partitions: int,
    replication_factor: int,
    configs: Mapping[str, str | None],
) -> tuple[ConfigMismatch, ...]:
    """Compare a declared topic (replication decided) with the broker's. Pure.

    Only declared config keys are compared; everything else on the broker is free.

    Args:
        desired: the declared topic.
        partitions: the broker's partition count.
        replication_factor: the broker's replication factor.
        configs: the broker's values for (at least) the declared keys.
    """
    found: list[ConfigMismatch] = []
    if partitions != desired.partitions:
        found.append(
            ConfigMismatch(
                desired.name, "partitions", str(desired.partitions), str(partitions)
            )
        )
    if desired.replication_factor is None:
        raise ValueError(f"{desired.name}: replication factor not decided yet")
    if replication_factor != desired.replication_factor:
        found.append(
            ConfigMismatch(
                desired.name,
                "replication.factor",
                str(desired.replication_factor),
                str(replication_factor),
            )
        )
    for key, expected in desired.config.items():
        actual = configs.get(key)
        if actual is None or _normalise(key, actual) != _normalise(key, expected):
            found.append(ConfigMismatch(desired.name, key, expected, actual))
    return tuple(found)


class TopicOutcome(StrEnum):
    """What ``apply_topics`` did with one topic."""

    CREATED = "created"
    OK = "ok"
    ALTERED = "altered"
    MISMATCH = "mismatch"


@dataclass(frozen=True, slots=True)
class TopicResult:
    """One topic's outcome.

    Attributes:
        topic: the declared topic.
        outcome: created, OK (existed and matched), altered (existed, and its safe
            differences were fixed in place) or mismatch.
        mismatches: the settings that still differ (empty unless ``MISMATCH``).
        altered: the differences fixed in place (``actual`` is the old value).
    """

    topic: DesiredTopic
    outcome: TopicOutcome
    mismatches: tuple[ConfigMismatch, ...] = ()
    altered: tuple[ConfigMismatch, ...] = ()


@dataclass(frozen=True, slots=True)
class ApplyReport:
    """The outcome of one ``apply_topics`` run, in spec order.

    Attributes:
        results: one per topic.
        replication: the replication decision, if any topic came without a factor.
    """

    results: tuple[TopicResult, ...]
    replication: ReplicationChoice | None = None

    @property
    def mismatches(self) -> tuple[ConfigMismatch, ...]:
        """Every mismatch of every topic."""
        return tuple(m for r in self.results for m in r.mismatches)

    @property
    def altered(self) -> tuple[ConfigMismatch, ...]:
        """Every difference fixed in place, of every topic."""
        return tuple(m for r in self.results for m in r.altered)

    @property
    def ok(self) -> bool:
        """Whether every topic now exists as declared."""
        return not self.mismatches

    def outcome(self, name: str) -> TopicOutcome:
        """The outcome for the topic called ``name``.

        Raises:
            KeyError: no such topic in this report.
        """
        for result in self.results:
            if result.topic.name == name:
                return result.outcome
        raise KeyError(name)


async def _create_missing(
    admin: Any,
    conn: KafkaConnection,
    missing: Sequence[DesiredTopic],
    security: KafkaSecurity | None = None,
) -> set[str]:
    """Create topics; return the names created (a concurrent creator's win is fine)."""
    if not missing:
        return set()
    request = [
        NewTopic(
            t.name,
            t.partitions,
            t.replication_factor or -1,
            topic_configs=dict(t.config),
        )
        for t in missing
    ]
    response = await bounded(
        admin.create_topics(request, timeout_ms=conn.request_timeout_ms),
        seconds=conn.request_timeout + 5,
        operation="create topics",
        security=security,
        permission="Create",
    )
    created: set[str] = set()
    # The response carries one error code per topic; a 200-level answer is not success.
    for entry in response.to_object()["topic_errors"]:
        code = int(entry["error_code"])
        denied = denied_by_code(
            code,
            security=security,
            operation=f"create topic {entry['topic']}",
            permission="Create",
            resource=entry["topic"],
        )
        if denied is not None:
            raise denied
        if code == 0:
            created.add(entry["topic"])
        elif code != _TOPIC_ALREADY_EXISTS:
            error = for_code(code)
            raise TopicCreateError(
                entry["topic"],
                code,
                error.__name__,
                entry.get("error_message") or "",
                retriable=bool(error.retriable),
            )
    return created


class _NotVisibleYet(Exception):
    """A topic the controller knows is not yet in the broker's metadata cache."""


async def _describe_once(
    admin: Any, conn: KafkaConnection, topics: Sequence[DesiredTopic]
) -> dict[str, tuple[int, int, dict[str, str | None]]]:
    names = [t.name for t in topics]
    metadata = await bounded(
        admin.describe_topics(names),
        seconds=conn.request_timeout,
        operation="describe topics",
    )
    layout: dict[str, tuple[int, int]] = {}
    for entry in metadata:
        code = int(entry["error_code"])
        if code == _UNKNOWN_TOPIC_OR_PARTITION:
            raise _NotVisibleYet(entry["topic"])
        layout[entry["topic"]] = topic_layout(entry)

    resources = [
        ConfigResource(
            ConfigResourceType.TOPIC, t.name, configs=dict.fromkeys(t.config) or None
        )
        for t in topics
    ]
    configs = await describe_topic_configs(admin, conn, resources, check=_not_visible)
    return {name: (*layout[name], configs.get(name, {})) for name in names}


def _not_visible(code: int, topic: str) -> None:
    if code == _UNKNOWN_TOPIC_OR_PARTITION:
        raise _NotVisibleYet(topic)


async def _describe_existing(
    admin: Any, conn: KafkaConnection, topics: Sequence[DesiredTopic]
) -> dict[str, tuple[int, int, dict[str, str | None]]]:
    """For each topic: (partition count, replication factor, declared config values).

    Topic metadata reaches the broker's cache shortly after the controller commits
    it, so a topic created a moment ago (by us or a concurrent creator) may still
    read as unknown: retry that case for up to one request timeout.
    """
    if not topics:
        return {}
    deadline = time.monotonic() + conn.request_timeout
    while True:
        try:
            return await _describe_once(admin, conn, topics)
        except _NotVisibleYet as exc:
            if time.monotonic() >= deadline:
                raise TransportError(
                    f"describe topic {exc}",
                    f"not in the broker's metadata after {conn.request_timeout:g} s",
                    retriable=True,
                ) from None
            await asyncio.sleep(_METADATA_RETRY_S)


async def reconcile_topics(
    admin: Any,
    conn: KafkaConnection,
    topics: Iterable[DesiredTopic],
    *,
    alter: bool = False,
    security: KafkaSecurity | None = None,
) -> ApplyReport:
    """``apply_topics`` on an already started admin client; never raises a mismatch.

    Creates what is missing and returns only once every created topic is in the
    metadata with all its partitions led, so a lookup right after succeeds. Topics
    without a replication factor get ``choose_replication``'s.

    Args:
        admin: a started ``AIOKafkaAdminClient`` (or a stand-in with its methods).
        conn: the per-call timeouts.
        topics: the concrete topics (see ``resolve_topics``).
        alter: fix safe differences of existing topics in place.
        security: whose principal a denial names.

    Raises:
        ConfigError: replication factor 1 would be chosen on a multi-broker
            cluster (see ``choose_replication``).
        KafkaAuthorizationError: an ACL denies an administrative call (the
            principal is no admin).
        TopicCreateError: the broker refused a topic.
        TopicAlterError: a safe difference could not be altered.
        TransportError: a call failed or timed out.
    """
    desired = tuple(topics)
    replication: ReplicationChoice | None = None
    if any(t.replication_factor is None for t in desired):
        replication = choose_replication(
            await describe_replication(admin, conn, security)
        )
        desired = tuple(
            t if t.replication_factor else t.with_replication(replication.factor)
            for t in desired
        )
    existing = set(
        await bounded(
            admin.list_topics(), seconds=conn.request_timeout, operation="list topics"
        )
    )
    missing = [t for t in desired if t.name not in existing]
    created = await _create_missing(admin, conn, missing, security)
    if created:
        await wait_until_visible(
            admin, conn, {t.name: t.partitions for t in desired if t.name in created}
        )
    to_check = [t for t in desired if t.name not in created]
    actual = await _describe_existing(admin, conn, to_check)
    found = {t.name: _diff(t, actual[t.name]) for t in to_check}

    fixed: dict[str, tuple[ConfigMismatch, ...]] = {}
    if alter:
        for topic in to_check:
            changes = safe_changes(found[topic.name])
            if changes:
                await alter_topic_configs(admin, conn, topic.name, changes)
                fixed[topic.name] = tuple(
                    m for m in found[topic.name] if m.key in changes
                )
        if fixed:
            again = [t for t in to_check if t.name in fixed]
            actual = await _describe_existing(admin, conn, again)
            found.update({t.name: _diff(t, actual[t.name]) for t in again})

    results: list[TopicResult] = []
    for topic in desired:
        if topic.name in created:
            results.append(TopicResult(topic, TopicOutcome.CREATED))
            continue
        still, done = found[topic.name], fixed.get(topic.name, ())
        if still:
            outcome = TopicOutcome.MISMATCH
        else:
            outcome = TopicOutcome.ALTERED if done else TopicOutcome.OK
        results.append(TopicResult(topic, outcome, still, done))
    return ApplyReport(tuple(results), replication)


def _diff(
    topic: DesiredTopic, actual: tuple[int, int, dict[str, str | None]]
) -> tuple[ConfigMismatch, ...]:
    partitions, rf, configs = actual
    return diff_topic(
        topic, partitions=partitions, replication_factor=rf, configs=configs
    )


async def apply_topics(
    conn: KafkaConnection,
    topics: Iterable[DesiredTopic],
    *,
    security: KafkaSecurity | None = None,
    raise_on_mismatch: bool = True,
    alter: bool = False,
) -> ApplyReport:
    """Create missing topics and validate existing ones. Idempotent.

    Returns once every created topic is visible with all its partitions.

    Args:
        conn: where Kafka is, and the per-call timeouts.
        topics: the concrete topics (see ``resolve_topics``).
        security: protocol, SASL and TLS settings; plaintext by default.
        raise_on_mismatch: raise instead of returning a report with mismatches.
        alter: fix safe differences of existing topics in place
            (``topic_changes.is_safe_drift``: ``max.message.bytes``, longer
            retention); other differences are still mismatches.

    Returns:
        One result per topic, in the given order.

    Raises:
        ConfigError: a TLS file of ``security`` cannot be loaded, or replication
            factor 1 would be chosen on a multi-broker cluster.
        BrokerUnreachableError: no admin session could be opened.
        TopicCreateError: the broker refused a topic (e.g. replication factor too
            high for the cluster).
        TopicAlterError: a safe difference could not be altered.
        TopicConfigMismatchError: an existing topic differs from its declaration
            (only when ``raise_on_mismatch``).
        TransportError: a call failed or timed out.
    """
    async with admin_session(conn, security=security) as admin:
        report = await reconcile_topics(
            admin, conn, topics, alter=alter, security=security
        )
    if raise_on_mismatch and report.mismatches:
        raise TopicConfigMismatchError(report.mismatches)
    return report


async def delete_topics(
    conn: KafkaConnection,
    names: Iterable[str],
    *,
    security: KafkaSecurity | None = None,
) -> None:
    """Delete topics; names that do not exist are ignored.

    Raises:
        ConfigError: a TLS file of ``security`` cannot be loaded.
        BrokerUnreachableError: no admin session could be opened.
        TransportError: the call failed or timed out.
    """
    targets = list(names)
    if not targets:
        return
    async with admin_session(conn, security=security) as admin:
        await bounded(
            admin.delete_topics(targets, timeout_ms=conn.request_timeout_ms),
            seconds=conn.request_timeout + 5,
            operation="delete topics",
        )
