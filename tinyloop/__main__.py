"""``python -m tinyloop``: the command line (tinyloop/cli.py)."""

from tinyloop.cli import main

# Only when run, not when imported (the book's API reference imports every module).
if __name__ == "__main__":
    raise SystemExit(main())
