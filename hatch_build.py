"""Build hook: compile the codec's native fast path, ``wire/_accel/_native.c``.

Optional by design: where no C compiler is found (or ``TURNSTREAM_BUILD_NATIVE=0``)
the build goes on as pure Python with a warning, and the codec runs its Python
paths (same bytes, same values, slower). The extension is compiled in place
next to its source, so an editable install imports it from the checkout; a
wheel carries it and gets a platform tag.

``python hatch_build.py`` (``make native``) rebuilds it in place after an edit
of the C source.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

SOURCE = Path("services/turnstream/wire/_accel/_native.c")
BUILD_ENV = "TURNSTREAM_BUILD_NATIVE"


def compiler() -> list[str] | None:
    """The C compiler command the interpreter was built with, if it is here."""
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    if not cc or shutil.which(cc[0]) is None:
        return None
    return cc


def source_digest(source: bytes) -> str:
    """The digest a build of ``_native.c`` carries (``_native.SOURCE_DIGEST``)."""
    return hashlib.sha256(source).hexdigest()[:16]


def build_native(root: Path) -> Path | str:
    """Compile the extension next to its source: its path, or why not."""
    if os.environ.get(BUILD_ENV, "1") == "0":
        return f"{BUILD_ENV}=0"
    if sys.platform == "win32":
        return "no build recipe for Windows"
    cc = compiler()
    if cc is None:
        return "no C compiler found"
    source = root / SOURCE
    target = source.with_name("_native" + str(sysconfig.get_config_var("EXT_SUFFIX")))
    digest = source_digest(source.read_bytes())
    with tempfile.TemporaryDirectory() as scratch:
        built = Path(scratch) / target.name
        command = [
            *cc,
            "-O2",
            "-DNDEBUG",  # as CPython's own release build: no asserts per access
            # The module reports the source it was built from, so a stale build
            # (the C edited, not rebuilt) is never used with newer plans.
            f'-DTURNSTREAM_NATIVE_SOURCE="{digest}"',
            "-fPIC",
            "-shared",
            "-I",
            sysconfig.get_paths()["include"],
            str(source),
            "-o",
            str(built),
        ]
        if sys.platform == "darwin":
            command += ["-undefined", "dynamic_lookup"]
        done = subprocess.run(  # noqa: S603 - the interpreter's own compiler
            command, capture_output=True, text=True, timeout=300, check=False
        )
        if done.returncode != 0:
            return f"compile failed: {done.stderr.strip()[-2000:]}"
        # A rename, so a process that has the old one loaded keeps it intact.
        os.replace(built, target)
    return target


try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run as a script, outside a build
    pass
else:

    class NativeCodecHook(BuildHookInterface):  # type: ignore[type-arg]
        """Compiles the native codec for wheel and editable builds."""

        PLUGIN_NAME = "custom"

        def initialize(self, version: str, build_data: dict[str, Any]) -> None:
            """Build the extension; mark the wheel platform-specific if it was."""
            if self.target_name != "wheel":
                return
            built = build_native(Path(self.root))
            if isinstance(built, str):
                self.app.display_warning(
                    f"turnstream: native codec not built ({built}); "
                    "the codec runs its Python paths"
                )
                return
            build_data["pure_python"] = False
            build_data["infer_tag"] = True
            if version != "editable":
                build_data["force_include"][str(built)] = (
                    f"turnstream/wire/_accel/{built.name}"
                )


if __name__ == "__main__":
    result = build_native(Path(__file__).resolve().parent)
    print(result)
    sys.exit(0 if isinstance(result, Path) else 1)
