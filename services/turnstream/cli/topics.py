"""``turnstream topics apply``: create and validate the declared topic set.

Owns the command-line side of ``turnstream.kafka.admin.topics``: options, reading
``infra/topics.yaml``, the replication decision it prints ("replication factor 3
(cluster default, 3 brokers)") and the result table. Exit codes (shared with every
command, see :mod:`turnstream.cli.failures`): 0 when every topic exists as declared
(created, already so, or altered with ``--alter``), 1 when a topic differs, 2 for a
bad flag, variable or topic file (or replication factor 1 on a multi-broker cluster
without ``--replication-factor 1``), 3 when Kafka does not answer. Must not import
aiokafka.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from turnstream import resources
from turnstream.cli._common import console, project_dir
from turnstream.cli.failures import exit_on_errors, fail, mismatch_hint
from turnstream.cli.kafka_options import TopicAffixes, kafka_options
from turnstream.cli.setting_options import option
from turnstream.cli.settings import ExitCode, KafkaTarget
from turnstream.config import PARTITIONS, REPLICATION_FACTOR
from turnstream.errors import ConfigError
from turnstream.kafka import (
    ApplyReport,
    TopicOutcome,
    apply_topics,
    load_topic_set,
    resolve_topics,
)

__all__ = [
    "PartitionsOption",
    "ReplicationFactorOption",
    "app",
    "apply_declared_topics",
    "default_topic_set",
    "print_report",
]

app = typer.Typer(
    help="Manage the turnstream topic set.",
    no_args_is_help=True,
    rich_markup_mode=None,  # plain click help: no names cut at 80 columns
)

PartitionsOption = Annotated[int | None, option(PARTITIONS)]
ReplicationFactorOption = Annotated[int | None, option(REPLICATION_FACTOR)]


def print_replication(report: ApplyReport, replication_factor: int | None) -> None:
    """Say which replication factor the topics got, and why."""
    if report.replication is not None:
        console.print(f"{escape(report.replication.describe())}")
    elif replication_factor is not None:
        console.print(
            f"replication factor {replication_factor} (--replication-factor / "
            "TURNSTREAM_TOPIC_REPLICATION_FACTOR)"
        )


_OUTCOME = {
    TopicOutcome.CREATED: "[green]created [/]",
    TopicOutcome.OK: "[green]ok      [/]",
    TopicOutcome.ALTERED: "[yellow]altered [/]",
    TopicOutcome.MISMATCH: "[bold red]MISMATCH[/]",
}


def print_report(report: ApplyReport, bootstrap: str) -> None:
    """Print one line per topic, then every mismatch.

    Lines rather than a table: topic names with test prefixes are long, and the
    output is read in CI logs as often as in terminals.
    """
    console.print(f"topics on [bold]{escape(bootstrap)}[/]:")
    width = max((len(r.topic.name) for r in report.results), default=0)
    for result in report.results:
        topic = result.topic
        config = " ".join(f"{k}={v}" for k, v in topic.config.items())
        console.print(
            f"  {_OUTCOME[result.outcome]}  {escape(topic.name):<{width}}  "
            f"partitions={topic.partitions} rf={topic.replication_factor} "
            f"{escape(config)}",
            soft_wrap=True,
        )
    for change in report.altered:
        old, new = repr(change.actual), repr(change.expected)
        console.print(
            f"[yellow]~[/] {escape(change.topic)}: [bold]{escape(change.key)}[/] "
            f"altered from {escape(old)} to {escape(new)}",
            soft_wrap=True,
        )
    for mismatch in report.mismatches:
        actual, expected = repr(mismatch.actual), repr(mismatch.expected)
        console.print(
            f"[red]✗[/] {escape(mismatch.topic)}: [bold]{escape(mismatch.key)}[/] is "
            f"{escape(actual)}, expected {escape(expected)}",
            soft_wrap=True,
        )


def apply_declared_topics(
    target: KafkaTarget,
    *,
    file: Path | None = None,
    partitions: int | None = None,
    replication_factor: int | None = None,
    alter: bool = False,
) -> ApplyReport:
    """Load the topic set, apply it, print the table; exit 1 on any mismatch.

    Args:
        target: where Kafka is, how to reach it, and the topic-name affixes.
        file: the topic set (default: the checkout's ``infra/topics.yaml``, or
            the copy packaged in the installed wheel outside a checkout).
        partitions: overrides every topic's partition count.
        replication_factor: overrides every topic's replication factor.
        alter: change safe differences of existing topics in place.

    Raises:
        ConfigError: the file is invalid, an override is not usable, or
            replication factor 1 would be chosen on a multi-broker cluster.
        BrokerUnreachableError: Kafka does not answer.
        typer.Exit: with code 1 after printing the mismatches.
    """
    path = file or default_topic_set()
    topics = resolve_topics(
        load_topic_set(path),
        partitions=partitions,
        replication_factor=replication_factor,
        prefix=target.prefix,
        suffix=target.suffix,
    )
    report = asyncio.run(
        apply_topics(
            target.connection,
            topics,
            security=target.security,
            raise_on_mismatch=False,
            alter=alter,
        )
    )
    print_replication(report, replication_factor)
    print_report(report, target.bootstrap)
    if not report.ok:
        raise fail(
            f"{len(report.mismatches)} topic setting(s) differ from {path}; "
            f"{mismatch_hint(report.mismatches)} [topic_config_mismatch]",
            ExitCode.FAILED,
        )
    return report


@app.command()
@kafka_options(timeout=15.0, topics=TopicAffixes.FLAGS)
def apply(
    *,
    target: KafkaTarget,
    partitions: PartitionsOption = None,
    replication_factor: ReplicationFactorOption = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            "-f",
            help="Topic set to apply (default: infra/topics.yaml).",
            show_default=False,
        ),
    ] = None,
    alter: Annotated[
        bool,
        typer.Option(
            "--alter",
            help="Change safe differences of existing topics in place: "
            "max.message.bytes, retention.ms/retention.bytes when data is kept "
            "at least as long, and a higher min.insync.replicas. Any other "
            "difference still fails (exit 1).",
        ),
    ] = False,
) -> None:
    """Create missing topics and validate existing ones (idempotent).

    Replication: --replication-factor, else the cluster's configured
    default.replication.factor, else min(3, brokers); printed, and 1 on a
    multi-broker cluster is refused unless given explicitly. Durable topics get
    min.insync.replicas = RF - 1 (at least 1).

    Exit codes: 0 every topic as declared; 1 an existing topic has another
    partition count, replication factor or config value than declared (--alter
    fixes the safe ones); 2 bad flags or topic file, or RF 1 refused; 3 Kafka
    unreachable; 4 login refused, 5 TLS failed, 6 ACL denied.
    """
    with exit_on_errors(target.bootstrap):
        apply_declared_topics(
            target,
            file=file,
            partitions=partitions,
            replication_factor=replication_factor,
            alter=alter,
        )


def default_topic_set() -> Path:
    """The checkout's ``infra/topics.yaml``, else the installed wheel's copy."""
    try:
        return project_dir() / "infra" / "topics.yaml"
    except ConfigError:  # not in a checkout: the installed wheel's copy
        return resources.topic_set_file()
