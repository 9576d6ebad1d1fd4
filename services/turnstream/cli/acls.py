"""``turnstream acls``: print or apply the least-privilege ACLs of each role.

Owns the command: the principals of the actor, client and analytics roles, the
names the grants are about (the topic set from ``--topic-prefix`` /
``--topic-suffix`` or ``TURNSTREAM_TOPIC_*``, the actors' group and
transactional-id prefix, the analytics app id and topic), and either printing
the grants (the default; Kafka is not contacted) or creating them with
``--apply`` through the admin API, as a principal allowed to alter ACLs (a
super user). What each role needs is documented in
:mod:`turnstream.kafka.admin.acls`. Must not import aiokafka.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import typer
from rich.markup import escape

from turnstream.cli._common import console
from turnstream.cli.failures import exit_on_errors
from turnstream.cli.kafka_options import TopicAffixes, kafka_options
from turnstream.cli.settings import DEFAULT_GROUP_ID, ExitCode, KafkaTarget
from turnstream.errors import ConfigError
from turnstream.kafka.admin.acls import Acl, Role, RoleNames, apply_acls, role_acls
from turnstream.runtime.effects import check_topic_name
from turnstream.runtime.errors import EffectError

__all__ = ["acls", "planned_acls"]


def _principal(role: str) -> Any:
    return typer.Option(
        f"--{role}-principal",
        envvar=f"TURNSTREAM_ACL_{role.upper()}_PRINCIPAL",
        help=f"The {role} role's principal (User:NAME is the SASL user NAME).",
    )


def planned_acls(
    roles: list[Role], principals: dict[Role, str], names: RoleNames
) -> list[Acl]:
    """The grants of ``roles``, in role order.

    Raises:
        ConfigError: a principal is not ``TYPE:NAME``.
    """
    return [acl for role in roles for acl in role_acls(role, principals[role], names)]


@kafka_options(topics=TopicAffixes.FLAGS)
def acls(
    *,
    target: KafkaTarget,
    role: Annotated[
        list[Role] | None,
        typer.Option(
            "--role", help="Only these roles (repeat it); all three by default."
        ),
    ] = None,
    apply: Annotated[
        bool,
        typer.Option(
            "--apply", help="Create the grants (as a principal allowed to alter ACLs)."
        ),
    ] = False,
    actor_principal: Annotated[str, _principal("actor")] = "User:actor",
    client_principal: Annotated[str, _principal("client")] = "User:client",
    analytics_principal: Annotated[str, _principal("analytics")] = "User:analytics",
    group: Annotated[
        str,
        typer.Option(
            "--group",
            envvar="TURNSTREAM_GROUP_ID",
            help="The loop actors' consumer group.",
        ),
    ] = DEFAULT_GROUP_ID,
    txn_prefix: Annotated[
        str,
        typer.Option(
            "--txn-prefix",
            envvar="TURNSTREAM_TXN_PREFIX",
            help="The actors' transactional-id prefix.",
        ),
    ] = "turnstream",
    analytics_app_id: Annotated[
        str,
        typer.Option(
            "--analytics-app-id",
            envvar="TURNSTREAM_ANALYTICS_APP_ID",
            help="The analytics worker's app id (its group and topic prefix).",
        ),
    ] = "turnstream-analytics",
    analytics_topic: Annotated[
        str,
        typer.Option(
            "--analytics-topic",
            envvar="TURNSTREAM_ANALYTICS_TOPIC",
            help="The analytics worker's output topic.",
        ),
    ] = "turnstream.analytics.v1",
    effect_topic: Annotated[
        list[str] | None,
        typer.Option(
            "--effect-topic",
            help=(
                "A topic the actors' tools stage records to "
                "(ToolContext.stage_record): the actor gets Write on it. Repeat it."
            ),
        ),
    ] = None,
) -> None:
    """Print (or --apply) the least-privilege ACLs of the actor, client, analytics.

    Kafka has no per-key ACL: a principal that reads the events topic reads every
    loop, one that writes commands can drive any loop (isolate tenants with a
    topic prefix each). Exit codes: 0 printed or applied; 1 the broker refused a
    grant; 2 bad flags; 3 Kafka unreachable, 4 login refused, 5 TLS failed, 6 this
    principal may not alter ACLs.
    """
    with exit_on_errors():
        names = RoleNames(
            topics=target.topics,
            group_id=group,
            txn_prefix=txn_prefix,
            analytics_app_id=analytics_app_id,
            analytics_topic=analytics_topic,
            effect_topics=tuple(effect_topic or ()),
        )
        for topic in names.effect_topics:
            try:
                check_topic_name(topic)
            except EffectError as exc:
                raise ConfigError("effect_topic", f"{topic!r}: {exc.reason}") from exc
        principals = {
            Role.ACTOR: actor_principal,
            Role.CLIENT: client_principal,
            Role.ANALYTICS: analytics_principal,
        }
        grants = planned_acls(role or list(Role), principals, names)
    for grant in grants:
        console.print(escape(str(grant)), soft_wrap=True)
    if apply:
        with exit_on_errors(target.bootstrap):
            count = asyncio.run(
                apply_acls(target.connection, grants, security=target.security)
            )
        console.print(f"applied {count} ACLs at {escape(target.bootstrap)}")
    raise typer.Exit(int(ExitCode.OK))
