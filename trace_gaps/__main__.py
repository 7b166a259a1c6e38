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
    except Exception as error:
        # A signal while a C extension initialises (matplotlib's Agg, imported when the
        # first picture is saved) surfaces as that module's ImportError; one while a class
        # is made (a dataclass field's __set_name__, as a module loads) as a RuntimeError.
        stop = _stop_behind(error)
        if isinstance(stop, KeyboardInterrupt):
            interrupted()
        if isinstance(stop, SystemExit):
            raise stop from None
        raise


def _stop_behind(error: BaseException) -> BaseException | None:
    """The Ctrl-C or stopping signal's exit that an exception was raised from, if any."""
    seen: set[int] = set()
    found: BaseException | None = error
    while found is not None and id(found) not in seen:
        if isinstance(found, KeyboardInterrupt | SystemExit):
            return found
        seen.add(id(found))
        found = found.__cause__ or found.__context__
    return None


def interrupted() -> NoReturn:
    sys.stderr.write("error: interrupted\n")
    sys.exit(130)


if __name__ == "__main__":
    main()
