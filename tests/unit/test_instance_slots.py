"""Static instance ids: one per free local slot, given back when the holder ends."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from turnstream.errors import ConfigError
from turnstream.loop_actor.instance import claim_instance


def test_auto_claims_the_lowest_free_slot_and_release_frees_it(tmp_path: Path) -> None:
    first = claim_instance("auto", "g", host="box", lock_dir=tmp_path)
    second = claim_instance("auto", "g", host="box", lock_dir=tmp_path)
    other_group = claim_instance("auto", "h", host="box", lock_dir=tmp_path)
    assert (first.instance_id, second.instance_id) == ("box-0", "box-1")
    assert other_group.instance_id == "box-0"
    first.release()
    again = claim_instance("auto", "g", host="box", lock_dir=tmp_path)
    assert again.instance_id == "box-0"
    for claim in (second, other_group, again):
        claim.release()


def test_a_killed_holder_gives_its_slot_to_the_replacement(tmp_path: Path) -> None:
    """The lock belongs to the process: SIGKILL frees it for the next claimant."""
    where = str(tmp_path)
    script = (
        "import time; from pathlib import Path;"
        "from turnstream.loop_actor.instance import claim_instance;"
        f"c = claim_instance('auto', 'g', host='box', lock_dir=Path({where!r}))\n"
        "print(c.instance_id, flush=True); time.sleep(60)"
    )
    argv = [sys.executable, "-c", script]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as holder:  # noqa: S603
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "box-0"
            taken = claim_instance("auto", "g", host="box", lock_dir=tmp_path)
            assert taken.instance_id == "box-1"
            taken.release()
        finally:
            holder.kill()
            holder.wait()
    replacement = claim_instance("auto", "g", host="box", lock_dir=tmp_path)
    assert replacement.instance_id == "box-0"
    replacement.release()


def test_none_is_dynamic_and_an_explicit_id_is_kept(tmp_path: Path) -> None:
    assert claim_instance("none", "g", lock_dir=tmp_path).instance_id is None
    assert claim_instance("pod-7", "g", lock_dir=tmp_path).instance_id == "pod-7"


def test_host_names_are_made_safe_for_an_instance_id(tmp_path: Path) -> None:
    claim = claim_instance("auto", "g", host="my host/1", lock_dir=tmp_path)
    assert claim.instance_id == "my-host-1-0"
    claim.release()


def test_an_unusable_lock_directory_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError) as info:
        claim_instance("auto", "g", lock_dir=blocker / "locks")
    assert info.value.kind == "config"
