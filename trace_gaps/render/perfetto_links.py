"""What export perfetto draws across its slices: a flow from each CUDA call to the GPU op it
launched, and counter tracks of the GPU's queue depth and of its idle time by cause.

Each is read from the slices perfetto.py wrote (their pids, tids, times and args), so an arrow
or a counter says no more than the slices it joins:

    CUDA API    [cudaLaunchKernel]          correlation_id 7
                        \\  flow (s at the call's middle, f with "bp": "e" at the op's)
    GPU 0 s 7            \\-----> [gemm]    correlation_id 7

A call or an op that crosses a step's edge is written once per step it overlaps; the flow
starts on the first piece of the call and ends on the first piece of each op (pieces of one
op touch: one ends where the next begins). A graph launch has a flow to each of its ops.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

Event = dict[str, object]

FLOW_CATEGORY = "launch"
FLOW_NAME = "launch → op"
QUEUE_COUNTER = "GPU queue depth (ops launched, not started)"
IDLE_COUNTER = "GPU idle so far: {cause} (ns)"


def link_events(
    events: list[Event], *, api_category: str, op_category: str, idle_category: str
) -> list[Event]:
    """The flows and counters of the slices in events (see the module docstring)."""
    pieces: dict[tuple[int, int], tuple[list[Event], list[Event]]] = defaultdict(lambda: ([], []))
    idle_by_pid: dict[int, list[Event]] = defaultdict(list)
    for event in events:
        if event["ph"] != "X":
            continue
        category, pid = event["cat"], _int(event["pid"])
        if category == idle_category:
            idle_by_pid[pid].append(event)
        elif category in (api_category, op_category):
            args = event["args"]
            assert isinstance(args, dict)
            if "correlation_id" in args:
                calls, ops = pieces[(pid, _int(args["correlation_id"]))]
                (calls if category == api_category else ops).append(event)
    links: list[Event] = []
    launches: dict[int, list[tuple[int, int]]] = defaultdict(list)  # pid -> (queued, started)
    for (pid, _), (calls, ops) in sorted(pieces.items()):
        if not calls or not ops:
            continue
        call = min(calls, key=_start)
        for op in _first_pieces(ops):
            links += _flow(len(links) // 2 + 1, call, op)
            started = _start(op)
            launches[pid].append((min(_start(call) + _length(call), started), started))
    for pid in sorted(launches):
        links += _queue_depth(pid, launches[pid])
    for pid in sorted(idle_by_pid):
        links += _idle_so_far(pid, idle_by_pid[pid])
    return links


def _first_pieces(ops: list[Event]) -> Iterator[Event]:
    """Each op's first piece: a piece that starts where another of the id ends continues it."""
    ends = {_start(op) + _length(op) for op in ops}
    yield from sorted((op for op in ops if _start(op) not in ends), key=_start)


def _flow(flow_id: int, call: Event, op: Event) -> list[Event]:
    """A flow from the call's slice to the op's, each end inside its slice (at its middle) so
    that a viewer binds it to that slice."""
    return [
        {
            "ph": phase,
            "id": flow_id,
            "pid": end["pid"],
            "tid": end["tid"],
            "name": FLOW_NAME,
            "cat": FLOW_CATEGORY,
            "ts": to_us(_start(end) + _length(end) // 2),
            **({"bp": "e"} if phase == "f" else {}),
        }
        for phase, end in (("s", call), ("f", op))
    ]


def _queue_depth(pid: int, launches: list[tuple[int, int]]) -> list[Event]:
    """The ops launched (their call returned, or the op started, whichever is first) and not
    yet started, after each change. Only the drawn launches count: at the first drawn step's
    start, ops launched before it are not in the count."""
    changes: dict[int, int] = defaultdict(int)
    for queued, started in launches:
        changes[queued] += 1
        changes[started] -= 1
    depth, counters = 0, []
    for at in sorted(changes):
        if changes[at]:  # an op that started before its call returned changes nothing
            depth += changes[at]
            counters.append(_counter(pid, QUEUE_COUNTER, at, {"ops": depth}))
    return counters


def _idle_so_far(pid: int, idle: list[Event]) -> list[Event]:
    """The GPU idle time of each cause summed from the first drawn step on, after each idle
    run of the cause ends (a track per cause, from 0 at the first run's start: its slope is
    the rate the GPU loses time to the cause)."""
    so_far: dict[str, int] = {}
    counters = []
    for run in sorted(idle, key=_start):
        cause = str(run["name"])
        name = idle_counter(cause)
        if cause not in so_far:
            so_far[cause] = 0
            counters.append(_counter(pid, name, _start(run), {"ns": 0}))
        so_far[cause] += _length(run)
        counters.append(_counter(pid, name, _start(run) + _length(run), {"ns": so_far[cause]}))
    return counters


def idle_counter(cause: str) -> str:
    """The name of a cause's idle-so-far counter track."""
    return IDLE_COUNTER.format(cause=cause)


def _counter(pid: int, name: str, at_ns: int, values: dict[str, int]) -> Event:
    return {"ph": "C", "pid": pid, "name": name, "ts": to_us(at_ns), "args": values}


def _start(event: Event) -> int:
    return _ns(event["ts"])


def _length(event: Event) -> int:
    return _ns(event["dur"])


def _ns(us: object) -> int:
    """The writer's µs with three decimals back as exact ns."""
    assert isinstance(us, int | float)
    return round(us * 1000)


def to_us(ns: int) -> float:
    """ns as µs with three decimals: exact ns back with round(us * 1000) below 2^53 ns."""
    return round(ns / 1000, 3)


def _int(value: object) -> int:
    assert isinstance(value, int)
    return value
