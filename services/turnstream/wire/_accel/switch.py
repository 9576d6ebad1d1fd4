"""The codec's one switch: which of its paths may run.

Owns :data:`CODEC_ENV` and :func:`codec_choice`, the only reader of the
setting. ``TURNSTREAM_CODEC`` takes:

* ``auto`` (the default) -- the fastest path present: the C plans where the
  extension is built, else the generated Python writers and readers;
* ``generated`` -- the generated Python paths, never the C extension;
* ``generic`` -- no accelerator at all: ``to_record``/``from_record`` and
  fastavro, the authority every accelerator must match byte for byte.

``TURNSTREAM_NATIVE_CODEC=0``, the older switch of the C extension alone, is
read here too and means ``generated``. Imports the error tree only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final, Literal, cast, get_args

from turnstream.errors import ConfigError

__all__ = [
    "CODEC_ENV",
    "NATIVE_ENV",
    "CodecChoice",
    "CodecPath",
    "codec_choice",
]

CODEC_ENV: Final = "TURNSTREAM_CODEC"
"""``auto`` | ``generated`` | ``generic``: the paths the codec may run."""

NATIVE_ENV: Final = "TURNSTREAM_NATIVE_CODEC"
"""The older switch: ``0`` is ``TURNSTREAM_CODEC=generated``."""

CodecChoice = Literal["auto", "generated", "generic"]
"""What the setting asks for."""

CodecPath = Literal["native", "generated", "generic"]
"""The path a codec runs: C plans, generated Python, or the generic mapping."""

_CHOICES: Final = frozenset(get_args(CodecChoice))


def codec_choice(environ: Mapping[str, str] | None = None) -> CodecChoice:
    """The paths the setting allows (``auto`` when it is unset).

    Raises:
        ConfigError: ``TURNSTREAM_CODEC`` is set to anything else.
    """
    env = os.environ if environ is None else environ
    raw = env.get(CODEC_ENV, "").strip().lower()
    if not raw:
        return "generated" if env.get(NATIVE_ENV, "1") == "0" else "auto"
    if raw in _CHOICES:
        return cast("CodecChoice", raw)
    raise ConfigError(CODEC_ENV, f"must be one of {', '.join(sorted(_CHOICES))}")
