"""Options several commands share, generated from their declarations.

Owns the typer annotations of the model (``--model``, ``--base-url``,
``--chunk-delay``), the consumer group (``--group``) and logging
(``--log-format``, ``--log-level``), used by ``demo``, ``chat`` and
``analytics run``; each is the declared setting
(:mod:`turnstream.loop_actor.settings`, :mod:`turnstream.config`) as an option,
so flag names, variables and help are written once. Resolving and validating
them is the settings modules' job. Must not import aiokafka.
"""

from __future__ import annotations

from typing import Annotated

from turnstream.cli.setting_options import option
from turnstream.config import LOG_FORMAT, LOG_LEVEL
from turnstream.loop_actor.settings import GROUP, MODEL, MODEL_SETTINGS

__all__ = [
    "BaseUrlOption",
    "ChunkDelayOption",
    "GroupOption",
    "LogFormatOption",
    "LogLevelOption",
    "ModelOption",
]

_, _BASE_URL, _CHUNK_DELAY = MODEL_SETTINGS

ModelOption = Annotated[str, option(MODEL)]
BaseUrlOption = Annotated[str | None, option(_BASE_URL)]
ChunkDelayOption = Annotated[float, option(_CHUNK_DELAY)]
GroupOption = Annotated[str, option(GROUP)]
LogFormatOption = Annotated[str, option(LOG_FORMAT)]
LogLevelOption = Annotated[str, option(LOG_LEVEL)]
