"""Options shared by several commands (the Kafka group is in ``kafka_options``).

Owns the typer options of the model (``--model``, ``--base-url``,
``--chunk-delay``), the consumer group (``--group``) and logging
(``--log-format``, ``--log-level``), used by ``actor run``, ``demo`` and
``analytics run``. Declarations only: resolving and validating them is
:mod:`turnstream.cli.settings`'s job. Must not import aiokafka.
"""

from __future__ import annotations

from typing import Annotated

import typer

from turnstream.cli.settings import ENV

__all__ = [
    "BaseUrlOption",
    "ChunkDelayOption",
    "GroupOption",
    "LogFormatOption",
    "LogLevelOption",
    "ModelOption",
]

ModelOption = Annotated[
    str,
    typer.Option(
        "--model",
        "-m",
        envvar=ENV.MODEL,
        help="demo | openai:NAME | anthropic:NAME. The API key is read from "
        "OPENAI_API_KEY / ANTHROPIC_API_KEY (never a flag).",
    ),
]
BaseUrlOption = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        "--model-base-url",
        envvar=ENV.BASE_URL,
        help="Model API root, e.g. http://127.0.0.1:11434/v1 for a local "
        "OpenAI-compatible server (default: the provider's).",
        show_default=False,
    ),
]
ChunkDelayOption = Annotated[
    float,
    typer.Option(
        "--chunk-delay",
        envvar=ENV.CHUNK_DELAY,
        min=0.0,
        help="Seconds between the demo model's streamed chunks.",
    ),
]
GroupOption = Annotated[
    str,
    typer.Option(
        "--group",
        "-g",
        "--group-id",
        envvar=ENV.GROUP_ID,
        help="Consumer group; actors in one group share the commands partitions.",
    ),
]
LogFormatOption = Annotated[
    str,
    typer.Option(
        "--log-format",
        envvar=ENV.LOG_FORMAT,
        help="json (one object per line) or text. Logs go to stderr and never "
        "contain message contents.",
    ),
]
LogLevelOption = Annotated[
    str,
    typer.Option(
        "--log-level",
        envvar=ENV.LOG_LEVEL,
        help="DEBUG, INFO, WARNING or ERROR.",
    ),
]
