"""A stopped analytics worker ends its process, whatever faust leaves running.

faust can leave tasks that ignore their cancellation; ``asyncio.run``'s
teardown then waits for them forever. The command must still end with the
exit code of what stopped the worker. Each case runs the real command in a
child process with the worker replaced by one that crashes that way.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from turnstream.cli.settings import ExitCode

# A generous bound: the child's own start-up is most of it; a hang never ends.
_CHILD_S = 60.0

_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    import turnstream.analytics as worker
    from turnstream.analytics.errors import WorkerDeniedError, WorkerStoppedError

    async def stubborn():
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                pass

    async def crashing(settings, *, preflight):
        stuck = asyncio.get_running_loop().create_task(stubborn())
        await asyncio.sleep(0)
        worker.stuck = stuck  # held: the task outlives the worker
        if sys.argv[1] == "denied":
            raise WorkerDeniedError(permission="Write", resource="analytics-out")
        if sys.argv[1] == "denied-group":
            raise WorkerDeniedError(
                permission="Read", resource="analytics", resource_type="Group"
            )
        raise WorkerStoppedError("IllegalOperation")

    worker.run = crashing
    from turnstream.cli.main import app
    app(["analytics", "run", "--bootstrap", "127.0.0.1:1", "--no-web"],
        prog_name="turnstream")
    """
)


@pytest.mark.parametrize(
    ("crash", "code", "says"),
    [
        ("stopped", ExitCode.FAILED, "IllegalOperation"),
        ("denied", ExitCode.AUTHORIZATION, "lacks Write on Topic analytics-out"),
        ("denied-group", ExitCode.AUTHORIZATION, "lacks Read on Group analytics"),
    ],
)
def test_a_stopped_worker_ends_the_process_with_its_code(
    crash: str, code: ExitCode, says: str
) -> None:
    done = subprocess.run(  # noqa: S603 - this interpreter, a fixed script
        [sys.executable, "-c", _CHILD, crash],
        capture_output=True,
        text=True,
        timeout=_CHILD_S,
        check=False,
    )

    assert done.returncode == code, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr[-2000:]
    assert says in errors[0]
