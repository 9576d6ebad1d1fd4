"""``topics apply`` and ``actor run --ensure-topics`` on the 3-node cluster.

On three brokers the topic set is created with replication factor 3 (the cluster's
``default.replication.factor``), said so, and the durable topics get
``min.insync.replicas`` 2; ``actor run --ensure-topics`` accepts those topics (it
used to insist on RF 1 and exit 1).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from tests.support.cluster import private_cluster
from tests.support.eventually import assert_eventually
from tests.support.kafka import delete_topics, list_topics
from typer.testing import CliRunner

from turnstream.cli.main import app
from turnstream.devbroker import DevCluster
from turnstream.kafka import (
    DesiredTopic,
    KafkaConnection,
    admin_session,
    apply_topics,
    load_topic_set,
    resolve_topics,
)
from turnstream.kafka.admin.topic_changes import topic_overrides
from turnstream.kafka.errors import TopicAlterError

PROJECT_DIR = Path(__file__).resolve().parents[2]
TOPICS_YAML = PROJECT_DIR / "infra" / "topics.yaml"
TOPICS = load_topic_set(TOPICS_YAML).topics
DURABLE = [t for t in TOPICS if t.durable]


async def _layout(bootstrap: str, prefix: str) -> dict[str, tuple[int, str | None]]:
    """Per topic: replication factor and its min.insync.replicas override.

    ``topics apply`` returns once the broker it asked shows every topic; the
    broker this client asks may lag behind it (one that just rejoined after a
    kill -9 still applies the metadata log), so a topic it does not show yet
    is asked for again.
    """
    conn = KafkaConnection(bootstrap=bootstrap, request_timeout=20.0)
    names = [t.name for t in resolve_topics(load_topic_set(TOPICS_YAML), prefix=prefix)]
    async with admin_session(conn) as admin:

        async def described() -> dict[str, tuple[int, str | None]]:
            found: dict[str, tuple[int, str | None]] = {}
            for entry in await admin.describe_topics(names):
                topic = entry["topic"]
                shown = entry["error_code"] == 0 and entry["partitions"]
                assert shown, f"{topic} not in this broker's metadata yet"
                rf = min(len(p["replicas"]) for p in entry["partitions"])
                try:
                    overrides = await topic_overrides(admin, conn, topic)
                except TopicAlterError as exc:
                    raise AssertionError(f"{topic}: {exc}") from exc
                found[topic] = (rf, overrides.get("min.insync.replicas"))
            return found

        return await assert_eventually(described, timeout=20)


async def _drop(bootstrap: str, prefix: str) -> None:
    await delete_topics(
        bootstrap, [t for t in await list_topics(bootstrap) if t.startswith(prefix)]
    )


def test_apply_on_three_brokers_chooses_rf3_and_min_isr2(
    kafka_cluster: DevCluster,
) -> None:
    """No flag: RF 3 from the cluster default, printed; min ISR 2 except deltas."""
    bootstrap = kafka_cluster.settings.bootstrap
    prefix = f"it-cl-topics-{uuid.uuid4().hex[:8]}."
    try:
        result = CliRunner().invoke(
            app, ["topics", "apply", "--bootstrap", bootstrap, "--prefix", prefix]
        )
        assert result.exit_code == 0, result.output
        assert "replication factor 3 (cluster default, 3 brokers)" in result.output
        layout = asyncio.run(_layout(bootstrap, prefix))
        assert len(layout) == len(TOPICS)
        for name, (rf, min_isr) in layout.items():
            assert rf == 3, name
            assert min_isr == (None if "deltas" in name else "2"), name
        again = CliRunner().invoke(
            app, ["topics", "apply", "--bootstrap", bootstrap, "--prefix", prefix]
        )
        assert again.exit_code == 0, again.output
        assert again.output.count(" ok ") == len(TOPICS)
    finally:
        asyncio.run(_drop(bootstrap, prefix))


def test_explicit_replication_factor_wins_on_the_cluster(
    kafka_cluster: DevCluster,
) -> None:
    """--replication-factor 2 is taken as given (min ISR 1) and said so."""
    bootstrap = kafka_cluster.settings.bootstrap
    prefix = f"it-cl-rf2-{uuid.uuid4().hex[:8]}."
    try:
        result = CliRunner().invoke(
            app,
            [
                "topics",
                "apply",
                "--bootstrap",
                bootstrap,
                "--prefix",
                prefix,
                "--replication-factor",
                "2",
            ],
        )
        assert result.exit_code == 0, result.output
        assert "replication factor 2 (--replication-factor" in result.output
        layout = asyncio.run(_layout(bootstrap, prefix))
        assert {rf for rf, _ in layout.values()} == {2}
        assert layout[f"{prefix}turnstream.events.v1"][1] == "1"
    finally:
        asyncio.run(_drop(bootstrap, prefix))


def test_actor_run_ensure_topics_accepts_replicated_topics(
    kafka_cluster: DevCluster,
) -> None:
    """topics apply (RF 3), then actor run --ensure-topics starts; SIGTERM: exit 0."""
    bootstrap = kafka_cluster.settings.bootstrap
    prefix = f"it-cl-actor-{uuid.uuid4().hex[:8]}."
    try:
        applied = CliRunner().invoke(
            app, ["topics", "apply", "--bootstrap", bootstrap, "--prefix", prefix]
        )
        assert applied.exit_code == 0, applied.output
        argv = [
            sys.executable,
            "-m",
            "turnstream.cli.main",
            "actor",
            "run",
            "--bootstrap",
            bootstrap,
            "--ensure-topics",
            str(TOPICS_YAML),
            "--topic-prefix",
            prefix,
            "--group",
            f"{prefix}actors",
            "--metrics-port",
            "0",
            "--log-format",
            "text",
        ]
        env = {**os.environ, "PYTHONPATH": f"{PROJECT_DIR / 'services'}:{PROJECT_DIR}"}
        actor = subprocess.Popen(  # noqa: S603 - fixed argv
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            text=True,
        )
        assert actor.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 90
        try:
            while time.monotonic() < deadline:
                line = actor.stdout.readline()
                if not line:
                    break
                lines.append(line.rstrip())
                if "partitions ready" in line:
                    break
            assert any("partitions ready" in x for x in lines), lines[-20:]
            actor.send_signal(signal.SIGTERM)
            rest, _ = actor.communicate(timeout=60)
        finally:
            if actor.poll() is None:
                actor.kill()
                actor.wait()
        assert actor.returncode == 0, (lines[-10:], rest[-2000:])
    finally:
        asyncio.run(_drop(bootstrap, prefix))


def test_rf1_cluster_default_on_several_brokers_is_refused(tmp_path: Path) -> None:
    """Brokers configured with default.replication.factor=1 (2 nodes): apply refuses
    (exit 2, names the flag, creates nothing); --replication-factor 1 is accepted."""
    with private_cluster(
        tmp_path / "rf1", nodes=2, extra_properties={"default.replication.factor": "1"}
    ) as cluster:
        cluster.up()
        bootstrap = cluster.settings.bootstrap
        prefix = "it-cl-rf1."
        base = ["topics", "apply", "--bootstrap", bootstrap, "--prefix", prefix]
        refused = CliRunner().invoke(app, base)
        assert refused.exit_code == 2, refused.output
        assert "2 brokers but its default.replication.factor is 1" in refused.output
        assert "--replication-factor" in refused.output
        assert not [
            t for t in asyncio.run(list_topics(bootstrap)) if t.startswith(prefix)
        ]
        accepted = CliRunner().invoke(app, [*base, "--replication-factor", "1"])
        assert accepted.exit_code == 0, accepted.output
        assert "replication factor 1 (--replication-factor" in accepted.output


def test_alter_raises_min_isr_of_topics_made_before(kafka_cluster: DevCluster) -> None:
    """Topics made with RF 3 but min ISR 1 (as before this change, on a stock
    cluster): apply reports it (exit 1, hints --alter); --alter raises it to 2."""
    bootstrap = kafka_cluster.settings.bootstrap
    prefix = f"it-cl-isr-{uuid.uuid4().hex[:8]}."
    old = [
        DesiredTopic(t.name, t.partitions, 3, {**t.config, "min.insync.replicas": "1"})
        for t in resolve_topics(load_topic_set(TOPICS_YAML), prefix=prefix)
    ]
    try:
        asyncio.run(apply_topics(KafkaConnection(bootstrap=bootstrap), old))
        args = ["topics", "apply", "--bootstrap", bootstrap, "--prefix", prefix]
        strict = CliRunner().invoke(app, args)
        assert strict.exit_code == 1, strict.output
        assert "min.insync.replicas is '1', expected '2'" in strict.output
        assert "--alter" in strict.output
        fixed = CliRunner().invoke(app, [*args, "--alter"])
        assert fixed.exit_code == 0, fixed.output
        # Every durable topic (all but deltas).
        assert fixed.output.count("altered from '1' to '2'") == len(DURABLE)
        layout = asyncio.run(_layout(bootstrap, prefix))
        assert layout[f"{prefix}turnstream.events.v1"] == (3, "2")
        assert layout[f"{prefix}turnstream.deltas.v1"] == (3, "1")
    finally:
        asyncio.run(_drop(bootstrap, prefix))
