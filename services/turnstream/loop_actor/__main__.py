"""``python -m turnstream.loop_actor``: an alias of ``turnstream actor run``.

The deployable has one entry point, the ``turnstream actor run`` command, which
reads every setting (flags over environment) and installs the signal handlers.
This alias keeps the module form working with the same flags; it defaults to
text logs and no metrics endpoint (several processes on one host would fight
over one port), and any flag given after it wins.
"""

import sys

from turnstream.cli.main import app


def main(argv: list[str] | None = None) -> None:
    """Run ``turnstream actor run`` with ``argv`` (default: the process's)."""
    args = sys.argv[1:] if argv is None else argv
    app(
        ["actor", "run", "--log-format", "text", "--metrics-port", "0", *args],
        prog_name="python -m turnstream.loop_actor",
    )


if __name__ == "__main__":
    main()
