"""The codec switch: ``TURNSTREAM_CODEC=generic`` turns every accelerator off.

The generic path (``to_record``/``from_record`` and fastavro) must then carry
every topic alone, with the same bytes and values, and the codec names the path
it runs (``Codec.path``) so the start-up log can say which one it is.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import NoReturn

import pytest
from tests.unit.wire.golden import BUILDERS, decoder_for, encode

from turnstream.errors import ConfigError
from turnstream.state import LoopState
from turnstream.wire import (
    CODEC_ENV,
    Codec,
    EncodedHistory,
    SchemaSet,
    native_available,
)
from turnstream.wire import codec as codec_module
from turnstream.wire._accel import native_plan


def _accelerator_ran(*args: object, **kwargs: object) -> NoReturn:
    raise AssertionError("an accelerator ran on the generic path")


def test_generic_runs_every_topic_without_an_accelerator(
    schema_set: SchemaSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    accelerated = Codec(schema_set, paths="auto")
    expected = {name: encode(accelerated, build()) for name, build in BUILDERS.items()}
    codec = Codec(schema_set, paths="generic")
    # Every accelerator's entry point fails the test if the codec calls it.
    monkeypatch.setattr(native_plan, "write", _accelerator_ran)
    monkeypatch.setattr(native_plan, "read", _accelerator_ran)
    monkeypatch.setattr(codec_module, "FastPath", _accelerator_ran)
    monkeypatch.setattr(codec_module, "compile_schema", _accelerator_ran)
    monkeypatch.setattr(codec_module, "StateWriter", _accelerator_ran)

    assert codec.path == "generic"
    for name, build in BUILDERS.items():
        value = build()
        data = encode(codec, value)
        assert data == expected[name], name
        assert decoder_for(codec, value)(data) == value, name
        if isinstance(value, LoopState):
            history = EncodedHistory()
            assert codec.marshal_state(value, history) == data, name
            assert history.size == 0, name  # the memo is an accelerator too


def test_the_path_a_codec_runs(schema_set: SchemaSet) -> None:
    fastest = "native" if native_available() else "generated"
    assert Codec(schema_set, paths="auto").path == fastest
    assert Codec(schema_set, paths="auto", native=False).path == "generated"
    assert Codec(schema_set, paths="generated").path == "generated"
    assert Codec(schema_set, paths="generic").path == "generic"


def test_an_unknown_setting_is_a_config_error(
    schema_set: SchemaSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CODEC_ENV, "fastest")
    with pytest.raises(ConfigError) as caught:
        Codec(schema_set)
    assert caught.value.setting == CODEC_ENV
    assert caught.value.kind == "config"


def _in_a_process(env: dict[str, str]) -> str:
    code = (
        "import sys\n"
        "from turnstream.wire import default_codec, native_available\n"
        "from tests.unit.wire.golden import BUILDERS\n"
        "c = default_codec()\n"
        "e = BUILDERS['TurnDone']()\n"
        "assert c.unmarshal_event(c.marshal_event(e)) == e\n"
        "print(c.path, native_available(),\n"
        "      'turnstream.wire._accel._native' in sys.modules)\n"
    )
    done = subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_the_environment_switches_the_c_extension_off_before_it_loads() -> None:
    assert _in_a_process({CODEC_ENV: "generic"}) == "generic False False"
    assert _in_a_process({CODEC_ENV: "generated"}) == "generated False False"
    # The older switch of the C extension alone still works.
    older = {CODEC_ENV: "", native_plan.NATIVE_ENV: "0"}
    assert _in_a_process(older) == "generated False False"


def test_without_native_no_topic_calls_the_c_extension(
    schema_set: SchemaSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``native=False`` (and ``generated``) leaves the C out of snapshots too."""
    expected = {
        name: encode(Codec(schema_set, paths="auto"), build())
        for name, build in BUILDERS.items()
    }
    monkeypatch.setattr(native_plan, "write", _accelerator_ran)
    monkeypatch.setattr(native_plan, "read", _accelerator_ran)
    for codec in (
        Codec(schema_set, native=False),
        Codec(schema_set, paths="generated"),
    ):
        for name, build in BUILDERS.items():
            value = build()
            data = encode(codec, value)
            assert data == expected[name], name
            assert decoder_for(codec, value)(data) == value, name
            if isinstance(value, LoopState):
                assert codec.marshal_state(value, EncodedHistory()) == data, name
