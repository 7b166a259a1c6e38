"""How a command stops when told to: SIGTERM and SIGHUP as Ctrl-C, children with their parent.

Python ends a process at once on SIGTERM (a `kill`, a job scheduler, a closed terminal's
SIGHUP): no `finally` runs, so a temporary file of an output (output.py), a bundle's staging
folder (bundle.py) and nsys's partial export (nsys/convert.py) would stay behind. Raising
SystemExit instead lets every clean-up on the way out run, as a Ctrl-C's KeyboardInterrupt
does. A child forked to draw or analyse (parallel.forked) is killed when its parent ends,
however it ends (even SIGKILL, where no clean-up can run).

The SystemExit can land anywhere, inside a queue's or the import system's code too, and
leave a lock held that a thread (a read-ahead's) then waits on forever: the clean-up does not
wait on threads once stopping() (they are daemons, and end with the process), and a last
resort ends the process STOP_GRACE_S after the signal, with the same exit code, when the
clean-up has not: it first removes what was registered with last_resort (temporary files,
a staging folder, nsys's process group).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

STOPPING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1  # linux/prctl.h

# Seconds the clean-up after a stopping signal may take before the process ends regardless.
STOP_GRACE_S = 5.0
_STOPPED_BY: list[tuple[int, int]] = []  # (pid, signal) of the stopping signal being acted on
# What the last resort removes or stops, by key: (pid that registered it, the undo).
_LEFTOVERS: dict[object, tuple[int, Callable[[], object]]] = {}


def stop_cleanly_on_signals() -> None:
    """From now on, SIGTERM and SIGHUP raise SystemExit(128 + signal) in the main thread.
    A stopped process ends once the exit functions registered after this call have run
    (end_if_stopping, registered here: they run in reverse order): past them Python resets
    its signal handlers before it frees its objects, and the last resort's SIGALRM would
    then kill the process, exit −14, where freeing a large analysis outlasts STOP_GRACE_S."""
    for signum in STOPPING_SIGNALS:
        if signal.getsignal(signum) is signal.SIG_DFL:  # not when the caller ignores them
            signal.signal(signum, _exit_stopped)
    atexit.unregister(end_if_stopping)
    atexit.register(end_if_stopping)


def _exit_stopped(signum: int, frame: object) -> None:
    # A second signal while cleaning up ends the process at once, as Python's default does.
    for stopping in STOPPING_SIGNALS:
        signal.signal(stopping, signal.SIG_DFL)
    _STOPPED_BY[:] = [(os.getpid(), signum)]
    # An object freed on the way out may fail to close what the stop already closed (an ADBC
    # cursor after its connection: "Exception ignored in ... Traceback"): not the user's news.
    sys.unraisablehook = _ignore_while_stopping
    # The last resort is a timer, not a thread: a thread started here could wait on the lock
    # the signal interrupted, and one started before would make every fork unsafe.
    if hasattr(signal, "setitimer"):
        signal.signal(signal.SIGALRM, _exit_now)
        signal.setitimer(signal.ITIMER_REAL, STOP_GRACE_S)
    raise SystemExit(128 + signum)


def _ignore_while_stopping(unraisable: object) -> None:
    """Drop an exception a destructor raised while this process stops on a signal."""
    if not stopping():
        sys.__unraisablehook__(unraisable)  # type: ignore[arg-type]


def _exit_now(alarm: int, frame: object) -> None:
    """The clean-up did not end the process in time: end it now (_end_stopped). Python runs
    this in the main thread even where it waits on a lock or joins a thread (both wake for a
    signal's handler)."""
    _end_stopped()


def _end_stopped() -> None:
    """Undo what was registered with last_resort, and end the process with the stopping
    signal's exit code."""
    _, signum = _STOPPED_BY[0]
    for owner, undo in reversed(list(_LEFTOVERS.values())):
        if owner == os.getpid():
            with contextlib.suppress(OSError):
                undo()
    os._exit(128 + signum)


def end_if_stopping() -> None:
    """When a stopping signal is ending this process, end it now, its streams flushed, with
    the signal's exit code: for a caller whose clean-up is done, but whose exit would wait on
    a thread that is no daemon (the MCP SDK's, reading stdin from a client that keeps it
    open)."""
    if not stopping():
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    _end_stopped()


def stopping() -> bool:
    """Is a stopping signal ending this process? Its clean-up then waits on no thread."""
    return bool(_STOPPED_BY) and _STOPPED_BY[0][0] == os.getpid()


@contextlib.contextmanager
def last_resort(undo: Callable[[], object]) -> Iterator[None]:
    """While inside, a stop whose clean-up has not ended the process STOP_GRACE_S after the
    signal calls undo() before it ends the process (an OSError it raises is ignored). undo
    runs in a signal handler, where a lock may be held: it makes system calls only (unlink,
    rmtree, kill), imports nothing, takes no lock."""
    key = object()
    _LEFTOVERS[key] = (os.getpid(), undo)
    try:
        yield
    finally:
        _LEFTOVERS.pop(key, None)


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


def dying_with_parent() -> Callable[[], None] | None:
    """A preexec_fn for a child process (nsys, a command of the MCP server): it is sent
    SIGKILL when this process dies (Linux), so that one killed outright (SIGKILL, the OOM
    killer), which runs no clean-up, leaves no child working on behind it. None where prctl
    is unknown. prctl is looked up here, not in the child between fork and exec."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def die_with_this_process() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # it died before the request was made: no signal comes
            os._exit(1)

    return die_with_this_process
