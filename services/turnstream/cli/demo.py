"""``turnstream demo``: the main job, from nothing to a streamed, tool-using turn.

Owns the ``demo`` command. In order: start (or reuse) the local broker unless
``--bootstrap`` / ``KAFKA_BOOTSTRAP_SERVERS`` names a cluster; apply
``infra/topics.yaml`` (idempotent; a topic with other settings stops the demo);
start a loop actor in this process (the real Kafka service, same consumer
group as ``turnstream actor run``); connect the Kafka session client; run the
three turns of :mod:`turnstream.cli.demo_script`, printing every event as it
arrives; then stop the actor and close the clients. The broker is left running
(``--stop-broker`` stops it). Exit 0 only if the whole expected lifecycle was
seen; 1 if not, or if a topic exists with other settings; 2 for bad settings or
missing topics; 3 if Kafka does not answer.
Must not import aiokafka.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from turnstream.cli._common import console, dev_broker, project_dir
from turnstream.cli.demo_script import DemoScript, LifecycleCheck, run_script
from turnstream.cli.failures import exit_on_errors, fail
from turnstream.cli.kafka_options import kafka_options
from turnstream.cli.options import BaseUrlOption, GroupOption, ModelOption
from turnstream.cli.render import EventRenderer
from turnstream.cli.setting_options import option
from turnstream.cli.settings import (
    DEFAULT_GROUP_ID,
    ExitCode,
    KafkaTarget,
    MetricsEndpoint,
    ModelChoice,
    parse_log_format,
    parse_log_level,
)
from turnstream.cli.watch import EventPrinter, connect_session
from turnstream.config import LOG_FORMAT, LOG_LEVEL
from turnstream.errors import TransportError, TurnstreamError
from turnstream.ids import LoopId
from turnstream.kafka.actor.metrics import ServiceMetrics
from turnstream.kafka.actor.service import LoopActorService
from turnstream.kafka.admin.probe import check_broker
from turnstream.kafka.admin.topics import (
    ApplyReport,
    TopicOutcome,
    apply_topics,
    load_topic_set,
    resolve_topics,
)
from turnstream.loop_actor import ActorSettings, build_service, parse_settings
from turnstream.loop_actor.metrics_http import serve_health
from turnstream.loop_actor.settings import MODEL_SETTINGS
from turnstream.observability import configure_logging

__all__ = ["demo"]

_READY_POLL = 0.1
_STOP_WITHIN = 30.0


def _ok(text: str) -> None:
    console.print(f"[green]✓[/] {escape(text)}", soft_wrap=True, highlight=False)


def _info(text: str) -> None:
    console.print(f"[dim]•[/] {escape(text)}", soft_wrap=True, highlight=False)


def _topics_line(report: ApplyReport, bootstrap: str) -> str:
    created = sum(1 for r in report.results if r.outcome is TopicOutcome.CREATED)
    return (
        f"topics ready on {bootstrap}: {len(report.results)} declared, "
        f"{created} created, {len(report.results) - created} already as declared"
    )


async def _prepare_topics(target: KafkaTarget) -> None:
    await check_broker(target.connection, security=target.security)
    desired = resolve_topics(
        load_topic_set(project_dir() / "infra" / "topics.yaml"),
        prefix=target.prefix,
        suffix=target.suffix,
    )
    report = await apply_topics(
        target.connection, desired, security=target.security, raise_on_mismatch=True
    )
    _ok(_topics_line(report, target.bootstrap))


async def _wait_ready(
    service: LoopActorService, running: asyncio.Task[None], within: float
) -> bool:
    """True once the actor owns and restored its partitions; False if it ended.

    Raises:
        TransportError: not ready within ``within`` seconds.
    """
    deadline = time.monotonic() + within
    while not service.ready:
        if running.done():
            return False  # its error surfaces from the task group
        if time.monotonic() > deadline:
            raise TransportError(
                "start the loop actor", f"not ready within {within:g} s", retriable=True
            )
        await asyncio.sleep(_READY_POLL)
    return True


async def _run_turns(
    target: KafkaTarget, script: DemoScript, deltas: bool, within: float
) -> LifecycleCheck:
    loop_id = LoopId(uuid.uuid4())
    session = await connect_session(target, loop_id=loop_id)
    async with session:
        _ok(f"session client connected; loop {loop_id}")
        printer = EventPrinter(console, EventRenderer(deltas=deltas))
        try:
            check = await run_script(session, loop_id, script, printer, within=within)
        finally:
            printer.close()
    _summarise(check, script)
    return check


async def _actor_and_turns(
    service: LoopActorService,
    target: KafkaTarget,
    script: DemoScript,
    *,
    deltas: bool,
    within: float,
    where: str,
) -> LifecycleCheck | None:
    """Run the actor in a task group while the turns run; stop it in order."""
    started = time.monotonic()
    failure: TurnstreamError | None = None
    check: LifecycleCheck | None = None
    try:
        async with asyncio.TaskGroup() as group:
            running = group.create_task(service.run(), name="demo-loop-actor")
            try:
                if await _wait_ready(service, running, within):
                    _ok(
                        f"loop actor ready in {time.monotonic() - started:.1f} s "
                        f"(in-process, partitions "
                        f"{sorted(service.metrics.partitions)}{where})"
                    )
                    check = await _run_turns(target, script, deltas, within)
            except TurnstreamError as exc:
                failure = exc  # stop the actor in order first, then report it
            except asyncio.CancelledError:
                # Ctrl-C: let the actor hand its partitions over, then go on.
                service.request_shutdown()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_STOP_WITHIN):
                        await asyncio.wait([running])
                raise
            finally:
                service.request_shutdown()
    except* TurnstreamError as group_error:
        raise group_error.exceptions[0] from None
    if failure is not None:
        raise failure
    return check


async def _demo(
    settings: ActorSettings,
    target: KafkaTarget,
    script: DemoScript,
    *,
    endpoint: MetricsEndpoint,
    deltas: bool,
    within: float,
) -> LifecycleCheck | None:
    await _prepare_topics(target)
    metrics = ServiceMetrics()
    built = build_service(settings, metrics=metrics)
    _info(f"starting a loop actor: group {settings.group_id}, model {settings.model}")
    try:
        async with serve_health(
            metrics, host=endpoint.host, port=endpoint.port
        ) as server:
            where = f"; metrics at {server.url}/metrics" if server else ""
            return await _actor_and_turns(
                built.service, target, script, deltas=deltas, within=within, where=where
            )
    finally:
        for model in built.models:
            close = getattr(model, "aclose", None)
            if close is not None:
                await close()
        _ok("loop actor stopped, session client closed")


def _summarise(check: LifecycleCheck, script: DemoScript) -> None:
    for line in check.summary():
        _info(line)
    for problem in check.problems(script):
        console.print(f"[bold red]✗[/] {escape(problem)}", soft_wrap=True)


def _verdict(
    check: LifecycleCheck | None, script: DemoScript, started: float
) -> ExitCode:
    seconds = time.monotonic() - started
    if check is None or check.problems(script):
        reason = "the loop actor stopped early" if check is None else "see ✗ above"
        console.print(
            f"[bold red]demo FAILED[/] after {seconds:.1f} s ({reason})", soft_wrap=True
        )
        return ExitCode.FAILED
    console.print(
        f"[bold green]demo OK[/] in {seconds:.1f} s: a tool-using turn, a queued "
        "input that chained, an interrupted turn",
        soft_wrap=True,
    )
    return ExitCode.OK


@kafka_options()
def demo(
    *,
    target: KafkaTarget,
    model: ModelOption = "demo",
    base_url: BaseUrlOption = None,
    chunk_delay: Annotated[
        float, option(dataclasses.replace(MODEL_SETTINGS[2], default=0.05))
    ] = 0.05,
    group: GroupOption = DEFAULT_GROUP_ID,
    stop_broker: Annotated[
        bool,
        typer.Option(
            "--stop-broker",
            help="Stop the local broker afterwards (default: leave it running).",
        ),
    ] = False,
    deltas: Annotated[
        bool,
        typer.Option("--deltas/--no-deltas", help="Show streamed token deltas inline."),
    ] = True,
    metrics_port: Annotated[
        int,
        typer.Option(
            "--metrics-port",
            min=0,
            max=65535,
            help="Serve the in-process actor's /metrics and /ready here (0: off).",
        ),
    ] = 0,
    within: Annotated[
        float,
        typer.Option(
            "--within",
            min=1.0,
            help="Seconds the whole demo may take before it gives up (exit 1).",
        ),
    ] = 120.0,
    log_format: Annotated[
        str, option(dataclasses.replace(LOG_FORMAT, default="text"))
    ] = "text",
    log_level_name: Annotated[
        str,
        typer.Option(
            "--log-level",
            envvar=LOG_LEVEL.env,
            help="Log level of the in-process actor (logs go to stderr).",
        ),
    ] = "WARNING",
) -> None:
    """Broker, topics, a loop actor and three turns, printed as they happen.

    Turn 1 uses tools over several steps; input 2 is sent while turn 1 runs, so
    it is queued and chains after it; turn 3 is interrupted mid-answer. With
    --model openai:NAME or anthropic:NAME (key from OPENAI_API_KEY or
    ANTHROPIC_API_KEY) a real model answers. Exit codes: 0 only if all of it
    happened; 1 if not, or a topic exists with other settings; 2 bad settings or
    missing topics; 3 Kafka unreachable, 4 login refused, 5 TLS failed, 6 ACL denied.
    """
    started = time.monotonic()
    with exit_on_errors():
        fmt = parse_log_format(log_format)
        level = parse_log_level(log_level_name)
        choice = ModelChoice.parse(
            model, base_url=base_url, env=os.environ, chunk_delay=chunk_delay
        )
        endpoint = MetricsEndpoint(port=metrics_port)
        settings = parse_settings(
            os.environ,
            {
                "bootstrap": target.bootstrap,
                "request_timeout": target.connection.request_timeout,
                "topic_prefix": target.prefix,
                "topic_suffix": target.suffix,
                "group_id": group,
                "model": model,
                "model_base_url": base_url,
                "chunk_delay": chunk_delay,
                "tools": "demo",
            },
            security=target.security,
        )
        broker = None if target.external else dev_broker()
    configure_logging(fmt, level=level)
    console.print(
        f"[bold]turnstream demo[/]: broker → topics → loop actor → three turns "
        f"(model {escape(choice.label)})",
        highlight=False,
        soft_wrap=True,
    )
    with exit_on_errors(target.bootstrap):
        if broker is None:
            _info(f"using the configured cluster at {target.bootstrap}")
        else:
            status = broker.up()
            verb = "started" if status.started else "reused"
            _ok(f"broker {verb} at {status.bootstrap} (pid {status.pid})")
        script = DemoScript.for_provider(choice.provider)
        check = asyncio.run(
            _demo(
                settings,
                target,
                script,
                endpoint=endpoint,
                deltas=deltas,
                within=within,
            )
        )
        if broker is not None and stop_broker:
            broker.down()
            _ok("broker stopped")
        elif broker is not None:
            _info(
                f"broker left running at {target.bootstrap}; "
                f"stop it with `{_turnstream_command()} broker down`"
            )
    code = _verdict(check, script, started)
    if code is not ExitCode.OK:
        raise fail("the expected lifecycle did not happen", code)
    raise typer.Exit(int(code))


def _turnstream_command() -> str:
    """How to run ``turnstream`` from here: the venv's script when not on PATH."""
    script = Path(sys.executable).parent / "turnstream"
    on_path = shutil.which("turnstream")
    if on_path is not None and Path(on_path).resolve() == script.resolve():
        return "turnstream"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)
