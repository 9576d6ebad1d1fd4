"""The built wheel, installed into a brand-new virtualenv outside the checkout, works.

``python -m build --wheel`` builds it; ``python3.11 -m venv`` in a temporary
directory gets it (its dependencies come from the package index). Everything then
runs from that venv with the working directory outside the checkout and no
``PYTHONPATH``, ``TURNSTREAM_PROJECT_DIR`` or ``TURNSTREAM_SCHEMA_DIR``, so only
the wheel's own package data can serve:

- ``turnstream --version`` and ``turnstream topics apply`` (the packaged topic set);
- ``turnstream actor run`` (the packaged schemas);
- a script: ``connect`` → ``submit_and_wait`` → a ``JournalConsumer`` from the
  beginning that sees every event of the turn, up to its terminal.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.kafka_harness import (  # noqa: F401 - collect_garbage is an autouse fixture
    collect_garbage,
    collect_garbage_late,
    delete_topic_set,
    unique_prefix,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import asyncio, json, sys
from turnstream import JournalConsumer, TopicNames, TurnStatus, connect

async def main(bootstrap: str, prefix: str) -> None:
    async with await connect(bootstrap, topic_prefix=prefix) as session:
        outcome = await session.submit_and_wait("add 2 3", timeout=90)
    assert outcome.status is TurnStatus.DONE, outcome
    terminal = outcome.terminal.header.event_id
    seen = []
    done = asyncio.Event()

    async def handle(record):
        seen.append(record.event.type_name)
        if record.event.header.event_id == terminal:
            done.set()

    consumer = JournalConsumer.connect(
        bootstrap, handle, group_id=prefix + "downstream",
        topics=TopicNames.with_affixes(prefix=prefix), start="earliest",
    )
    async with consumer:
        await asyncio.wait_for(done.wait(), 60)
    import turnstream.resources as r
    print(json.dumps({
        "status": outcome.status.value, "text": outcome.text, "seen": seen,
        "schemas": str(r.schema_dir()), "module": __import__("turnstream").__file__,
    }))

asyncio.run(main(*sys.argv[1:3]))
"""


def _clean_env() -> dict[str, str]:
    drop = {"PYTHONPATH", "TURNSTREAM_PROJECT_DIR", "TURNSTREAM_SCHEMA_DIR"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def _run(argv: list[str], cwd: Path, timeout: float) -> str:
    done = subprocess.run(  # noqa: S603 - our own venv, fixed arguments
        argv,
        cwd=cwd,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{argv}: {done.stdout}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv outside the checkout with the freshly built wheel installed."""
    base = tmp_path_factory.mktemp("wheel-venv")
    assert ROOT not in base.parents
    _run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(base), str(ROOT)],
        base,
        120,
    )
    (wheel,) = base.glob("turnstream-*.whl")
    _run(["python3.11", "-m", "venv", str(base / "venv")], base, 60)
    pip = [str(base / "venv" / "bin" / "python"), "-m", "pip", "install", "-q"]
    _run([*pip, str(wheel)], base, 240)
    return base / "venv"


async def test_wheel_in_a_fresh_venv_serves_cli_actor_and_client(
    kafka_bootstrap: str, venv: Path, tmp_path: Path
) -> None:
    prefix = unique_prefix("wheel")
    bin_dir = venv / "bin"
    try:
        version = _run([str(bin_dir / "turnstream"), "--version"], tmp_path, 30)
        assert version.startswith("turnstream ")
        _run(
            [
                str(bin_dir / "turnstream"),
                "topics",
                "apply",
                "--bootstrap",
                kafka_bootstrap,
                "--topic-prefix",
                prefix,
                "--partitions",
                "1",
            ],
            tmp_path,
            60,
        )
        actor = await asyncio.create_subprocess_exec(
            str(bin_dir / "turnstream"),
            "actor",
            "run",
            "--bootstrap",
            kafka_bootstrap,
            "--group-id",
            f"{prefix}actors",
            "--topic-prefix",
            prefix,
            "--model",
            "demo",
            cwd=tmp_path,
            env=_clean_env(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            script = tmp_path / "use_it.py"
            script.write_text(SCRIPT)
            python = str(bin_dir / "python")
            out = await asyncio.to_thread(
                _run, [python, str(script), kafka_bootstrap, prefix], tmp_path, 150
            )
        finally:
            actor.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(30):
                    _, err = await actor.communicate()
            except TimeoutError:
                actor.kill()
                _, err = await actor.communicate()
        result = json.loads(out.strip().splitlines()[-1])
        assert result["status"] == "done", (result, err.decode()[-2000:])
        assert result["text"]
        assert str(venv) in result["module"]  # the wheel, not the checkout
        assert result["schemas"].startswith(str(venv))
        assert result["schemas"].endswith("turnstream/_data/schemas")
        seen = result["seen"]
        assert seen[0] == "LoopStarted"
        assert seen.index("TurnStarted") < seen.index("TurnDone")
    finally:
        await delete_topic_set(kafka_bootstrap, prefix)
