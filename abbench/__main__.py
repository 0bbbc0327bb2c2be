"""``python -m abbench`` and the ``abbench`` command: a Ctrl-C while Python still
imports the CLI ends with exit 130 like any other, never a traceback."""

import sys


def main() -> None:
    try:
        from abbench.cli import main as cli_main
    except KeyboardInterrupt:
        sys.exit(130)
    cli_main()


if __name__ == "__main__":
    main()
