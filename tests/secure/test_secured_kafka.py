"""Against a SASL_SSL + SCRAM + ACL broker, with the grants ``turnstream acls`` applies.

Pins: the actor, ``chat``, ``tail`` and the analytics worker complete a turn
configured by flags only and by environment only (no password in a process's
arguments or output); the client principal cannot forge events, state, deltas
or transactions; each misconfiguration has its own message and exit code; an
actor denied Write on loops makes nothing of the failed commit visible to
``read_committed`` readers; one denied Read on an empty state partition exits
6 at its takeover; one whose transactional id is revoked while it runs is not
ready at once; one denied on three partitions says so once; administration as
a role's principal exits 6. Every grant removed one at a time, for every role:
tests/secure/test_every_grant.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import TopicPartition
from aiokafka.errors import (
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)
from tests.support.eventually import assert_eventually
from tests.support.secure import (
    TIMEOUT,
    ChildLog,
    SecureKafka,
    child,
    clean_env,
    exit_within,
    free_port,
    invoke,
    revoke,
    run,
)

from turnstream.cli.settings import ExitCode
from turnstream.kafka.admin.acls import (
    Acl,
    AclOperation,
    ResourceType,
    Role,
    RoleNames,
    apply_acls,
    role_acls,
)
from turnstream.kafka.admin.topics import apply_topics, load_topic_set, resolve_topics
from turnstream.kafka.clients import KafkaClients
from turnstream.kafka.topology import TopicNames
from turnstream.state import LoopState, OpenTurn
from turnstream.wire import marshal_state

PROJECT_DIR = Path(__file__).resolve().parents[2]
GROUP = "turnstream-loop-actor"


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


async def _get(url: str) -> httpx.Response:
    try:
        async with httpx.AsyncClient() as http:
            return await http.get(url)
    except httpx.TransportError as exc:
        raise AssertionError(f"{url}: {exc!r}") from exc


async def _ready(port: int) -> None:
    response = await _get(f"http://127.0.0.1:{port}/ready")
    assert response.status_code == 200, response.text


async def _turns_counted(port: int, at_least: int) -> dict[str, Any]:
    response = await _get(f"http://127.0.0.1:{port}/turnstream/stats/")
    assert response.status_code == 200, response.text
    totals: dict[str, Any] = response.json()["totals"]
    assert totals["turns_done"] >= at_least, totals
    return totals


@pytest.mark.parametrize("configured_by", ["flags", "env"])
async def test_actor_chat_tail_and_analytics_complete_a_turn(
    secure_kafka: SecureKafka, tmp_path: Path, configured_by: str
) -> None:
    """Each process logs in as its own role, configured by flags (password in the
    environment) or by the environment alone; no password shows in a process's
    arguments or in the commands' output."""

    def settings(user: str) -> tuple[list[str], dict[str, str]]:
        if configured_by == "flags":
            return secure_kafka.flags(user), clean_env(
                **secure_kafka.password_env(user)
            )
        return [], clean_env(**secure_kafka.env(user))

    actor_flags, actor_env = settings("actor")
    analytics_flags, analytics_env = settings("analytics")
    metrics, web = free_port(), free_port()
    # The worker starts with the actor (faust takes a while): it counts the
    # turn once chat has run it.
    async with (
        child(
            ["actor", "run", *actor_flags, "--metrics-port", str(metrics)], actor_env
        ) as actor,
        child(
            [
                "analytics",
                "run",
                *analytics_flags,
                "--partitions",
                "2",
                "--web-port",
                str(web),
                "--data-dir",
                str(tmp_path / "analytics"),
                "--session-timeout",
                "6",
                "--publish-seconds",
                "0.5",
            ],
            analytics_env,
        ) as worker,
    ):
        await assert_eventually(
            lambda: _ready(metrics), timeout=TIMEOUT, message="actor ready"
        )
        for secret in secure_kafka.passwords.values():
            assert secret not in _cmdline(actor.pid)
            assert secret not in _cmdline(worker.pid)

        client_flags, client_env = settings("client")
        code, chat_out = await run(
            ["chat", "hello secure world", "--no-deltas", *client_flags], client_env
        )
        assert code == ExitCode.OK, chat_out
        loop_id = chat_out.split("--loop ", 1)[1].split(")", 1)[0].strip()

        code, tail_out = await run(
            [
                "tail",
                "--loop",
                loop_id,
                "--from-beginning",
                "--no-follow",
                *client_flags,
            ],
            client_env,
        )
        assert code == ExitCode.OK, tail_out
        lines = tail_out.splitlines()
        assert any(
            "TurnStarted" in line and 'input="hello secure world"' in line
            for line in lines
        ), tail_out
        assert sum("TurnDone" in line for line in lines) == 1, tail_out

        totals = await assert_eventually(
            lambda: _turns_counted(web, 1),
            timeout=90,
            interval=0.5,
            message="analytics counted the turn",
        )
        assert worker.returncode is None
    assert totals["turns_started"] >= 1
    for output in (chat_out, tail_out):
        for secret in secure_kafka.passwords.values():
            assert secret not in output


@pytest.mark.parametrize(
    "topic",
    [
        pytest.param("events", id="events"),
        pytest.param("loops", id="loops"),
        pytest.param("deltas", id="deltas"),
    ],
)
async def test_client_principal_cannot_forge_writes(
    secure_kafka: SecureKafka, topic: str
) -> None:
    """The client may write commands only: events, loops and deltas are denied."""
    clients = KafkaClients(
        connection=secure_kafka.connection(),
        security=secure_kafka.security("client"),
    )
    producer = clients.lossy_producer("forger")
    try:
        await producer.start()
        with pytest.raises(TopicAuthorizationFailedError):
            async with asyncio.timeout(TIMEOUT):
                await producer.send_and_wait(
                    getattr(TopicNames(), topic), b"forged", key=b"loop", partition=0
                )
    finally:
        await producer.stop()


async def test_client_principal_cannot_use_the_actors_transactional_ids(
    secure_kafka: SecureKafka,
) -> None:
    """Taking over an actor's transactional id (to commit forged state) is denied."""
    clients = KafkaClients(
        connection=secure_kafka.connection(),
        security=secure_kafka.security("client"),
    )
    producer = clients.transactional_producer(
        f"turnstream-{GROUP}-turnstream.commands.v1-0"
    )
    with pytest.raises(TransactionalIdAuthorizationFailed):
        async with asyncio.timeout(TIMEOUT):
            await producer.start()
    await producer.stop()


MISCONFIGURATIONS = [
    pytest.param(
        {"password": "wrong-password"},
        ExitCode.AUTHENTICATION,
        "refused the SCRAM-SHA-512 login of user 'client': invalid credentials",
        id="wrong-password",
    ),
    pytest.param(
        {"user": "nobody"},
        ExitCode.AUTHENTICATION,
        "refused the SCRAM-SHA-512 login of user 'nobody': invalid credentials",
        id="unknown-user",
    ),
    pytest.param(
        {"--sasl-mechanism": "SCRAM-SHA-256"},
        ExitCode.AUTHENTICATION,
        "the listener does not enable SCRAM-SHA-256",
        id="wrong-mechanism",
    ),
    pytest.param(
        {"--ssl-cafile": None},
        ExitCode.TLS,
        "no CA file is set and the system CAs do not verify the broker's certificate",
        id="missing-ca",
    ),
    pytest.param(
        {"--bootstrap": "localhost"},
        ExitCode.TLS,
        "the broker's certificate does not name the host",
        id="hostname-mismatch",
    ),
    pytest.param(
        {"--security-protocol": "PLAINTEXT"},
        ExitCode.TLS,
        "the listener speaks TLS and this client PLAINTEXT",
        id="plaintext-on-tls-port",
    ),
    pytest.param(
        {"--security-protocol": "SSL"},
        ExitCode.TLS,
        "the listener expects a SASL login",
        id="tls-without-sasl",
    ),
]


def test_a_client_missing_a_permission_is_told_which(
    secure_kafka: SecureKafka,
) -> None:
    """A principal with the client's grants but Write on commands (it may see the
    topic): chat exits 6 naming Write on it, not an unconfirmed send that "may
    still arrive"; one that may not even see the commands topic is told the
    grant it lacks (Write, which implies Describe), not Describe."""
    topics = TopicNames()
    reads = [
        acl
        for acl in role_acls(Role.CLIENT, "User:reader", RoleNames(topics=topics))
        if acl.operation.label != "Write"
    ]
    reads.append(
        Acl(
            principal="User:reader",
            operation=AclOperation.DESCRIBE,
            resource_type=ResourceType.TOPIC,
            resource=topics.commands,
        )
    )
    asyncio.run(
        apply_acls(
            secure_kafka.connection(), reads, security=secure_kafka.security("admin")
        )
    )

    cases = {
        "reader": "User:reader lacks Write on Topic turnstream.commands.v1",
        "analytics": "User:analytics lacks Write on Topic turnstream.commands.v1",
    }
    for user, message in cases.items():
        code, output = invoke(
            ["chat", "hi", "--timeout", "10", *secure_kafka.flags(user)],
            secure_kafka.password_env(user),
        )
        assert code == ExitCode.AUTHORIZATION, output
        assert message in " ".join(output.split()), output


@pytest.mark.parametrize(("change", "code", "message"), MISCONFIGURATIONS)
def test_each_misconfiguration_has_its_message_and_exit_code(
    secure_kafka: SecureKafka,
    change: dict[str, str | None],
    code: ExitCode,
    message: str,
) -> None:
    """chat (as every command) names what to fix; never the password."""
    user = change.get("user") or "client"
    password = change.get("password") or secure_kafka.passwords["client"]
    flags = secure_kafka.flags(user)
    for flag, value in change.items():
        if not flag.startswith("--"):
            continue
        at = flags.index(flag)
        if value is None:
            del flags[at : at + 2]
        elif flag == "--bootstrap":
            flags[at + 1] = f"{value}:{secure_kafka.port}"
        else:
            flags[at + 1] = value
    if "--security-protocol" in change and change["--security-protocol"] != "SASL_SSL":
        at = flags.index("--sasl-mechanism")
        del flags[at : at + 4]  # SASL flags need a SASL_* protocol
        if change["--security-protocol"] == "PLAINTEXT":
            at = flags.index("--ssl-cafile")
            del flags[at : at + 2]

    sasl = "--sasl-mechanism" in flags
    found, output = invoke(
        ["chat", "hi", "--timeout", "10", *flags],
        {"TURNSTREAM_KAFKA_SASL_PASSWORD": password} if sasl else {},
    )

    assert found == code, output
    assert message in " ".join(output.split()), output
    assert "cannot reach Kafka" not in output
    assert password not in output


async def _grant_partial(
    kafka: SecureKafka,
    prefix: str,
    user: str,
    missing: str | None,
    partitions: int = 1,
) -> TopicNames:
    """Topics with ``prefix``; ``user`` gets the actor grants except ``missing``
    (all of them if it is ``None``)."""
    topics = TopicNames.with_affixes(prefix=prefix)
    desired = resolve_topics(
        load_topic_set(PROJECT_DIR / "infra" / "topics.yaml"),
        partitions=partitions,
        replication_factor=1,
        prefix=prefix,
        suffix="",
    )
    admin = kafka.security("admin")
    await apply_topics(kafka.connection(), desired, security=admin)
    names = RoleNames(topics=topics, group_id=f"{prefix}actors")
    grants = [
        acl
        for acl in role_acls(Role.ACTOR, f"User:{user}", names)
        if str(acl) != missing
    ]
    everything = len(role_acls(Role.ACTOR, f"User:{user}", names))
    assert len(grants) == everything - (missing is not None)
    grants += role_acls(Role.CLIENT, "User:client", names)
    await apply_acls(kafka.connection(), grants, security=admin)
    return topics


async def _visible(
    kafka: SecureKafka, topics: TopicNames
) -> tuple[list[int], dict[str, int], dict[str, int]]:
    """Offsets readable read_committed, once no transaction is open (the
    coordinator writes commit and abort markers just after answering)."""

    async def settled() -> tuple[list[int], dict[str, int], dict[str, int]]:
        found = await _read_committed(kafka, topics)
        assert found[1] == found[2], f"a transaction is still open: {found}"
        return found

    return await assert_eventually(settled, timeout=30, message="no open txn")


async def _read_committed(
    kafka: SecureKafka, topics: TopicNames
) -> tuple[list[int], dict[str, int], dict[str, int]]:
    """Offsets readable read_committed; the last stable and the end offsets."""
    clients = KafkaClients(
        connection=kafka.connection(), security=kafka.security("admin")
    )
    tps = [TopicPartition(topics.events, 0), TopicPartition(topics.loops, 0)]
    stable: dict[str, int] = {}
    ends: dict[str, int] = {}
    seen: list[int] = []
    for committed in (True, False):
        consumer = clients.consumer(
            "check", read_committed=committed, auto_offset_reset="earliest"
        )
        try:
            await consumer.start()
            consumer.assign(tps)
            offsets = await consumer.end_offsets(tps)
            (stable if committed else ends).update(
                {tp.topic: o for tp, o in offsets.items()}
            )
            if committed:
                for tp in tps:
                    while await consumer.position(tp) < offsets[tp]:
                        batch = await consumer.getmany(tp, timeout_ms=1000)
                        seen += [r.offset for r in batch.get(tp, [])]
        finally:
            await consumer.stop()
    return seen, stable, ends


@pytest.mark.parametrize(
    ("user", "missing", "reported", "operation"),
    [
        pytest.param(
            "actor-noloops",
            "ALLOW User:actor-noloops Write Topic {prefix}turnstream.loops.v1",
            "User:actor-noloops lacks Write on Topic {prefix}turnstream.loops.v1",
            "commit on partition 0",
            id="no-write-on-loops",
        ),
        # Every other grant: tests/secure/test_every_grant.py.
    ],
)
async def test_actor_missing_a_permission_names_it_and_commits_nothing(
    secure_kafka: SecureKafka, user: str, missing: str, reported: str, operation: str
) -> None:
    """The actor reports the permission, resource and principal once, exits 6
    (no takeover retry loop), and no part of a failed commit is visible
    read_committed: the events topic holds no committed record and no open
    transaction (its last stable offset is its end)."""
    prefix = f"p{uuid.uuid4().hex[:8]}."
    missing, reported = missing.format(prefix=prefix), reported.format(prefix=prefix)
    topics = await _grant_partial(secure_kafka, prefix, user, missing)
    actor_env = clean_env(**secure_kafka.password_env(user))
    client_env = clean_env(**secure_kafka.password_env("client"))
    args = [*secure_kafka.flags(user), "--topic-prefix", prefix]
    async with child(
        ["actor", "run", *args, "--group", f"{prefix}actors", "--metrics-port", "0"],
        actor_env,
    ) as actor:
        chat_args = [*secure_kafka.flags("client"), "--group", f"{prefix}actors"]
        async with child(
            ["chat", "hello", "--wait", "120", *chat_args],
            {**client_env, "TURNSTREAM_TOPIC_PREFIX": prefix},
        ):
            async with asyncio.timeout(TIMEOUT + 30):
                out, _ = await actor.communicate()
    log = out.decode()

    assert actor.returncode == ExitCode.AUTHORIZATION, log[-3000:]
    assert reported in log
    lines = log.splitlines()
    # Reported once: one log line (the writer's or the takeover's), one exit line.
    assert len([line for line in lines if "denied by an ACL" in line]) == 1, log
    assert [line for line in lines if line.startswith("error:")] == [
        f"error: not authorised to {operation}: {reported}; grant it (see "
        "`turnstream acls`) [kafka_authorization]"
    ]
    assert "partition takeover failed; will retry" not in log
    seen, stable, ends = await _visible(secure_kafka, topics)
    assert seen == []
    assert stable == ends
    with contextlib.suppress(json.JSONDecodeError):
        for line in log.splitlines():
            if line.startswith("{"):
                record = json.loads(line)
                for secret in secure_kafka.passwords.values():
                    assert secret not in json.dumps(record)


async def test_aiokafka_abort_after_a_denied_partition_needs_a_reinitialised_producer(
    secure_kafka: SecureKafka,
) -> None:
    """Why the writer re-initialises its producer after every failed transaction.

    After AddPartitionsToTxn is denied for the loops partition, aiokafka's
    ``abort_transaction`` returns without telling the coordinator (it dropped
    the partitions already added), so the same producer's next commit makes
    the "aborted" event visible: the partial commit of the issue. A
    re-initialised producer (InitProducerId) aborts it on the coordinator: the
    next commit shows its own record only.
    """
    prefix = f"p{uuid.uuid4().hex[:8]}."
    missing = f"ALLOW User:actor-noloops Write Topic {prefix}turnstream.loops.v1"
    topics = await _grant_partial(secure_kafka, prefix, "actor-noloops", missing)
    clients = KafkaClients(
        connection=secure_kafka.connection(),
        security=secure_kafka.security("actor-noloops"),
    )
    txn_id = f"turnstream-{prefix}actors-check"

    async def denied_then_commit(*, reinitialise: bool) -> tuple[int, int]:
        producer = clients.transactional_producer(txn_id)
        try:
            await producer.start()
            await producer.begin_transaction()
            first = await producer.send_and_wait(topics.events, b"first", partition=0)
            with pytest.raises(TopicAuthorizationFailedError):
                await producer.send_and_wait(topics.loops, b"state", partition=0)
            await producer.abort_transaction()
            if reinitialise:
                await producer.stop()
                producer = clients.transactional_producer(txn_id)
                await producer.start()
            await producer.begin_transaction()
            second = await producer.send_and_wait(topics.events, b"second", partition=0)
            await producer.commit_transaction()
        finally:
            await producer.stop()
        return first.offset, second.offset

    async with asyncio.timeout(TIMEOUT):
        same = await denied_then_commit(reinitialise=False)
        seen_same, _, _ = await _visible(secure_kafka, topics)
        fresh = await denied_then_commit(reinitialise=True)
        seen, stable, ends = await _visible(secure_kafka, topics)

    assert seen_same == list(same)  # the "aborted" first record was committed
    assert seen == [*same, fresh[1]]  # a re-initialised producer aborted it
    assert stable == ends


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["actor", "run", "--metrics-port", "0"], id="actor-run"),
        pytest.param(["analytics", "run", "--no-web"], id="analytics-run"),
        pytest.param(["tail", "--loop", str(uuid.uuid4())], id="tail"),
        pytest.param(["topics", "apply"], id="topics-apply"),
        pytest.param(["smoke"], id="smoke"),
        pytest.param(["demo"], id="demo"),
        pytest.param(["acls", "--apply", "--role", "client"], id="acls-apply"),
    ],
)
async def test_every_command_reports_a_refused_login_the_same_way(
    secure_kafka: SecureKafka, command: list[str]
) -> None:
    """Not only chat: each command that talks to Kafka exits 4 on a wrong password,
    naming the user and what to check, and never prints the password."""
    env = clean_env(TURNSTREAM_KAFKA_SASL_PASSWORD="not-the-password")

    code, output = await run([*command, *secure_kafka.flags("client")], env)

    assert code == ExitCode.AUTHENTICATION, output
    assert (
        "refused the SCRAM-SHA-512 login of user 'client': invalid credentials"
        in " ".join(output.split())
    ), output
    assert "not-the-password" not in output


def _open_turn_state(loop_id: uuid.UUID) -> bytes:
    """A loop whose snapshot has an open turn: a takeover must read its journal."""
    state = LoopState(
        session_id=uuid.uuid4(),
        loop_id=loop_id,
        turn_index=1,
        journal_offset=0,
        open_turn=OpenTurn(turn_id=uuid.uuid4(), turn_index=1),
    )
    return marshal_state(state)


async def _seed_open_turn(kafka: SecureKafka, topics: TopicNames) -> None:
    clients = KafkaClients(
        connection=kafka.connection(), security=kafka.security("admin")
    )
    producer = clients.lossy_producer("seed")
    try:
        await producer.start()
        loop_id = uuid.uuid4()
        async with asyncio.timeout(TIMEOUT):
            await producer.send_and_wait(
                topics.loops,
                _open_turn_state(loop_id),
                key=str(loop_id).encode(),
                partition=0,
            )
            await producer.send_and_wait(
                topics.events, b"not ours", key=b"other", partition=0
            )
    finally:
        await producer.stop()


@pytest.mark.parametrize(
    ("user", "topic", "seeded"),
    [
        # Seeded, and every other grant removed, by tests/secure/test_every_grant.py.
        pytest.param("actor-noreadloops", "loops", False, id="no-read-on-empty-loops"),
    ],
)
async def test_actor_denied_a_read_at_takeover_exits_6_at_once(
    secure_kafka: SecureKafka, user: str, topic: str, seeded: bool
) -> None:
    """Without Read on the state topic (or on the journal when a loop with an
    open turn must be restored) the takeover cannot succeed: the actor names
    the principal, the permission and the resource once and exits 6 within 10 s
    of being assigned the partition, instead of retrying the takeover."""
    prefix = f"p{uuid.uuid4().hex[:8]}."
    resource = f"{prefix}turnstream.{topic}.v1"
    missing = f"ALLOW User:{user} Read Topic {resource}"
    topics = await _grant_partial(secure_kafka, prefix, user, missing)
    if seeded:
        # A loop whose snapshot has an open turn (its journal must be read),
        # and a journal record after it; unseeded, both partitions are empty.
        await _seed_open_turn(secure_kafka, topics)
    args = [*secure_kafka.flags(user), "--topic-prefix", prefix]
    async with child(
        ["actor", "run", *args, "--group", f"{prefix}actors", "--metrics-port", "0"],
        clean_env(**secure_kafka.password_env(user)),
    ) as actor:
        log = ChildLog(actor)
        assigned = await log.first("partitions assigned")
        await exit_within(actor, TIMEOUT, log)
        text = await log.end()
        exited = asyncio.get_running_loop().time()

    assert actor.returncode == ExitCode.AUTHORIZATION, text[-3000:]
    assert exited - assigned <= 10, f"{exited - assigned:.1f} s after the assignment"
    reported = f"User:{user} lacks Read on Topic {resource}"
    lines = text.splitlines()
    assert len([line for line in lines if "denied by an ACL" in line]) == 1, text
    assert [line for line in lines if line.startswith("error:")] == [
        f"error: not authorised to read {resource}[0]: {reported}; grant it (see "
        "`turnstream acls`) [kafka_authorization]"
    ]
    assert "partition takeover failed; will retry" not in text


async def _not_ready(port: int) -> None:
    try:
        response = await _get(f"http://127.0.0.1:{port}/ready")
    except AssertionError:
        return  # nothing listens any more: the process has stopped
    assert response.status_code != 200, "still ready"


async def test_actor_whose_transactional_id_grant_is_revoked_stops_at_once(
    secure_kafka: SecureKafka,
) -> None:
    """A running actor whose Write on its transactional ids is revoked: the next
    commit is denied, /ready turns false at once, the denial is logged once as
    such (neither "fenced" nor "partitions ready" after it), and the actor
    exits 6 within 10 s instead of retrying while ready."""
    user = "actor-revoked"
    prefix = f"p{uuid.uuid4().hex[:8]}."
    names = RoleNames(
        topics=TopicNames.with_affixes(prefix=prefix), group_id=f"{prefix}actors"
    )
    (grant,) = [
        acl
        for acl in role_acls(Role.ACTOR, f"User:{user}", names)
        if acl.resource_type is ResourceType.TRANSACTIONAL_ID
    ]
    await _grant_partial(secure_kafka, prefix, user, None)
    metrics = free_port()
    args = [*secure_kafka.flags(user), "--topic-prefix", prefix]
    chat_args = [*secure_kafka.flags("client"), "--group", f"{prefix}actors"]
    chat_env = {
        **clean_env(**secure_kafka.password_env("client")),
        "TURNSTREAM_TOPIC_PREFIX": prefix,
    }
    async with child(
        [
            "actor",
            "run",
            *args,
            "--group",
            f"{prefix}actors",
            "--metrics-port",
            str(metrics),
        ],
        clean_env(**secure_kafka.password_env(user)),
    ) as actor:
        log = ChildLog(actor)
        await assert_eventually(
            lambda: _ready(metrics), timeout=TIMEOUT, message="actor ready"
        )
        code, out = await run(["chat", "first", "--no-deltas", *chat_args], chat_env)
        assert code == ExitCode.OK, out
        await revoke(secure_kafka, grant)
        async with child(["chat", "second", "--wait", "60", *chat_args], chat_env):
            denied = await log.first("denied by an ACL")
            await assert_eventually(
                lambda: _not_ready(metrics), timeout=1, interval=0.05
            )
            took = await exit_within(actor, TIMEOUT, log)
        text = await log.end()
        stopped = asyncio.get_running_loop().time()

    assert actor.returncode == ExitCode.AUTHORIZATION, text[-3000:]
    assert stopped - denied <= 10, (
        f"{stopped - denied:.1f} s after the denial:\n{text[-3000:]}"
    )
    assert took <= TIMEOUT
    reported = (
        f"User:{user} lacks Write on TransactionalId "
        f"turnstream-{prefix}actors-{prefix}turnstream.commands.v1-0"
    )
    assert reported in text, text[-3000:]
    lines = text.splitlines()
    assert len([line for line in lines if "denied by an ACL" in line]) == 1, text
    # The first complaint is the denial, not a generic commit failure.
    first = next(
        line
        for line in lines
        if '"logger":"turnstream' in line
        and ('"level":"warning"' in line or '"level":"error"' in line)
    )
    assert "denied by an ACL" in first, first
    after = text.split("denied by an ACL", 1)[1]
    assert "transaction failed; retrying" not in after, text[-3000:]
    assert "fenced" not in after, text[-3000:]
    assert "partitions ready" not in after, text[-3000:]
    noise = [
        line
        for line in lines
        if '"level":"error"' in line and '"logger":"turnstream' not in line
    ]
    assert noise == [], "\n".join(noise)


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["topics", "apply"], id="topics-apply"),
        pytest.param(["acls", "--apply", "--role", "client"], id="acls-apply"),
        pytest.param(["smoke"], id="smoke"),
    ],
)
def test_administration_as_a_role_principal_exits_6(
    secure_kafka: SecureKafka, command: list[str]
) -> None:
    """Creating topics and ACLs is administration: a role's principal is told
    which permission it lacks (exit 6), not handed a transport error (exit 1)."""
    code, output = invoke(
        [*command, *secure_kafka.flags("client")],
        secure_kafka.password_env("client"),
    )

    assert code == ExitCode.AUTHORIZATION, output
    flat = " ".join(output.split())
    assert "User:client lacks" in flat, output
    assert "on Cluster kafka-cluster" in flat or "on Topic" in flat, output
    assert "[transport]" not in flat, output


async def test_actor_denied_on_every_partition_says_so_once(
    secure_kafka: SecureKafka,
) -> None:
    """Three partitions, each denied its transactional id at the takeover: one
    denial line, one exit line, exit 6, and no library ERROR line."""
    user = "actor-notxn"
    prefix = f"p{uuid.uuid4().hex[:8]}."
    missing = (
        f"ALLOW User:{user} Write TransactionalId prefix turnstream-{prefix}actors-"
    )
    await _grant_partial(secure_kafka, prefix, user, missing, partitions=3)
    args = [*secure_kafka.flags(user), "--topic-prefix", prefix]
    async with child(
        ["actor", "run", *args, "--group", f"{prefix}actors", "--metrics-port", "0"],
        clean_env(**secure_kafka.password_env(user)),
    ) as actor:
        log = ChildLog(actor)
        await exit_within(actor, TIMEOUT, log)
        text = await log.end()

    assert actor.returncode == ExitCode.AUTHORIZATION, text[-3000:]
    lines = text.splitlines()
    assert len([line for line in lines if "denied by an ACL" in line]) == 1, text
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, text
    assert (
        f"User:{user} lacks Write on TransactionalId turnstream-{prefix}actors-"
        in (errors[0])
    )
    assert "fenced" not in text, text
    assert "partitions ready" not in text, text
    # Nor once more by a library (aiokafka, asyncio) beside ours.
    noise = [
        line
        for line in lines
        if '"level":"error"' in line and '"logger":"turnstream' not in line
    ]
    assert noise == [], "\n".join(noise)
