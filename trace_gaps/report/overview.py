"""`trace-gaps info`: what an export holds, so a user can pick --step and --process."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from trace_gaps.analysis.kinds import kind_label, kind_table, ordered_kinds
from trace_gaps.analysis.ranges import (
    DEPTH,
    PARENT,
    RAW_NAME,
    build_range_tree,
    is_library_domain,
)
from trace_gaps.analysis.step_choice import choose_step_range
from trace_gaps.analysis.steps import (
    IS_WARMUP,
    STEP_KIND,
    cut_steps,
    empty_steps,
    mark_warmup,
)
from trace_gaps.model import DOMAIN, END_NS, GLOBAL_TID, NAME, PID, START_NS, Trace
from trace_gaps.privacy import shareable_settings
from trace_gaps.report.step_reasons import describe_step_choice

# Lines of a list the text shows before "… N more" (JSON has every item).
TEXT_SETTINGS = 40


@dataclass(frozen=True, slots=True)
class RangeName:
    """One NVTX range name: how often, how deep, inside what."""

    name: str
    count: int
    total_ns: int
    min_depth: int
    parents: list[str]
    names: int = 1  # distinct names in the family (families.py)


@dataclass(frozen=True, slots=True)
class DomainInfo:
    """One NVTX domain: its ranges, and whether they can be steps and stages (a library's
    domain, CCCL or NCCL, never is; --domain NAME picks one)."""

    name: str  # "default" for the default domain
    ranges: int
    library: bool


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    """One thread with its name and how much it did."""

    pid: int
    tid: int
    name: str
    api_calls: int
    nvtx_ranges: int


@dataclass(frozen=True, slots=True)
class ProcessSteps:
    """What `analyze` would do with one process: its steps, warm-up skipped, and its GPUs."""

    pid: int
    steps: int
    analysed: int
    skipped: int  # warm-up, by the default rule (as `analyze` without --skip)
    gpus: list[int]  # device ids it ran kernels, copies or memsets on
    kinds: dict[str, int] = field(default_factory=dict)  # analysed steps per kind, if several


@dataclass(frozen=True, slots=True)
class Overview:
    """The export at a glance."""

    file: str
    size_bytes: int
    nsys_version: str | None
    schema_version: str | None
    graph_trace_mode: str
    capture_settings: list[tuple[str, str]]
    gpus: list[str]
    processes: dict[str, str]
    threads: list[ThreadInfo]
    row_counts: dict[str, int]
    ranges: list[RangeName]
    range_names: int  # how many distinct names; `ranges` holds the most frequent
    step_range: str | None  # the range `analyze` would take as the step (None: whole process)
    step_reason: str
    process_steps: list[ProcessSteps]
    domains: list[DomainInfo] = field(default_factory=list)


def _kinds(steps: pd.DataFrame, pid: int) -> dict[str, int]:
    """Analysed steps per kind of a process, where its steps come in several kinds."""
    if steps.empty:
        return {}
    table = kind_table(steps[steps[PID] == pid])
    kinds = ordered_kinds(table)
    if len(kinds) < 2:
        return {}
    counts = table.groupby(STEP_KIND)["steps"].sum()
    return {kind_label(k): int(counts[k]) for k in kinds}


def build_overview(
    trace: Trace,
    row_counts: dict[str, int],
    *,
    calls_per_thread: pd.Series,
    active_pids: list[int],
    module_loads: Callable[[int], pd.DataFrame] | None = None,
    devices: dict[int, list[int]] | None = None,
    max_ranges: int = 40,
    include_command: bool = False,
) -> Overview:
    """Summarise an export's metadata, threads, row counts and NVTX range names, and what
    `analyze` would pick: the step range, and per process its steps analysed and skipped.

    trace needs only its small tables (ranges, threads, processes); calls_per_thread
    (timed CUDA API calls per globalTid) and active_pids (processes with timed ops or
    calls) come from SQL, so that the op and call tables are never held in memory;
    module_loads(until_ns) gives the module loads the warm-up rule reads (none: no loads);
    devices, the GPUs of each pid.
    """
    tree = build_range_tree(trace.nvtx_ranges)
    selection = choose_step_range(tree, step_name=None)
    steps = _analysed_steps(trace, tree, cut_steps(tree, selection), module_loads)
    ranges, range_names = _range_names(tree, max_ranges)
    threads = _threads(trace, calls_per_thread)
    info = trace.info
    return Overview(
        file=info.path.name,
        size_bytes=info.size_bytes,
        nsys_version=info.nsys_version,
        schema_version=info.schema_version,
        graph_trace_mode=info.graph_trace_mode.value,
        capture_settings=shareable_settings(info.capture_settings, include_command=include_command),
        gpus=[f"{gpu.device_id}: {gpu.name}" for gpu in info.gpus],
        processes={
            str(pid): name
            for pid, name in sorted(trace.processes.items())
            if pid in set(active_pids)
        },
        threads=threads,
        row_counts=row_counts,
        ranges=ranges,
        range_names=range_names,
        step_range=selection.name,
        step_reason=describe_step_choice(selection.reason, selection.name),
        process_steps=_process_steps(steps, active_pids, devices or {}),
        domains=nvtx_domains(trace.nvtx_ranges),
    )


def _analysed_steps(
    trace: Trace,
    tree: pd.DataFrame,
    steps: pd.DataFrame,
    module_loads: Callable[[int], pd.DataFrame] | None,
) -> pd.DataFrame:
    """The steps with their warm-up marked by the default rule (as `analyze` without --skip)."""
    if steps.empty:
        return steps
    until = int(steps[END_NS].max())
    loads = module_loads(until) if module_loads is not None else None
    empty = empty_steps(tree, steps)
    if loads is None:
        return mark_warmup(steps, trace.api_calls.iloc[:0], skip=None, empty=empty)
    return mark_warmup(steps, loads, skip=None, known_until_ns=until, empty=empty)


def _process_steps(
    steps: pd.DataFrame, active_pids: list[int], devices: dict[int, list[int]]
) -> list[ProcessSteps]:
    """Per process with work, steps or GPUs: its steps analysed and skipped, and its GPUs."""
    step_pids = set(steps[PID].tolist()) if not steps.empty else set()
    return [
        ProcessSteps(
            pid=pid,
            steps=int((steps[PID] == pid).sum()) if pid in step_pids else 0,
            analysed=int(((steps[PID] == pid) & ~steps[IS_WARMUP]).sum())
            if pid in step_pids
            else 0,
            skipped=int(((steps[PID] == pid) & steps[IS_WARMUP]).sum()) if pid in step_pids else 0,
            gpus=devices.get(pid, []),
            kinds=_kinds(steps, pid),
        )
        for pid in sorted(set(active_pids) | step_pids | set(devices))
    ]


def _range_names(tree: pd.DataFrame, max_ranges: int) -> tuple[list[RangeName], int]:
    """The max_ranges most frequent NVTX range names, and how many distinct names there are."""
    parent_names = tree[NAME].to_numpy()[tree[PARENT].clip(lower=0).to_numpy()]
    tree = tree.assign(parent_name=pd.Series(parent_names).where(tree[PARENT].to_numpy() >= 0, ""))
    grouped = tree.assign(duration=tree[END_NS] - tree[START_NS]).groupby(NAME)
    stats = grouped.agg(
        count=(START_NS, "size"),
        total_ns=("duration", "sum"),
        min_depth=(DEPTH, "min"),
        names=(RAW_NAME, "nunique"),
    )
    range_names = len(stats)
    stats = stats.sort_values(["count", "total_ns"], ascending=False).head(max_ranges)
    ranges = [
        RangeName(
            name=str(name),
            count=int(row["count"]),
            total_ns=int(row["total_ns"]),
            min_depth=int(row["min_depth"]),
            parents=sorted({p for p in grouped.get_group(name)["parent_name"] if p})[:3],
            names=int(row["names"]),
        )
        for name, row in stats.iterrows()
    ]
    return ranges, range_names


def _threads(trace: Trace, calls_per_thread: pd.Series) -> list[ThreadInfo]:
    """The threads that made CUDA calls or NVTX ranges, with their names and counts."""
    calls = calls_per_thread
    nvtx = trace.nvtx_ranges.groupby(GLOBAL_TID).size()
    active = sorted(set(calls.index) | set(nvtx.index))
    names = (
        trace.threads.set_index(GLOBAL_TID)[NAME]
        if not trace.threads.empty
        else pd.Series(dtype=object)
    )
    return [
        ThreadInfo(
            pid=(int(t) >> 24) & 0xFFFFFF,
            tid=int(t) & 0xFFFFFF,
            name=str(names.get(t, "")),
            api_calls=int(calls.get(t, 0)),
            nvtx_ranges=int(nvtx.get(t, 0)),
        )
        for t in active
    ]


def nvtx_domains(nvtx_ranges: pd.DataFrame) -> list[DomainInfo]:
    """The NVTX domains of the export's ranges, most ranges first, as --domain names them."""
    counts = nvtx_ranges.groupby(DOMAIN).size().sort_values(ascending=False, kind="stable")
    return [
        DomainInfo(
            name=str(name) or "default",
            ranges=int(count),
            library=bool(name) and is_library_domain(str(name)),
        )
        for name, count in counts.items()
    ]
