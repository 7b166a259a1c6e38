"""ordered_map: results in task order, tasks taken lazily, errors raised in the caller."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from trace_gaps.parallel import default_jobs, ordered_map


def scaled_by_pid(shared: int, value: int) -> tuple[int, int]:
    """A task: the value times the shared factor, and the process that computed it."""
    return value * shared, os.getpid()


def failing(shared: int, value: int) -> int:
    if value == 3:
        raise ValueError(f"task {value} failed")
    return value + shared


def test_results_come_in_task_order_from_worker_processes() -> None:
    results = list(ordered_map(scaled_by_pid, 10, ((v,) for v in range(20)), jobs=2))
    assert [value for value, _ in results] == [v * 10 for v in range(20)]
    assert {pid for _, pid in results} - {os.getpid()}, "no task ran on a worker process"


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


@pytest.mark.parametrize(("cores", "jobs"), [(1, 1), (2, 1), (3, 3), (4, 4), (16, 4)])
def test_default_jobs_follow_the_usable_cores(
    cores: int, jobs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(cores)))
    assert default_jobs() == jobs
