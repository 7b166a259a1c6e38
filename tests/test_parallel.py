"""Work on worker processes: ordered_map keeps task order, takes tasks lazily and raises task
errors in the caller; user errors cross with their file; diff analyses its sides apart."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

import trace_gaps.diff.side_runner as side_runner
import trace_gaps.parallel as parallel
import trace_gaps.report.pricing as pricing_module
from tests.conftest import ROOT
from tests.conftest import SAMPLE_TRACES as SAMPLES
from trace_gaps.analysis.engine.pipeline import AnalysisOptions
from trace_gaps.cli import app
from trace_gaps.errors import ProcessNotFoundError, TraceGapsError
from trace_gaps.parallel import default_jobs, ordered_map
from trace_gaps.render.json import render_json
from trace_gaps.report.build import build_report
from trace_gaps.run.one import analyse_export


def scaled_by_pid(shared: int, value: int) -> tuple[int, int]:
    """A task: the value times the shared factor, and the process that computed it."""
    return value * shared, os.getpid()


def dying(shared: int, value: int) -> int:
    if value == 2:
        os._exit(9)  # a worker killed (by the kernel's OOM killer, say)
    return value


def failing(shared: int, value: int) -> int:
    if value == 3:
        raise ValueError(f"task {value} failed")
    return value + shared


def test_results_come_in_task_order_from_worker_processes() -> None:
    results = list(ordered_map(scaled_by_pid, 10, ((v,) for v in range(20)), jobs=2))
    assert [value for value, _ in results] == [v * 10 for v in range(20)]
    assert {pid for _, pid in results} - {os.getpid()}, "no task ran on a worker process"


def parent_pid(shared: int, value: int) -> int:
    return os.getppid()


def run_fresh(check: str) -> None:
    """Run check() of this module in a new Python process. Forking needs a process that
    runs no other thread, and earlier tests leave one in this one (Dask's offload thread)."""
    if parallel.usable_cores() < 2:
        pytest.skip("forked() runs in the calling process on one core")
    result = subprocess.run(
        [sys.executable, "-c", f"import tests.test_parallel as t; t.{check}()"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr


@contextmanager
def another_thread_running() -> Iterator[None]:
    """A second thread waits in this process while the block runs."""
    release = threading.Event()
    waiting = threading.Thread(target=release.wait)
    waiting.start()
    try:
        yield
    finally:
        release.set()
        waiting.join()


def test_one_job_runs_in_this_process() -> None:
    results = list(ordered_map(scaled_by_pid, 3, [(1,), (2,)], jobs=1))
    assert results == [(3, os.getpid()), (6, os.getpid())]


def test_tasks_are_taken_at_most_jobs_plus_one_ahead() -> None:
    taken: list[int] = []

    def tasks() -> Iterator[tuple[int]]:
        for value in range(10):
            taken.append(value)
            yield (value,)

    results = ordered_map(scaled_by_pid, 1, tasks(), jobs=2)
    first = next(results)
    assert first[0] == 0
    assert len(taken) <= 3  # the first result is out once the third task is in flight
    assert [value for value, _ in [first, *results]] == list(range(10))


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_task_error_is_raised_in_the_caller(jobs: int) -> None:
    with pytest.raises(ValueError, match="task 3 failed"):
        list(ordered_map(failing, 1, ((v,) for v in range(6)), jobs=jobs))


def test_a_killed_worker_is_a_one_line_error_that_says_what_to_do() -> None:
    with pytest.raises(TraceGapsError, match="run again with --jobs 1"):
        list(ordered_map(dying, 0, ((v,) for v in range(6)), jobs=2))


@pytest.mark.parametrize(("cores", "jobs"), [(1, 1), (2, 1), (3, 3), (4, 4), (16, 4)])
def test_default_jobs_follow_the_usable_cores(
    cores: int, jobs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(cores)))
    assert default_jobs() == jobs


def test_a_user_error_crosses_processes_with_its_file() -> None:
    error = ProcessNotFoundError("has no process 1", path=Path("run.sqlite"))
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is ProcessNotFoundError
    assert str(copy) == "run.sqlite: has no process 1"


def test_diff_sides_in_two_processes_give_the_same_diff(monkeypatch: pytest.MonkeyPatch) -> None:
    before, after = SAMPLES / "spec_eager.sqlite", SAMPLES / "spec_graph_node.sqlite"
    args = ["diff", str(before), str(after), "-f", "json"]
    monkeypatch.setattr(side_runner, "DIFF_SIDES_APART_BYTES", 10**12)
    apart_jobs: list[int] = []
    one_by_one = CliRunner().invoke(app, args)
    monkeypatch.setattr(side_runner, "DIFF_SIDES_APART_BYTES", 0)
    monkeypatch.setattr(parallel, "default_jobs", lambda: 1)
    diff_jobs = side_runner.diff_jobs
    monkeypatch.setattr(
        side_runner, "diff_jobs", lambda sides: apart_jobs.append(diff_jobs(sides)) or 2
    )
    apart = CliRunner().invoke(app, args)
    assert one_by_one.exit_code == 0, one_by_one.output
    assert apart.exit_code == 0, apart.output
    assert apart_jobs == [2]
    assert apart.stdout == one_by_one.stdout


def check_diff_sides_apart_fork_once_and_draw_as_one_process() -> None:
    # Big exports on few cores: the after side in a child forked from diff's process, the
    # before side in it, the bootstrap's generator handed on between them (side_draws.py).
    from trace_gaps.analysis.engine.pipeline import AnalysisOptions
    from trace_gaps.diff.build import ComparedSide, diff_sides
    from trace_gaps.diff.runs import analyse_run
    from trace_gaps.render.diff import render_diff_json

    before, after = SAMPLES / "spec_eager.sqlite", SAMPLES / "spec_sync.sqlite"
    forks: list[int] = []
    real_fork = os.fork

    def counted_fork() -> int:
        forks.append(1)
        return real_fork()

    side_runner.DIFF_SIDES_APART_BYTES = 0
    parallel.default_jobs = lambda: 1
    os.fork = counted_fork
    result = CliRunner().invoke(app, ["diff", str(before), str(after), "-f", "json", "-q"])
    assert result.exit_code == 0, result.output
    assert forks == [1]
    # In this process, each side with its speed figures (the machine's drift is split too).
    sides = [analyse_run(path, AnalysisOptions(), keep_models=True) for path in (before, after)]
    at_once = diff_sides(*(ComparedSide(report, speeds=speeds) for report, speeds in sides))
    assert result.stdout == render_diff_json(at_once)


def test_diff_sides_apart_fork_once_and_draw_as_one_process() -> None:
    run_fresh("check_diff_sides_apart_fork_once_and_draw_as_one_process")


def test_a_ctrl_c_during_an_analysis_ends_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import trace_gaps.run.one as run

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(run, "analyse_export", interrupted)
    result = CliRunner().invoke(app, ["analyze", "--demo", "-q"])
    assert result.exit_code == 130
    assert result.output.strip() == "error: interrupted"


def test_workers_leave_a_ctrl_c_to_the_main_process() -> None:
    import signal

    before = signal.getsignal(signal.SIGINT)
    try:
        parallel._keep("shared")
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert parallel._run(lambda shared, x: (shared, x), (1,))[0] == ("shared", 1)
    finally:
        signal.signal(signal.SIGINT, before)
        parallel._SHARED.clear()


def pid_and(value: int) -> tuple[int, int]:
    return os.getpid(), value


def raising(message: str) -> None:
    raise ValueError(message)


def check_forked_brings_back_a_result_or_an_error() -> None:
    pid, value = parallel.forked(pid_and, 7)()
    assert value == 7 and pid != os.getpid()
    with pytest.raises(ValueError, match="the child failed"):
        parallel.forked(raising, "the child failed")()


def test_forked_runs_in_a_child_and_brings_back_its_result_or_error() -> None:
    run_fresh("check_forked_brings_back_a_result_or_an_error")


def test_forked_runs_in_this_process_while_another_thread_runs() -> None:
    with another_thread_running():
        pending = parallel.forked(pid_and, 3)
    assert pending() == (os.getpid(), 3)


def check_a_killed_forked_child_is_an_error() -> None:
    with pytest.raises(TraceGapsError, match="ended without its result"):
        parallel.forked(dying, 0, 2)()


def test_a_killed_forked_child_is_a_one_line_error() -> None:
    run_fresh("check_a_killed_forked_child_is_an_error")


def sleeping(shared: float, value: int) -> int:
    import time

    time.sleep(shared)
    return value


def test_the_pool_measures_where_its_time_went() -> None:
    """Making the tasks is this process's time, their work the workers': both are measured,
    so that a pool that cost more than it saved can say so (PoolTime.note)."""
    import time

    def made_slowly() -> Iterator[tuple[int]]:
        for value in range(4):
            time.sleep(0.05)
            yield (value,)

    timing = parallel.PoolTime()
    assert list(ordered_map(sleeping, 0.1, made_slowly(), jobs=2, timing=timing)) == [0, 1, 2, 3]
    assert timing.jobs == 2
    assert timing.making_s >= 0.2
    assert timing.working_s >= 0.4
    assert timing.wall_s >= timing.making_s


def test_a_pool_slower_than_one_process_says_so_with_its_figures() -> None:
    paid = parallel.PoolTime(jobs=8, making_s=20.0, working_s=12.0, wall_s=25.0)
    lost = parallel.PoolTime(jobs=8, making_s=20.0, working_s=12.0, wall_s=39.9)
    assert not paid.slower_than_one_process()
    assert lost.slower_than_one_process()
    assert not parallel.PoolTime(jobs=1, wall_s=99.0).slower_than_one_process()
    note = lost.note("the 12 windows")
    assert "--jobs 8 took 39.9 s for the 12 windows" in note
    assert "about 32.0 s" in note and "--jobs 1 is faster" in note


def test_analyze_prints_the_pool_note_once_when_workers_lost_time(monkeypatch) -> None:
    monkeypatch.setattr(parallel.PoolTime, "slower_than_one_process", lambda self: True)
    monkeypatch.setattr(parallel.PoolTime, "note", lambda self, what: f"note: pool {what}")
    result = CliRunner().invoke(app, ["analyze", "-f", "json", str(SAMPLES / "spec_sync.sqlite")])
    assert result.exit_code == 0
    assert result.stderr.count("note: pool the ") == 1
    quiet = CliRunner().invoke(app, ["analyze", "-q", str(SAMPLES / "spec_sync.sqlite")])
    assert "note: pool" not in quiet.stderr


def square_and_pid(value: int) -> tuple[int, int]:
    return value * value, os.getpid()


def test_forked_map_gives_results_in_order_from_children(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "usable_cores", lambda: 4)
    found = parallel.forked_map(square_and_pid, list(range(11)))
    assert found is not None
    assert [value for value, _ in found] == [v * v for v in range(11)]
    assert {pid for _, pid in found} - {os.getpid()}, "nothing ran in a child"
    assert os.getpid() not in {pid for _, pid in found}


@pytest.mark.parametrize("cores", [1, 2])
def test_forked_map_leaves_the_work_to_the_caller_on_two_cores(
    cores: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parallel, "usable_cores", lambda: cores)
    assert parallel.forked_map(square_and_pid, [1, 2, 3]) is None


def test_a_report_priced_on_children_is_the_report_priced_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = SAMPLES / "spec_sync.sqlite"
    trace, analysis = analyse_export(path, AnalysisOptions(), jobs=1)
    here = render_json(build_report(trace, analysis))
    children: list[int] = []
    forked_map = parallel.forked_map

    def counted(function: object, items: list[object]) -> object:
        found = forked_map(function, items)  # type: ignore[arg-type]
        children.append(found is not None)
        return found

    monkeypatch.setattr(parallel, "usable_cores", lambda: 4)
    monkeypatch.setattr(pricing_module, "forked_map", counted)
    assert render_json(build_report(trace, analysis)) == here
    assert children and all(children), "the levers were not priced on children"


def test_diff_sides_run_at_once_where_the_cores_hold_both_sides_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sides = [[SAMPLES / "spec_eager.sqlite"], [SAMPLES / "spec_sync.sqlite"]]
    monkeypatch.setattr(side_runner, "DIFF_SIDES_APART_BYTES", 0)
    found = {}
    for cores in (2, 3, 8, 9, 16):
        monkeypatch.setattr(parallel, "usable_cores", lambda c=cores: c)
        found[cores] = side_runner.diff_jobs(sides)
    # 2 cores: no workers, sides apart; 3 to 9: workers, too few cores for both sides' (4
    # workers and a main process each from 4 cores on); 16: room for both.
    assert found == {2: 2, 3: 1, 8: 1, 9: 1, 16: 2}


def test_spans_that_are_slower_than_one_process_say_so_with_the_windows_read_twice() -> None:
    # 30 s of spans' work of which 8 windows of 40 were read twice: one process, ~25 s.
    spans = parallel.PoolTime(jobs=8, working_s=30.0, wall_s=26.0, own_share=40 / 48)
    spans.extra = "8 windows read twice (each span's first and last)"
    assert spans.slower_than_one_process()
    line = spans.note("the 40 windows")
    assert "about 25.0 s" in line and "8 windows read twice" in line
    assert not parallel.PoolTime(
        jobs=8, working_s=30.0, wall_s=24.0, own_share=40 / 48
    ).slower_than_one_process()
