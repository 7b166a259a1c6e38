"""Which steps a timeline picture shows: the request, the steps it picks, and the step where a
finding is largest (a finding picture's step is known only once the ledger is)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import pandas as pd

from trace_gaps.analysis.ledger import BUCKET, CAUSE, DURATION_NS
from trace_gaps.analysis.step_range import parse_step_range
from trace_gaps.analysis.steps import IS_WARMUP, STEP_ID, STEP_INDEX
from trace_gaps.errors import TraceGapsError, UsageError
from trace_gaps.model import END_NS, GLOBAL_TID, PID, START_NS
from trace_gaps.vocabulary import WAIT_CAUSE, Bucket, IdleCause, VerdictKind


class StepPick(StrEnum):
    """How the steps to draw are chosen."""

    MEDIAN = "median"  # the analysed step whose wall time is nearest the median
    WORST = "worst"  # the longest analysed step
    INDEX = "index"  # the step with a given index on its thread
    RANGE = "range"  # consecutive steps first <= index < stop
    AT = "at"  # the step under a time: another export's pick, on this export's clock
    # The analysed step where the top candidate's finding is largest (Finding), when that
    # candidate is a collective wait, a sync or long host gaps; else no step.
    FINDING = "finding"


class Finding(StrEnum):
    """A ledger time a picture can show at its largest: (bucket, cause) rows of the ledger."""

    WAIT = "wait"  # the GPU held by collectives waiting for a peer
    SYNC = "sync"  # GPU idle while the step's thread syncs
    HOST = "host"  # GPU idle while the step's thread runs host code

    @property
    def ledger_rows(self) -> tuple[str, str]:
        """The (bucket, cause) of the ledger rows that hold this time."""
        return {
            Finding.WAIT: (Bucket.WAIT.value, WAIT_CAUSE),
            Finding.SYNC: (Bucket.IDLE.value, IdleCause.SYNC.value),
            Finding.HOST: (Bucket.IDLE.value, IdleCause.HOST.value),
        }[self]


# The verdict kinds whose time a picture of one step shows, and the ledger time that is theirs.
FINDING_OF_VERDICT = {
    VerdictKind.WAITING_FOR_PEER.value: Finding.WAIT,
    VerdictKind.SYNC_BOUND.value: Finding.SYNC,
    VerdictKind.LONG_HOST_GAPS.value: Finding.HOST,
}


@dataclass(frozen=True, slots=True)
class TimelineRequest:
    """Which steps one timeline picture shows."""

    pick: StepPick = StepPick.MEDIAN
    first: int = 0  # INDEX and RANGE
    stop: int | None = 0  # RANGE: one past the last index (None: to the thread's last step)
    # Every process: the steps of the same indices on each process's step thread, as picked
    # on the first process (for one time axis across ranks).
    all_processes: bool = False
    at_ns: int = 0  # AT: a time on the export's own clock
    paired_view: str = ""  # AT: the view of the request it pairs with (another export's)

    @property
    def view(self) -> str:
        """A short name for the picture: median, worst, step-3, steps-3-6 (+ -ranks)."""
        if self.paired_view:
            return self.paired_view
        ranks = "-ranks" if self.all_processes else ""
        if self.pick is StepPick.INDEX:
            return f"step-{self.first}{ranks}"
        if self.pick is StepPick.RANGE:
            return f"steps-{self.first}-{'end' if self.stop is None else self.stop}{ranks}"
        return self.pick.value + ranks


def choose_steps(steps: pd.DataFrame, request: TimelineRequest) -> pd.DataFrame:
    """The steps a request picks, from the main thread of the first process with steps.

    With all_processes, the steps of the same indices on every process's main thread too.
    FINDING picks the steps it chooses among (its analysed steps): largest_findings, once
    the ledger is known, names the one.
    """
    if steps.empty:
        raise TraceGapsError("the export has no steps to draw: no process has GPU work.")
    pid = int(steps[PID].min())
    thread_steps = _step_thread(steps, pid)
    chosen = _choose_on_thread(thread_steps, request, pid)
    if not request.all_processes:
        return chosen
    indices = set(chosen[STEP_INDEX].tolist())
    others = [_step_thread(steps, int(other)) for other in sorted(set(steps[PID]) - {pid})]
    return pd.concat(
        [chosen, *(other[other[STEP_INDEX].isin(indices)] for other in others)],
        ignore_index=True,
    )


def _step_thread(steps: pd.DataFrame, pid: int) -> pd.DataFrame:
    """The steps of the process's thread with the most steps, in time order."""
    process_steps = steps[steps[PID] == pid]
    counts = process_steps.groupby(GLOBAL_TID).size().reset_index(name="n")
    tid = int(counts.sort_values(["n", GLOBAL_TID], ascending=[False, True])[GLOBAL_TID].iloc[0])
    return process_steps[process_steps[GLOBAL_TID] == tid].sort_values(START_NS, kind="stable")


def _choose_on_thread(
    thread_steps: pd.DataFrame, request: TimelineRequest, pid: int
) -> pd.DataFrame:
    indices = thread_steps[STEP_INDEX]
    if request.pick is StepPick.INDEX:
        chosen = thread_steps[indices == request.first]
    elif request.pick is StepPick.RANGE:
        after = indices >= request.first
        chosen = thread_steps[after if request.stop is None else after & (indices < request.stop)]
    elif request.pick is StepPick.FINDING:
        analysed = thread_steps[~thread_steps[IS_WARMUP]]
        chosen = analysed if not analysed.empty else thread_steps
    elif request.pick is StepPick.AT:
        # The step whose window holds the time, else the one whose middle is nearest it.
        middles = (thread_steps[START_NS].to_numpy() + thread_steps[END_NS].to_numpy()) // 2
        holds = (thread_steps[START_NS] <= request.at_ns) & (request.at_ns < thread_steps[END_NS])
        at = (
            int(np.argmax(holds))
            if holds.any()
            else int(np.argmin(np.abs(middles - request.at_ns)))
        )
        chosen = thread_steps.iloc[[at]]
    else:
        analysed = thread_steps[~thread_steps[IS_WARMUP]]
        pool = analysed if not analysed.empty else thread_steps
        wall = (pool[END_NS] - pool[START_NS]).to_numpy()
        if request.pick is StepPick.WORST:
            at = int(np.argmax(wall))  # first of equals: the earliest
        else:
            median = np.median(wall)
            at = int(np.argmin(np.abs(wall - median)))
        chosen = pool.iloc[[at]]
    if chosen.empty:
        wanted = (
            f"step {request.first}"
            if request.pick is StepPick.INDEX
            else f"steps {request.first}:{'' if request.stop is None else request.stop}"
        )
        raise TraceGapsError(
            f"no {wanted} in process {pid}: its step thread has steps 0 to {int(indices.max())}. "
            "Choose --step-index K or --steps A:B within that range."
        )
    return chosen


def largest_findings(ledger: pd.DataFrame, step_ids: np.ndarray) -> pd.DataFrame:
    """Per Finding with time in the given steps: the step with the most of it (ties: the
    lowest step id, the earliest on its thread) and that time; columns finding, step_id,
    duration_ns."""
    ledger = ledger[np.isin(ledger[STEP_ID].to_numpy(), step_ids)]
    bucket, cause = ledger[BUCKET].astype(str).to_numpy(), ledger[CAUSE].astype(str).to_numpy()
    rows = []
    for finding in Finding:
        want_bucket, want_cause = finding.ledger_rows
        per_step = (
            ledger[(bucket == want_bucket) & (cause == want_cause)]
            .groupby(STEP_ID, sort=True)[DURATION_NS]
            .sum()
        )
        if len(per_step) and int(per_step.max()) > 0:
            step_id = int(per_step.idxmax())  # the first of equals: the lowest id
            rows.append((finding.value, step_id, int(per_step[step_id])))
    return pd.DataFrame(rows, columns=["finding", STEP_ID, DURATION_NS])


def choose_request(
    *,
    step_index: int | None = None,
    steps: str | None = None,
    worst: bool = False,
    median: bool = False,
) -> TimelineRequest:
    """The one TimelineRequest the plot options ask for (default: the step where the top
    finding is largest, StepPick.FINDING; where none applies, the picture is the median step's).

    steps is "A:B", Python-style: steps A to B-1 of the step thread ("A:" from A on, ":B"
    from 0), as analyze's --steps.
    """
    given = [step_index is not None, steps is not None, worst, median]
    if sum(given) > 1:
        raise UsageError("choose one of --step-index, --steps, --worst and --median.")
    if step_index is not None:
        return TimelineRequest(StepPick.INDEX, first=step_index)
    if steps is not None:
        chosen = parse_step_range(steps)  # A:B, A: or :B, as analyze's --steps
        return TimelineRequest(StepPick.RANGE, first=chosen.first, stop=chosen.stop)
    if worst:
        return TimelineRequest(StepPick.WORST)
    return TimelineRequest(StepPick.MEDIAN if median else StepPick.FINDING)
