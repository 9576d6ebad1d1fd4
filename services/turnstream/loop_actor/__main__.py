"""``python -m turnstream.loop_actor``: run the loop-actor service until a signal.

Owns the process edge: read the settings once (flags, then environment),
configure logging, install SIGTERM/SIGINT handlers that request an ordered
shutdown, and exit with 0 after a clean stop, 2 on a configuration error and
1 on any other failure. The only place signal handlers live.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

from turnstream.errors import ConfigError, TurnstreamError
from turnstream.kafka.actor.service import LoopActorService
from turnstream.loop_actor.app import run_service
from turnstream.loop_actor.settings import ActorSettings, parse_settings

EXIT_FAILURE = 1
EXIT_CONFIG = 2


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # aiokafka logs every refused connection at ERROR; keep its warnings only.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


async def _main(settings: ActorSettings) -> None:
    loop = asyncio.get_running_loop()

    def install(service: LoopActorService) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, service.request_shutdown)

    await run_service(settings, on_start=install)


def main(argv: list[str] | None = None) -> int:
    """Run the service; return the process exit code."""
    try:
        settings = parse_settings(sys.argv[1:] if argv is None else argv, os.environ)
        _configure_logging(settings.log_level)
        asyncio.run(_main(settings))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except TurnstreamError as exc:
        print(f"error: {exc} [{exc.kind}]", file=sys.stderr)
        return EXIT_FAILURE
    return 0


if __name__ == "__main__":
    sys.exit(main())
