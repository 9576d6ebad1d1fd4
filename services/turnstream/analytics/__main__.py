"""``python -m turnstream.analytics``: an alias of ``turnstream analytics run``.

The worker has one entry point, the ``turnstream analytics run`` command, which
reads every setting (flags over environment, validated together) and installs
the signal handlers. This alias keeps the module form working with the same
flags; it defaults to text logs, and any flag given after it wins.
"""

import sys

from turnstream.cli.main import app


def main(argv: list[str] | None = None) -> None:
    """Run ``turnstream analytics run`` with ``argv`` (default: the process's)."""
    args = sys.argv[1:] if argv is None else argv
    app(
        ["analytics", "run", "--log-format", "text", *args],
        prog_name="python -m turnstream.analytics",
    )


if __name__ == "__main__":
    main()
