"""Tasks on worker processes, results in order: the windows of one export, on every core.

The main process reads an export window by window (analysis/engine/windows.py); the work on each
window's rows can run on other processes meanwhile. ordered_map hands each task to a pool of
worker processes as the caller's iterator produces it, keeps at most `jobs + 1` in flight
(each holds a window's rows, so memory stays bounded), and yields the results in the order
the tasks came in, so that merging them gives the same result as one process would.

Every task gets the same first argument, `shared` (what every window reads: the steps, the
stage map, ...): it is sent to each worker once, not with every task.

Workers are forked from the calling process where no other thread runs there (they start
at once, every import made: the spans' workers, analysis/engine/spans.analyse_in_spans), else
from a fork server (multiprocessing's "forkserver" start method) that has imported the
task's module once: a process that runs read-ahead threads is never forked itself. With
jobs=1, or where processes cannot be started, the tasks run in the calling process, in the
same order. One task of its own (diff's after side, report's pictures) a caller runs in a
child forked from itself, when it runs no other thread (forked).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, BinaryIO, Generic, TypeVar, cast

from trace_gaps.allocator import keep_freed_memory, python_string_storage
from trace_gaps.errors import TraceGapsError
from trace_gaps.interrupts import die_with_parent, signals_held

R = TypeVar("R")

MAX_DEFAULT_JOBS = 4  # beyond it, each worker's memory buys less and less time
_SHARED: list[Any] = []  # in a worker: the pool's shared argument, set once when it starts


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def fork_is_safe() -> bool:
    """This platform forks, and this process runs no other thread: forking copies only the
    calling thread, and another one could hold a lock the child then waits on forever."""
    return hasattr(os, "fork") and threading.active_count() == 1


class Forked(Generic[R]):
    """A task run by forked(): call it for the result, or stop() it (on the way out of an
    error or an interrupt) so that no child goes on working for a command that has ended."""

    def __init__(self, function: Callable[..., R], args: tuple[Any, ...]) -> None:
        self._task: tuple[Callable[..., R], tuple[Any, ...]] | None = (function, args)
        self._child: tuple[int, BinaryIO] | None = None  # its pid, and its result's pipe
        if not fork_is_safe() or usable_cores() < 2:
            return  # run when its result is asked for
        read_end, write_end = os.pipe()
        parent = os.getpid()
        # Held: a signal landing in os.fork's own after-fork hooks is printed and dropped.
        with signals_held():
            pid = os.fork()
        if pid == 0:  # the child: run, send the outcome, leave without the parent's clean-up
            status = 1
            try:
                os.close(read_end)
                die_with_parent(parent)
                try:
                    outcome: tuple[bool, object] = (True, function(*args))
                except BaseException as error:  # noqa: BLE001 - raised again in the parent
                    outcome = (False, error)
                with os.fdopen(write_end, "wb") as pipe:
                    pipe.write(pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL))
                status = 0
            finally:
                os._exit(status)
        os.close(write_end)
        self._child = (pid, os.fdopen(read_end, "rb"))

    def __call__(self) -> R:
        if self._child is None:
            assert self._task is not None, "a Forked's result is taken once"
            function, args = self._task
            self._task = None
            return function(*args)
        pid, pipe = self._child
        with pipe:
            data = pipe.read()  # an interrupt here leaves the child to stop()
        self._child = None
        os.waitpid(pid, 0)
        if not data:
            raise TraceGapsError(
                "a helper process ended without its result (killed, or out of memory)"
            )
        done, value = pickle.loads(data)
        if not done:
            raise value
        return cast(R, value)

    def stop(self) -> None:
        """Kill the child, if one still runs, and reap it; the task is not run."""
        self._task = None
        if self._child is None:
            return
        pid, pipe = self._child
        self._child = None
        pipe.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def forked(function: Callable[..., R], *args: Any) -> Callable[[], R]:
    """Start function(*args) in a child process forked from this one, now; call what this
    returns for its result (an exception it raised is raised there). The child shares this
    process's memory as it was (nothing is sent to it) and sends back only its result; it
    is killed when this process ends (interrupts.die_with_parent). Forked(function, args)
    is the same, and can be stopped before its result is taken.

    Only where that can pay and is safe: two cores or more, and fork_is_safe(). Elsewhere
    function(*args) runs when its result is asked for.
    """
    return Forked(function, args)


def threaded_map(function: Callable[..., R], tasks: list[tuple[Any, ...]]) -> list[R]:
    """[function(*task) for task in tasks], each task on a thread of its own (the last on
    this one), for work that releases the GIL (SQLite scans, each on its own connection).
    The first task's error, in task order, is raised here once every thread has ended; an
    interrupt of this thread's task (a signal's SystemExit, a Ctrl-C) at once."""
    found: list[tuple[bool, Any]] = [(False, None)] * len(tasks)

    def run(at: int) -> None:
        try:
            found[at] = (True, function(*tasks[at]))
        except BaseException as error:  # noqa: BLE001 - raised below, in the caller
            found[at] = (False, error)

    threads = [
        threading.Thread(target=run, args=(at,), daemon=True) for at in range(len(tasks) - 1)
    ]
    for thread in threads:
        thread.start()
    if tasks:
        run(len(tasks) - 1)
        done, value = found[-1]
        if not done and not isinstance(value, Exception):
            # A signal's SystemExit, a Ctrl-C: not waiting on the daemons (one may wait on a
            # lock the signal left held), which end with the process.
            raise value
    for thread in threads:
        thread.join()
    for done, value in found:
        if not done:
            raise value
    return [value for _, value in found]


MAX_FORKED_MAP = 8  # children of forked_map at most


def forked_map(function: Callable[[Any], R], items: list[Any]) -> list[R] | None:
    """[function(item) for item in items], the items shared among up to MAX_FORKED_MAP
    children forked from this process at once (each sends back only its results); None
    where that cannot pay or is not safe (fewer than three cores, another thread running,
    fewer than two items): the caller then computes as it needs, itself."""
    cores = usable_cores()
    if len(items) < 2 or cores <= 2 or not fork_is_safe():
        return None
    count = min(cores, MAX_FORKED_MAP, len(items))
    shares = [items[at::count] for at in range(count)]
    children = [Forked(_each, (function, share)) for share in shares]
    try:
        results = [child() for child in children]
    finally:
        for child in children:
            child.stop()
    merged: list[R] = [None] * len(items)  # type: ignore[list-item]
    for at, share in enumerate(results):
        merged[at::count] = share
    return merged


def _each(function: Callable[[Any], R], items: list[Any]) -> list[R]:
    return [function(item) for item in items]


def default_jobs() -> int:
    """How many worker processes analyse an export's windows unless told: none (1) on a
    machine of one or two cores, else one per core up to MAX_DEFAULT_JOBS.

    Measured on a 1.1 M-kernel export (docs/performance.md): with 2 cores, two workers
    gained 6-7 % for twice the memory (the workers' own interpreters and the windows in
    flight); with 4 or 16 cores, four workers took 43-47 % off the wall time, eight 49 %.
    """
    cores = usable_cores()
    return 1 if cores <= 2 else min(cores, MAX_DEFAULT_JOBS)


@dataclass
class PoolTime:
    """Where the time of a pool of workers went (ordered_map), measured as it ran: whether the
    workers paid. One process would have taken about making + working seconds, or, where
    each task also did work one process would not (spans read a window before and after
    their own), about making + working * own_share."""

    jobs: int = 1
    making_s: float = 0.0  # this process making the tasks (reading and joining the rows)
    working_s: float = 0.0  # the tasks' own work on the workers, summed
    wall_s: float = 0.0  # from the pool's start to the last result
    own_share: float = 1.0  # of working_s, the part one process would do too
    extra: str = ""  # what the rest of working_s was, in words

    def alone_s(self) -> float:
        return self.making_s + self.working_s * self.own_share

    def slower_than_one_process(self) -> bool:
        return self.jobs > 1 and self.wall_s > self.alone_s()

    def note(self, what: str) -> str:
        """One line for the user: what the workers cost and why."""
        if self.extra:
            return (
                f"note: --jobs {self.jobs} took {self.wall_s:.1f} s for {what}, where one "
                f"process would take about {self.alone_s():.1f} s: the workers' summed "
                f"{self.working_s:.1f} s hold {self.extra}, and the cores shared it out no "
                f"faster: --jobs 1 is faster on this export"
            )
        return (
            f"note: --jobs {self.jobs} took {self.wall_s:.1f} s for {what}, where one process "
            f"would take about {self.alone_s():.1f} s ({self.making_s:.1f} s reading and joining the "
            f"rows, which the main process does, plus {self.working_s:.1f} s of the windows' "
            f"own work, which the workers share; handing the windows over cost the rest): "
            f"--jobs 1 is faster on this export"
        )


def ordered_map(
    function: Callable[..., R],
    shared: Any,
    tasks: Iterable[tuple[Any, ...]],
    *,
    jobs: int,
    timing: PoolTime | None = None,
) -> Iterator[R]:
    """function(shared, *task) for each task, in order, on up to `jobs` worker processes.

    function must be a module-level function (workers import it by name). The tasks
    iterator is advanced only as results are taken, at most jobs + 1 tasks ahead. timing,
    if given, is filled in as the pool runs (left as it is when no pool runs).
    """
    started = time.perf_counter()
    pool = _start_pool(function, shared, jobs) if jobs > 1 else None
    if pool is None:
        for task in tasks:
            result = function(shared, *task)
            del task  # let the task's rows go before the iterator makes the next
            yield result
        return
    timing = PoolTime() if timing is None else timing
    timing.jobs = jobs
    pending: deque[Future[tuple[R, float]]] = deque()

    def taken() -> R:
        result, seconds = pending.popleft().result()
        timing.working_s += seconds
        timing.wall_s = time.perf_counter() - started
        return result

    try:
        for task in _timed(tasks, timing):
            pending.append(pool.submit(_run, function, task))
            while len(pending) > jobs:
                yield taken()
        while pending:
            yield taken()
    except BrokenProcessPool as error:
        raise TraceGapsError(
            f"a worker process ended without its result (killed, or out of memory with "
            f"{jobs} workers); run again with --jobs 1 to analyse in one process"
        ) from error
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _timed(tasks: Iterable[tuple[Any, ...]], timing: PoolTime) -> Iterator[tuple[Any, ...]]:
    """The tasks, the time spent making each added to timing.making_s."""
    made = iter(tasks)
    while True:
        started = time.perf_counter()
        try:
            task = next(made)
        except StopIteration:
            return
        finally:
            timing.making_s += time.perf_counter() - started
        yield task


def can_start_pool() -> bool:
    """Whether this process may start worker processes (a daemonic one, a Dask worker's,
    may not): where it cannot, ordered_map runs every task here."""
    return not multiprocessing.current_process().daemon


def _start_pool(function: Callable[..., Any], shared: Any, jobs: int) -> ProcessPoolExecutor | None:
    """Workers forked from this process itself where that is safe (no other thread runs: they
    start at once, with every import made), else from a fork server that imports function's
    module first; None where neither can start (the tasks then run here)."""
    if not can_start_pool():
        return None
    try:
        if fork_is_safe():
            return ProcessPoolExecutor(
                max_workers=jobs,
                mp_context=multiprocessing.get_context("fork"),
                initializer=_keep,
                initargs=(shared,),
            )
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([function.__module__])
        return ProcessPoolExecutor(
            max_workers=jobs, mp_context=context, initializer=_keep, initargs=(shared,)
        )
    except (OSError, ValueError, AssertionError):
        # No fork server here (a platform without it, a locked-down sandbox): run in
        # this process instead.
        return None


def _keep(shared: Any) -> None:
    # A Ctrl-C reaches the whole process group: the main process stops the pool (a worker
    # finishes its window), and no worker prints a traceback of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    keep_freed_memory()
    python_string_storage()
    _SHARED[:] = [shared]


def _run(function: Callable[..., R], task: tuple[Any, ...]) -> tuple[R, float]:
    started = time.perf_counter()
    result = function(_SHARED[0], *task)
    return result, time.perf_counter() - started
