"""`python -m trace_gaps`, and the `trace-gaps` command."""

import sys
from typing import NoReturn


def main() -> None:
    """Run the CLI; a Ctrl-C, even while the libraries load, ends with one line (exit 130);
    SIGTERM and SIGHUP end it quietly (143, 129), each after the same clean-up."""
    try:
        from trace_gaps.interrupts import stop_cleanly_on_signals

        stop_cleanly_on_signals()
        from trace_gaps.cli import app

        app()
    except KeyboardInterrupt:
        interrupted()
    except ImportError as error:
        # A signal while a C extension initialises (matplotlib's Agg, imported when the
        # first picture is saved) surfaces as that module's ImportError.
        if isinstance(error.__cause__, KeyboardInterrupt):
            interrupted()
        if isinstance(error.__cause__, SystemExit):
            raise error.__cause__ from None
        raise


def interrupted() -> NoReturn:
    sys.stderr.write("error: interrupted\n")
    sys.exit(130)


if __name__ == "__main__":
    main()
