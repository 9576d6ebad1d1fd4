"""``python -m turnstream.cli``: the same typer app as the ``turnstream`` script."""

from turnstream.cli.main import main

if __name__ == "__main__":
    main()
