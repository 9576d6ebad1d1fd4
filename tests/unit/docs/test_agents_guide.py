"""The agents guide's first steps run as written: a package, its agents, a turn.

``docs/agents.md``'s blocks marked for this test are step 1 (a ``bash`` block
that makes the package) and step 2 (the ``py`` block a reader saves as
``myagents/acme/agents.py``). The bash block runs in a fresh directory, the
module is saved where it says, and the agents are loaded by the import paths
step 4 passes to ``actor run --agent``. The ``support`` agent then runs a turn
on the in-memory runtime: ``add`` is allowed, ``word_count`` waits on a gate.
The same code, with a docstring and one more agent, is
``examples/agents/acme/agents.py``, which the Kafka test of agents hosts.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from turnstream.events import PermissionDecided, PermissionRequested, StepDone
from turnstream.loop_actor import load_agent
from turnstream.runtime import AgentHost
from turnstream.testing import ScriptedModel, call, open_rig, text_step, tool_step

ROOT = Path(__file__).resolve().parents[3]
GUIDE = ROOT / "docs" / "agents.md"
EXAMPLE = ROOT / "examples" / "agents" / "acme" / "agents.py"
_MARKED = re.compile(
    r"^<!-- run by tests/unit/docs/test_agents_guide.py -->\n```(\w+)\n(.*?)^```",
    re.DOTALL | re.MULTILINE,
)


def steps() -> tuple[str, str]:
    """The guide's step 1 (bash) and step 2 (the agents module)."""
    (shell, make_package), (py, module) = _MARKED.findall(
        GUIDE.read_text(encoding="utf-8")
    )
    assert (shell, py) == ("bash", "py")
    return make_package, module


@pytest.fixture
def fresh_acme() -> Iterator[None]:
    """No ``acme`` module is cached before or left behind after the test."""

    def forget() -> None:
        for name in [n for n in sys.modules if n == "acme" or n.startswith("acme.")]:
            del sys.modules[name]

    forget()
    yield
    forget()


def test_the_guide_module_is_the_example_package() -> None:
    """What the guide shows is what examples/agents holds, below its docstring."""
    _, module = steps()
    docstring, body = module.split('"""\n', 1)
    assert docstring.startswith('"""acme')
    assert body in EXAMPLE.read_text(encoding="utf-8")


@pytest.fixture
def guide_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_acme: None
) -> Path:
    """Steps 1 and 2 done as the guide says, in a fresh directory."""
    make_package, module = steps()
    bash = shutil.which("bash")
    assert bash is not None
    subprocess.run(  # noqa: S603 - the guide's own step, in a temporary directory
        [bash, "-eu", "-c", make_package], cwd=tmp_path, check=True
    )
    package = tmp_path / "myagents"
    assert (package / "acme" / "__init__.py").is_file()
    (package / "acme" / "agents.py").write_text(module, encoding="utf-8")
    monkeypatch.chdir(package)  # step 4 runs the service from here
    monkeypatch.syspath_prepend(str(package))
    return package


async def test_the_guide_steps_make_a_package_whose_agent_runs_a_turn(
    guide_package: Path,
) -> None:

    support = load_agent("acme.agents:support")
    auditor = load_agent("acme.agents:auditor")
    assert (support.name, auditor.name) == ("support", "auditor")
    assert [t.spec.name for t in support.tools] == ["add", "word_count"]

    host = AgentHost([support], lambda _a: ScriptedModel([]))
    turn = [
        tool_step(call("add", '{"a": 2, "b": 3}', id="c1")),
        tool_step(call("word_count", '{"text": "count these four words"}', id="c2")),
        text_step("The total is 5."),
    ]
    async with (
        host.tools_open(),
        open_rig(
            *turn,
            config=support.loop_config(),
            access_policy=support.access_policy(),
        ) as rig,
    ):
        await rig.submit("add 2 3")
        requested = await rig.recorder.wait_for_type(PermissionRequested)
        assert requested.tool_name == "word_count"
        await rig.session.respond_gate(requested.gate_id, "approve")
        await rig.idle()
    decided = rig.recorder.of_type(PermissionDecided)
    assert [(d.subject, d.effect) for d in decided] == [("add", "approve")]
    results = [
        [getattr(b, "text", "") for m in step.messages[1:] for b in m.blocks]
        for step in rig.recorder.of_type(StepDone)[:2]
    ]
    assert results == [["5"], ["4"]]
