"""How a command stops when told to: SIGTERM and SIGHUP as Ctrl-C, children with their parent.

Python ends a process at once on SIGTERM (a `kill`, a job scheduler, a closed terminal's
SIGHUP): no `finally` runs, so a temporary file of an output (output.py), a bundle's staging
folder (bundle.py) and nsys's partial export (nsys/convert.py) would stay behind. Raising
SystemExit instead lets every clean-up on the way out run, as a Ctrl-C's KeyboardInterrupt
does. A child forked to draw or analyse (parallel.forked) is killed when its parent ends,
however it ends (even SIGKILL, where no clean-up can run).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

STOPPING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def stop_cleanly_on_signals() -> None:
    """From now on, SIGTERM and SIGHUP raise SystemExit(128 + signal) in the main thread."""
    for signum in STOPPING_SIGNALS:
        if signal.getsignal(signum) is signal.SIG_DFL:  # not when the caller ignores them
            signal.signal(signum, _exit_stopped)


def _exit_stopped(signum: int, frame: object) -> None:
    # A second signal while cleaning up ends the process at once, as Python's default does.
    for stopping in STOPPING_SIGNALS:
        signal.signal(stopping, signal.SIG_DFL)
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """While inside, Ctrl-C, SIGTERM and SIGHUP wait (a few renames that must happen all or
    none); one that came meanwhile acts on the way out. Elsewhere than in the main thread of
    a POSIX process, a plain block.

    Blocking the signals in this thread is not enough where other threads run: the kernel
    then hands a process's signal to one of them, and Python runs its handler in this thread
    at once. So the handlers are set aside too, the signal noted, and raised again on the
    way out (by this process only: a child forked inside leaves with nothing pending)."""
    held = (signal.SIGINT, *STOPPING_SIGNALS)
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not (
        threading.main_thread()
    ):
        yield
        return
    came: list[int] = []
    owner = os.getpid()
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    handlers = {signum: signal.signal(signum, lambda n, _: came.append(n)) for signum in held}
    try:
        yield
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        if came and os.getpid() == owner:
            signal.raise_signal(came[0])


def die_with_parent(parent_pid: int) -> None:
    """In a child just forked from parent_pid: be killed (SIGKILL) when the parent ends
    (Linux; elsewhere nothing), or leave now if it already has."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes  # here: the command's start-up does without it

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # it ended before the request was made
        os._exit(1)
