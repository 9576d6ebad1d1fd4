"""Settings of the turn commands (``chat``, ``tail``, ``demo``, ``smoke`` …).

Owns the exit codes of every command (:class:`ExitCode`) and the pure,
validate-once resolution of the Kafka flags plus an environment mapping into
:class:`KafkaTarget` -- the bootstrap servers, per-call timeout, security
settings (TLS, SASL; read by the loop actor's own
:func:`~turnstream.loop_actor.settings.parse_security`) and topic names -- and
:func:`parse_loop_id`. The model choice, the metrics endpoint and the log
settings are the loop actor's and observability's, re-exported here for the
commands that share them.

Every problem is a :class:`~turnstream.errors.ConfigError` whose message names
the flag or variable, so the command prints one line and exits 2. The
environment is read only from the mapping passed in. Must not import aiokafka.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final

from turnstream.config import (
    BOOTSTRAP_ENV,
    TOPIC_PREFIX_ENV,
    TOPIC_SUFFIX_ENV,
    resolve_bootstrap,
)
from turnstream.errors import ConfigError
from turnstream.kafka.clients import KafkaClients
from turnstream.kafka.connection import KafkaConnection
from turnstream.kafka.security import KafkaSecurity
from turnstream.kafka.topology import TopicNames
from turnstream.loop_actor.metrics_http import DEFAULT_METRICS_PORT, MetricsEndpoint
from turnstream.loop_actor.model_choice import ModelChoice
from turnstream.loop_actor.settings import GROUP, parse_security
from turnstream.observability.logs import parse_log_format, parse_log_level

__all__ = [
    "DEFAULT_GROUP_ID",
    "DEFAULT_METRICS_PORT",
    "ExitCode",
    "KafkaTarget",
    "MetricsEndpoint",
    "ModelChoice",
    "parse_log_format",
    "parse_log_level",
    "parse_loop_id",
]


class ExitCode(IntEnum):
    """Exit codes of every ``turnstream`` command."""

    OK = 0
    """The turn (or demo, or command) ended as expected."""
    FAILED = 1
    """A failed turn or operation: ``TurnFailed``, the demo's lifecycle not seen,
    topics that exist with other settings, a broker that refused a request."""
    USAGE = 2
    """A bad flag, variable, model spec or topic file; missing topics."""
    UNREACHABLE = 3
    """Kafka did not answer."""
    AUTHENTICATION = 4
    """Kafka refused the SASL login (user, password or mechanism)."""
    TLS = 5
    """The TLS handshake failed: untrusted certificate, hostname mismatch, or a
    security protocol that does not match the listener."""
    AUTHORIZATION = 6
    """An ACL denies the principal a permission the command needs."""
    INTERRUPTED = 130
    """The turn was interrupted (Ctrl-C or an ``Interrupt`` command)."""


DEFAULT_GROUP_ID: Final = str(GROUP.default)
"""The loop actors' consumer group (the deployable's default too)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaTarget:
    """Where Kafka is, how long each call may take, and the topic names.

    Attributes:
        connection: bootstrap servers and timeouts.
        topics: the topic names (with a test prefix/suffix if given).
        prefix: the topic-name prefix (for ``topics apply``).
        suffix: the topic-name suffix.
        security: protocol, SASL and TLS settings for every client.
        external: the servers were named (flag or ``KAFKA_BOOTSTRAP_SERVERS``),
            so commands that would start the local broker leave it alone.
    """

    connection: KafkaConnection
    topics: TopicNames
    prefix: str = ""
    suffix: str = ""
    security: KafkaSecurity = field(default_factory=KafkaSecurity)
    external: bool = False

    @property
    def bootstrap(self) -> str:
        """The bootstrap servers."""
        return self.connection.bootstrap

    def clients(self, client_id: str) -> KafkaClients:
        """The factory of this command's Kafka clients (all with ``security``)."""
        return KafkaClients(
            connection=self.connection, security=self.security, client_id=client_id
        )

    @classmethod
    def resolve(
        cls,
        *,
        bootstrap: str | None,
        env: Mapping[str, str],
        timeout: float = 10.0,
        prefix: str | None = None,
        suffix: str | None = None,
        security: Mapping[str, object] | None = None,
    ) -> KafkaTarget:
        """Bootstrap from the flag, ``KAFKA_BOOTSTRAP_SERVERS`` or the local broker.

        Args:
            bootstrap: the ``--bootstrap`` flag.
            env: the environment.
            timeout: seconds per Kafka call.
            prefix: the topic-name prefix (else ``TURNSTREAM_TOPIC_PREFIX``).
            suffix: the topic-name suffix (else ``TURNSTREAM_TOPIC_SUFFIX``).
            security: the security flags by setting name (``--security-protocol``
                …; unset ones come from ``TURNSTREAM_KAFKA_*``, passwords only
                from there).

        Raises:
            ConfigError: a malformed bootstrap, a non-positive timeout or bad
                security settings.
        """
        if not math.isfinite(timeout) or timeout <= 0:
            raise ConfigError("--timeout", "must be a positive number of seconds")
        servers = resolve_bootstrap(bootstrap, env)
        connection = KafkaConnection(
            bootstrap=servers, request_timeout=timeout, connect_timeout=timeout
        )
        pre = prefix if prefix is not None else env.get(TOPIC_PREFIX_ENV, "")
        suf = suffix if suffix is not None else env.get(TOPIC_SUFFIX_ENV, "")
        return cls(
            connection=connection,
            topics=TopicNames.with_affixes(prefix=pre, suffix=suf),
            prefix=pre,
            suffix=suf,
            security=parse_security(security or {}, env),
            external=bool((bootstrap or "").strip())
            or bool(env.get(BOOTSTRAP_ENV, "").strip()),
        )


def parse_loop_id(raw: str, *, setting: str = "--loop") -> uuid.UUID:
    """A loop id given as a UUID (with or without dashes).

    Raises:
        ConfigError: not a UUID.
    """
    try:
        return uuid.UUID(raw.strip())
    except ValueError:
        raise ConfigError(setting, f"{raw!r} is not a loop id (a UUID)") from None
