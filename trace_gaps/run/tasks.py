"""The tasks of a run's analysis, run here or on a dask.distributed Client: a failed task's
error kept in its place, so the others' results are kept."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from trace_gaps.errors import TraceGapsError

T = TypeVar("T")


def run_tasks(
    function: Callable[..., T],
    arguments: Sequence[tuple[Any, ...]],
    client: Any = None,
    held: list[Any] | None = None,
) -> list[T | BaseException]:
    """function(*args) for each, here or on a dask.distributed Client; a failed task's
    exception is returned in its place, so the others' results are kept. held: where the
    tasks' results are kept for later tasks (their Dask futures: a later task given one
    runs where that result already is, and it is not sent again), one per task."""
    if client is None:
        results: list[T | BaseException] = []
        for args in arguments:
            try:
                results.append(function(*args))
            except TraceGapsError as error:
                results.append(error)
        if held is not None:
            held.extend(results)
        return results
    futures = [client.submit(function, *args, pure=False) for args in arguments]
    if held is not None:
        held.extend(futures)
    gathered: list[T | BaseException] = []
    for future in futures:
        try:
            gathered.append(future.result())
        except TraceGapsError as error:
            gathered.append(error)
    return gathered


def raised(result: T | BaseException) -> T:
    if isinstance(result, BaseException):
        raise result
    return result
