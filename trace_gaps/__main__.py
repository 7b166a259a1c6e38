"""`python -m trace_gaps`, and the `trace-gaps` command."""

import sys


def main() -> None:
    """Run the CLI; a Ctrl-C, even while the libraries load, ends with one line (exit 130)."""
    try:
        from trace_gaps.cli import app

        app()
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        sys.exit(130)


if __name__ == "__main__":
    main()
