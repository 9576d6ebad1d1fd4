"""Every grant ``turnstream acls`` prints, removed one at a time (secured broker).

Pins, for each grant of each role (actor, client, analytics), taken from the
recipe itself so that a grant added to it is swept too: the role's command,
driven until it has used every grant (an actor takes over a loop with an open
turn, dead-letters a poison command and streams a turn; a client chats with a
running actor; the analytics worker folds a journal and publishes a snapshot),
either exits 6 within 10 s naming the principal, the permission and the
resource, or runs on by a documented choice (:data:`RUNS_ON`) and then stops on
SIGTERM within its drain timeout. An actor's denied transaction leaves nothing
visible to a ``read_committed`` reader.

The cases share the broker and one principal per role: each case gets its own
topic set, group and app id (a prefix), and the principal's grants on it are
the role's grants but one. The cases run concurrently, a few at a time, in one
module-scoped fixture; each parametrized test then judges its own case.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from aiokafka import TopicPartition
from tests.support.eventually import assert_eventually
from tests.support.secure import (
    PROJECT_DIR,
    TIMEOUT,
    ChildLog,
    SecureKafka,
    child,
    clean_env,
    exit_within,
    free_port,
    invoke,
    revoke,
)

from turnstream.analytics.sample import LoopPlan, TurnPlan, build_journal
from turnstream.cli.settings import ExitCode
from turnstream.kafka.admin.acls import (
    Acl,
    AclOperation,
    PatternType,
    ResourceType,
    Role,
    RoleNames,
    apply_acls,
    role_acls,
)
from turnstream.kafka.admin.topics import apply_topics, load_topic_set, resolve_topics
from turnstream.kafka.clients import KafkaClients
from turnstream.kafka.state_records import history_key, split
from turnstream.kafka.topology import TopicNames
from turnstream.state import LoopState, OpenTurn
from turnstream.wire import marshal_state
from turnstream.wire.codec import marshal_event

# The principal each role's command runs as in the sweep.
SWEPT: dict[Role, str] = {
    Role.ACTOR: "sweep-actor",
    Role.CLIENT: "sweep-client",
    Role.ANALYTICS: "sweep-analytics",
}
# A denial must end the command this soon after the grant was first needed.
DENIAL_S = 10.0
# Drain timeouts the commands run with: SIGTERM must end them within these.
ACTOR_DRAIN_S = 5.0
ANALYTICS_STOP_S = 20.0  # AnalyticsApp bounds its stop to 20 s
# A worker that lost a grant must exit this soon after the next record came.
REVOKED_EXIT_S = DENIAL_S
# Cases run this many at a time (two cores, one broker): more at once timed the
# harness's own interpreters starting against the 10 s bound, not the denial.
AT_ONCE = 2
# Seconds between the starts of the first cases.
_STAGGER_S = 0.7


def role_names(prefix: str) -> RoleNames:
    """Every name a case's grants are about, isolated by ``prefix``."""
    return RoleNames(
        topics=TopicNames.with_affixes(prefix=prefix),
        group_id=f"{prefix}actors",
        analytics_app_id=f"{prefix}analytics",
        analytics_topic=f"{prefix}turnstream.analytics.v1",
    )


def grants(role: Role, prefix: str) -> tuple[Acl, ...]:
    """The recipe's grants of ``role`` for the swept principal."""
    return role_acls(role, f"User:{SWEPT[role]}", role_names(prefix))


def _case_id(role: Role, acl: Acl) -> str:
    pattern = "prefix-" if acl.pattern is PatternType.PREFIXED else ""
    name = acl.resource.removeprefix("P.") or "P"
    return f"{role}-{acl.operation.label}-{acl.resource_type.label}-{pattern}{name}"


CASES = [
    pytest.param(role, index, id=_case_id(role, acl))
    for role in Role
    for index, acl in enumerate(grants(role, "P."))
]

# Grants whose absence the command survives on purpose, and the line it logs.
RUNS_ON: dict[tuple[Role, str], str] = {
    # Deltas are live-only: turns still run and commit; clients follow the
    # journal (docs/security.md).
    (Role.ACTOR, "Write Topic {prefix}turnstream.deltas.v1"): "not streamed",
    # Describe serves only chat's check that an actor runs; without it chat
    # cannot tell, says so and waits for the turn.
    (
        Role.CLIENT,
        "Describe Group {prefix}actors",
    ): "cannot tell whether a loop actor runs",
}


def _runs_on(role: Role, acl: Acl, prefix: str) -> str | None:
    for (who, what), line in RUNS_ON.items():
        label = f"{acl.operation.label} {acl.resource_type.label} {acl.resource}"
        if who is role and what.format(prefix=prefix) == label:
            return line
    return None


@dataclass
class Outcome:
    """What a case's command did.

    Attributes:
        acl: the grant that was missing.
        prefix: the case's topic-set prefix.
        code: the exit code (``None``: never exited).
        after: seconds from when the grant was first needed to the exit.
        ran_on: it did its whole job without the grant and kept running.
        stop_code: the exit code after SIGTERM (if it ran on).
        stop_took: seconds SIGTERM took to end it.
        stop_limit: the command's drain timeout.
        output: its output.
        broken: why the case could not be run to the end (empty: it was).
        took: seconds the whole case took (setup, command, checks).
        settled: no transaction stayed open on events or loops (actor
            cases): a denied one was aborted, so readers see none of it.
    """

    acl: Acl
    prefix: str
    code: int | None = None
    after: float = 0.0
    ran_on: bool = False
    stop_code: int | None = None
    stop_took: float = 0.0
    stop_limit: float = 0.0
    output: str = ""
    settled: bool = True
    broken: str = ""
    took: float = 0.0


async def _setup(kafka: SecureKafka, prefix: str, wanted: list[Acl]) -> TopicNames:
    """The topic set of ``prefix`` and ``wanted`` grants, made as the super user."""
    admin = kafka.security("admin")
    desired = resolve_topics(
        load_topic_set(PROJECT_DIR / "infra" / "topics.yaml"),
        partitions=1,
        replication_factor=1,
        prefix=prefix,
        suffix="",
    )
    await apply_topics(kafka.connection(), desired, security=admin)
    await apply_acls(kafka.connection(), wanted, security=admin)
    return TopicNames.with_affixes(prefix=prefix)


async def _produce(kafka: SecureKafka, records: list[tuple[str, bytes, bytes]]) -> None:
    clients = KafkaClients(
        connection=kafka.connection(), security=kafka.security("admin")
    )
    producer = clients.lossy_producer("sweep-seed")
    try:
        await producer.start()
        async with asyncio.timeout(TIMEOUT):
            for topic, key, value in records:
                await producer.send_and_wait(topic, value, key=key, partition=0)
    finally:
        await producer.stop()


async def _end_offset(kafka: SecureKafka, topic: str, *, committed: bool) -> int:
    clients = KafkaClients(
        connection=kafka.connection(), security=kafka.security("admin")
    )
    consumer = clients.consumer("sweep-check", read_committed=committed)
    try:
        # Started inside: a case's checks are cancelled when its worker
        # exits, and a consumer cut short in its start was left unclosed
        # (ResourceWarning, an error of the next test).
        await consumer.start()
        tp = TopicPartition(topic, 0)
        try:
            async with asyncio.timeout(5):
                return int((await consumer.end_offsets([tp]))[tp])
        except TimeoutError:
            raise AssertionError(f"no end offset of {topic} in 5 s") from None
    finally:
        await consumer.stop()


async def _settled(kafka: SecureKafka, topics: TopicNames) -> bool:
    """Whether every transaction on events and loops ends (committed or aborted)."""

    async def ended() -> None:
        for topic in (topics.events, topics.loops):
            stable = await _end_offset(kafka, topic, committed=True)
            end = await _end_offset(kafka, topic, committed=False)
            assert stable == end, f"{topic}: a transaction is still open"

    try:
        await assert_eventually(ended, timeout=20, message="no open transaction")
    except AssertionError:
        return False
    return True


async def _get_ok(url: str) -> httpx.Response:
    try:
        async with httpx.AsyncClient() as http:
            response = await http.get(url)
    except httpx.TransportError as exc:
        raise AssertionError(f"{url}: {exc!r}") from exc
    assert response.status_code == 200, response.text
    return response


async def _until_exit_or(
    proc: asyncio.subprocess.Process, done: Callable[[], Awaitable[object]]
) -> bool:
    """Wait until ``proc`` exits (False) or ``done`` passes (True)."""
    exited = asyncio.ensure_future(proc.wait())
    job = asyncio.ensure_future(
        assert_eventually(done, timeout=TIMEOUT, interval=0.25, message="job done")
    )
    try:
        finished, _ = await asyncio.wait(
            {exited, job}, return_when=asyncio.FIRST_COMPLETED
        )
        if exited in finished:
            return False
        job.result()
        # One more moment for a denial of the last step to land.
        await asyncio.sleep(1)
        return proc.returncode is None
    finally:
        for task in (exited, job):
            task.cancel()
        # Let the job's clients close before the case goes on.
        await asyncio.gather(exited, job, return_exceptions=True)


async def _stop(out: Outcome, proc: asyncio.subprocess.Process, limit: float) -> None:
    """SIGTERM ``proc``; record how it ended (it may not exceed ``limit`` by far)."""
    started = time.monotonic()
    proc.terminate()
    async with asyncio.timeout(limit + 15):
        await proc.wait()
    out.stop_took = time.monotonic() - started
    out.stop_code = proc.returncode
    out.stop_limit = limit


def _open_turn_loop(loop_id: uuid.UUID) -> list[tuple[str, bytes, bytes]]:
    """A loop with an open turn, as (topic, key, value) records.

    Its head names no history offsets, as heads written before they did, so a
    takeover scans the history partition (Read on history); its open turn
    makes the takeover read the journal (Read on events) and commit its
    interruption (Write on events, loops and history).
    """
    topics = TopicNames()  # names without the prefix; the caller adds it
    state = LoopState(
        session_id=uuid.uuid4(),
        loop_id=loop_id,
        turn_index=1,
        journal_offset=0,
        open_turn=OpenTurn(turn_id=uuid.uuid4(), turn_index=1),
        recent_command_ids=(uuid.uuid4(),),
    )
    records = split(state, [])
    assert records.history is not None
    return [
        (topics.history, history_key(loop_id, 0), marshal_state(records.history)),
        (topics.loops, str(loop_id).encode(), marshal_state(records.head)),
    ]


async def _actor_case(kafka: SecureKafka, index: int) -> Outcome:
    prefix = f"s{uuid.uuid4().hex[:8]}."
    wanted = list(grants(Role.ACTOR, prefix))
    missing = wanted.pop(index)
    names = role_names(prefix)
    topics = await _setup(
        kafka,
        prefix,
        [*wanted, *role_acls(Role.CLIENT, "User:client", names)],
    )
    # A loop with an open turn and a history record, a journal record after
    # it, and a poison command (dead-lettered).
    seeded = _open_turn_loop(uuid.uuid4())
    await _produce(
        kafka,
        [
            *((prefix + topic, key, value) for topic, key, value in seeded),
            (topics.events, b"other", b"not ours"),
            (topics.commands, b"not-a-loop", b"poison"),
        ],
    )
    out = Outcome(acl=missing, prefix=prefix)
    metrics = free_port()
    user = SWEPT[Role.ACTOR]
    client_env = {
        **clean_env(**kafka.password_env("client")),
        "TURNSTREAM_TOPIC_PREFIX": prefix,
    }
    chat_args = [
        "chat",
        "hello",
        "--wait",
        "30",
        *kafka.flags("client"),
        "--group",
        names.group_id,
    ]
    started = time.monotonic()
    async with child(
        [
            "actor",
            "run",
            *kafka.flags(user),
            "--topic-prefix",
            prefix,
            "--group",
            names.group_id,
            "--metrics-port",
            str(metrics),
            "--drain-timeout",
            str(ACTOR_DRAIN_S),
        ],
        clean_env(**kafka.password_env(user)),
    ) as actor:
        log = ChildLog(actor)
        marks = {"chat": 0.0}

        async def served() -> None:
            await _get_ok(f"http://127.0.0.1:{metrics}/ready")
            if not marks["chat"]:
                marks["chat"] = time.monotonic()
                async with child(chat_args, client_env) as chat:
                    async with asyncio.timeout(TIMEOUT):
                        said, _ = await chat.communicate()
                assert chat.returncode == 0, said.decode()[-2000:]
            assert await _end_offset(kafka, topics.dead_letters, committed=False)

        try:
            out.ran_on = await _until_exit_or(actor, served)
        except AssertionError as exc:
            out.broken, out.output = repr(exc), log.text
            return out
        if out.ran_on:
            await _stop(out, actor, ACTOR_DRAIN_S)
        else:
            await actor.wait()
            ended = time.monotonic()
            assigned = [at for at, line in log.lines if "partitions assigned" in line]
            # The grant is first needed at the assignment (takeover), or by
            # the turn the chat started; before both, by joining the group.
            begun = max([started, *assigned[:1], marks["chat"]])
            out.after = ended - begun
        out.code = actor.returncode
        out.output = await log.end()
    out.settled = await _settled(kafka, topics)
    return out


async def _client_case(kafka: SecureKafka, index: int) -> Outcome:
    prefix = f"s{uuid.uuid4().hex[:8]}."
    wanted = list(grants(Role.CLIENT, prefix))
    missing = wanted.pop(index)
    names = role_names(prefix)
    await _setup(kafka, prefix, [*wanted, *role_acls(Role.ACTOR, "User:actor", names)])
    out = Outcome(acl=missing, prefix=prefix)
    metrics = free_port()
    user = SWEPT[Role.CLIENT]
    documented = _runs_on(Role.CLIENT, missing, prefix)

    async def actor_ready() -> None:
        await _get_ok(f"http://127.0.0.1:{metrics}/ready")

    async with contextlib.AsyncExitStack() as stack:
        started = time.monotonic()
        chat = await stack.enter_async_context(
            child(
                [
                    "chat",
                    "hello",
                    "--wait",
                    "60",
                    *kafka.flags(user),
                    "--group",
                    names.group_id,
                ],
                {
                    **clean_env(**kafka.password_env(user)),
                    "TURNSTREAM_TOPIC_PREFIX": prefix,
                },
            )
        )
        log = ChildLog(chat)
        if documented:
            # What the grant serves (telling that no actor runs) shows only
            # while none does: the actor starts once chat said it cannot tell.
            with contextlib.suppress(AssertionError):
                await log.first(documented, timeout=DENIAL_S)
        await stack.enter_async_context(
            child(
                [
                    "actor",
                    "run",
                    *kafka.flags("actor"),
                    "--topic-prefix",
                    prefix,
                    "--group",
                    names.group_id,
                    "--metrics-port",
                    str(metrics),
                    "--drain-timeout",
                    str(ACTOR_DRAIN_S),
                ],
                clean_env(**kafka.password_env("actor")),
            )
        )
        try:
            async with asyncio.timeout(TIMEOUT):
                await chat.wait()
        except TimeoutError:
            await _stop(out, chat, ACTOR_DRAIN_S)
        out.after = time.monotonic() - started
        out.code = chat.returncode
        out.output = await log.end()
    # chat ends by itself once its turn is done: a zero exit did the whole job.
    out.ran_on = out.code == ExitCode.OK
    return out


def _turn_records(topics: TopicNames) -> list[tuple[str, bytes, bytes]]:
    """A new loop's one finished turn, as records of the events journal."""
    journal = build_journal([LoopPlan(turns=[TurnPlan()])])
    return [
        (topics.events, str(e.header.loop_id).encode(), marshal_event(e))
        for e in journal
    ]


def _worker_argv(
    kafka: SecureKafka, names: RoleNames, web: int, data_dir: Path
) -> list[str]:
    """``analytics run`` as the swept principal, on ``names``' topics and group."""
    return [
        "analytics",
        "run",
        *kafka.flags(SWEPT[Role.ANALYTICS]),
        "--app-id",
        names.analytics_app_id,
        "--events-topic",
        names.topics.events,
        "--analytics-topic",
        names.analytics_topic,
        "--partitions",
        "1",
        "--web-port",
        str(web),
        "--publish-seconds",
        "0.5",
        "--data-dir",
        str(data_dir),
        "--session-timeout",
        "6",
    ]


async def _published(kafka: SecureKafka, names: RoleNames, web: int) -> None:
    """The worker counted a turn, published a snapshot and committed a table update."""
    response = await _get_ok(f"http://127.0.0.1:{web}/turnstream/stats/")
    assert response.json()["totals"]["turns_started"] >= 1
    end = await _end_offset(kafka, names.analytics_topic, committed=False)
    assert end >= 1, "no snapshot published yet"
    changelog = f"{names.analytics_app_id}-loops-changelog"
    end = await _end_offset(kafka, changelog, committed=True)
    assert end >= 1, "no table update committed yet"


async def _analytics_case(kafka: SecureKafka, index: int, data_dir: Path) -> Outcome:
    prefix = f"s{uuid.uuid4().hex[:8]}."
    wanted = list(grants(Role.ANALYTICS, prefix))
    missing = wanted.pop(index)
    names = role_names(prefix)
    topics = await _setup(kafka, prefix, wanted)
    await _produce(kafka, _turn_records(topics))
    out = Outcome(acl=missing, prefix=prefix)
    web = free_port()
    started = time.monotonic()
    async with child(
        _worker_argv(kafka, names, web, data_dir),
        clean_env(**kafka.password_env(SWEPT[Role.ANALYTICS])),
    ) as worker:
        log = ChildLog(worker)
        try:
            out.ran_on = await _until_exit_or(
                worker, lambda: _published(kafka, names, web)
            )
        except AssertionError as exc:
            # Neither exited nor did its job: judged by the case's test.
            out.broken, out.output = repr(exc), log.text
            return out
        if out.ran_on:
            await _stop(out, worker, ANALYTICS_STOP_S)
        else:
            await worker.wait()
            # The topic grants are first needed once faust starts, which the
            # worker logs after its own grant checks; those, from its start.
            starting = f"analytics {names.analytics_app_id}: "
            faust = [at for at, line in log.lines if starting in line]
            out.after = time.monotonic() - max([started, *faust[:1]])
        out.code = worker.returncode
        out.output = await log.end()
    return out


def _summarise(role: Role, out: Outcome) -> None:
    """Append the case's outcome and output to ``$TURNSTREAM_SWEEP_LOG``, if set."""
    where = os.environ.get("TURNSTREAM_SWEEP_LOG")
    if not where:
        return
    ended = f"exit {out.code} after {out.after:.1f} s"
    if out.ran_on:
        ended = f"ran on; SIGTERM: exit {out.stop_code} in {out.stop_took:.1f} s"
    with Path(where).open("a") as log:
        log.write(
            f"SWEEP {role} {out.acl}: {ended}; case {out.took:.1f} s {out.broken}\n"
            f"{out.output}\n====\n"
        )


@pytest.fixture(scope="module")
def sweep(
    secure_kafka: SecureKafka,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> dict[tuple[Role, int], Outcome]:
    """The outcome of every selected case; they run :data:`AT_ONCE` at a time."""
    gate = asyncio.Semaphore(AT_ONCE)

    async def case(role: Role, index: int) -> Outcome:
        match role:
            case Role.ACTOR:
                return await _actor_case(secure_kafka, index)
            case Role.CLIENT:
                return await _client_case(secure_kafka, index)
            case Role.ANALYTICS:
                where = tmp_path_factory.mktemp(f"analytics-{index}")
                return await _analytics_case(secure_kafka, index, where)

    async def one(role: Role, index: int, position: int) -> Outcome:
        # The first cases start apart: six interpreters importing at once on
        # two cores would be timed, not the denial.
        await asyncio.sleep(_STAGGER_S * min(position, AT_ONCE))
        async with gate:
            started = time.monotonic()
            try:
                out = await case(role, index)
            except (AssertionError, TimeoutError, OSError) as exc:
                # Judged by the case's own test, not by every case of the module.
                out = Outcome(
                    acl=grants(role, "?")[index], prefix="?", broken=repr(exc)
                )
            out.took = time.monotonic() - started
            _summarise(role, out)
            return out

    async def everything() -> dict[tuple[Role, int], Outcome]:
        keys = [
            (role, index) for role in Role for index, _ in enumerate(grants(role, "P."))
        ]
        # Roles interleaved, so the heavy analytics starts spread over the run.
        keys.sort(key=lambda k: (k[1], list(Role).index(k[0])))
        found = await asyncio.gather(
            *(one(*key, position) for position, key in enumerate(keys))
        )
        return dict(zip(keys, found, strict=True))

    return asyncio.run(everything())


def test_the_sweep_covers_what_turnstream_acls_prints(
    secure_kafka: SecureKafka,
) -> None:
    """The cases are the recipe's lines: nothing printed goes unswept."""
    prefix = "P."
    names = role_names(prefix)
    code, output = invoke(
        [
            "acls",
            "--topic-prefix",
            prefix,
            "--group",
            names.group_id,
            "--analytics-app-id",
            names.analytics_app_id,
            "--analytics-topic",
            names.analytics_topic,
            *(f"--{role}-principal={'User:' + SWEPT[role]}" for role in Role),
        ],
        {},
    )
    assert code == ExitCode.OK, output
    swept = [str(acl) for role in Role for acl in grants(role, prefix)]
    assert output.splitlines() == swept


_SWEPT_TEST = "test_removing_one_grant_exits_6_naming_it_or_runs_on_by_choice"
_LACKS = re.compile(r"(User:\S+) lacks (\w+) on (\w+) (\S+?)[;,)]?(?:\s|$)")


@pytest.mark.timeout(400)
@pytest.mark.parametrize(("role", "index"), CASES)
def test_removing_one_grant_exits_6_naming_it_or_runs_on_by_choice(
    sweep: dict[tuple[Role, int], Outcome], role: Role, index: int
) -> None:
    """Without this grant the command exits 6 within 10 s of needing it, its
    one error line naming the principal, the permission and the resource; or
    it runs on by a documented choice, says so once, and SIGTERM ends it
    within its drain timeout. A denied actor makes nothing visible."""
    out = sweep[(role, index)]
    assert not out.broken, f"{out.broken}\n{out.output[-4000:]}"
    acl, tail = out.acl, out.output[-4000:]
    # One denial, reported by turnstream: no library ERROR line beside it.
    noise = [
        line
        for line in out.output.splitlines()
        if '"level":"error"' in line and '"logger":"turnstream' not in line
    ]
    assert noise == [], "\n".join(noise)[-3000:]
    documented = _runs_on(role, acl, out.prefix)
    if out.ran_on:
        assert documented is not None, (
            f"runs without {acl}: document why, or drop the grant\n{tail}"
        )
        assert out.stop_code in (ExitCode.OK, None) or role is Role.CLIENT, tail
        assert out.stop_took <= out.stop_limit, f"SIGTERM took {out.stop_took:.1f} s"
        label = f"lacks {acl.operation.label} on {acl.resource_type.label} "
        said = [line for line in out.output.splitlines() if label in line]
        assert len(said) == 1, tail
        assert documented in said[0], said
        return
    assert documented is None, f"{acl} is documented to run on\n{tail}"
    assert out.code == ExitCode.AUTHORIZATION, f"exit {out.code}\n{tail}"
    assert out.after <= DENIAL_S, f"exit 6 {out.after:.1f} s after needing it\n{tail}"
    errors = [line for line in out.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, tail
    found = _LACKS.search(errors[0])
    assert found is not None, errors
    who, permission, kind, resource = found.groups()
    assert (who, permission, kind) == (
        acl.principal,
        acl.operation.label,
        acl.resource_type.label,
    ), errors[0]
    if acl.pattern is PatternType.PREFIXED:
        assert resource.startswith(acl.resource), errors[0]
    else:
        assert resource == acl.resource, errors[0]
    assert out.settled, "a denied transaction stayed open"


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("resource_type", "operation"),
    [
        pytest.param(ResourceType.GROUP, AclOperation.READ, id="group-read"),
        pytest.param(
            ResourceType.TRANSACTIONAL_ID, AclOperation.WRITE, id="transactional-id"
        ),
    ],
)
async def test_a_grant_the_analytics_worker_loses_while_running_exits_6_naming_it(
    secure_kafka: SecureKafka,
    tmp_path: Path,
    resource_type: ResourceType,
    operation: AclOperation,
) -> None:
    """A grant revoked while the worker runs refuses its next transaction: the
    worker exits 6 with one error line naming the principal, the permission and
    the resource, as the start-up check does when the grant is missing."""
    prefix = f"r{uuid.uuid4().hex[:8]}."
    wanted = list(grants(Role.ANALYTICS, prefix))
    (grant,) = [
        acl
        for acl in wanted
        if acl.resource_type is resource_type and acl.operation is operation
    ]
    names = role_names(prefix)
    topics = await _setup(secure_kafka, prefix, wanted)
    await _produce(secure_kafka, _turn_records(topics))
    web = free_port()
    async with child(
        _worker_argv(secure_kafka, names, web, tmp_path),
        clean_env(**secure_kafka.password_env(SWEPT[Role.ANALYTICS])),
    ) as worker:
        log = ChildLog(worker)
        await assert_eventually(
            lambda: _published(secure_kafka, names, web),
            timeout=TIMEOUT,
            interval=0.25,
            message="the worker published before the revocation",
        )
        await revoke(secure_kafka, grant)
        # The next record needs a transaction (its table update and offset).
        await _produce(secure_kafka, _turn_records(topics))
        took = await exit_within(worker, REVOKED_EXIT_S, log)
        text = await log.end()

    assert worker.returncode == ExitCode.AUTHORIZATION, (
        f"took {took:.1f} s\n{text[-4000:]}"
    )
    label = f"lacks {operation.label} on {resource_type.label} "
    said = [line for line in text.splitlines() if label in line]
    assert len(said) == 1, text[-4000:]
    assert said[0].startswith("error:"), said
    assert f"User:{SWEPT[Role.ANALYTICS]}" in said[0], said
    assert grant.resource in said[0], said
    noise = [
        line
        for line in text.splitlines()
        if '"level":"error"' in line and '"logger":"turnstream' not in line
    ]
    assert noise == [], "\n".join(noise)[-3000:]
