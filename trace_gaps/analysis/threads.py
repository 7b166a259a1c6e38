"""NVTX on one thread, launches on another: the launching thread charged to the step by time.

Serving engines run the scheduler and the forward on different threads (SGLang's overlap
scheduler, a model-runner thread fed by a queue). When the threads holding a process's
steps launch no GPU work and other threads of that process do, those threads' calls are
analysed as the step thread's: each call's stage is the one open on the step thread at its
start, and the idle time is split by what the launching threads were doing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from trace_gaps.analysis.steps import IS_WARMUP
from trace_gaps.model import END_NS, GLOBAL_TID, PID, START_NS, RowSources

SAMPLED_STEPS = 16  # which threads launch is read over the first analysed steps


def borrowed_threads(steps: pd.DataFrame, sources: RowSources) -> dict[int, int]:
    """Per launching thread to be analysed as a step thread, that step thread: in a process
    with one step thread that launches nothing in the first SAMPLED_STEPS analysed steps
    while other threads of the process do."""
    analysed = steps[~steps[IS_WARMUP]].sort_values(START_NS, kind="stable")
    if analysed.empty:
        return {}
    until = int(analysed[END_NS].iloc[:SAMPLED_STEPS].max())
    counts = sources.launches_per_thread(int(analysed[START_NS].iloc[0]), until)
    counts = counts[counts["launches"] > 0]
    borrowed: dict[int, int] = {}
    for pid, step_tids in analysed.groupby(PID)[GLOBAL_TID].unique().items():
        if len(step_tids) != 1:
            continue
        launching = counts.loc[counts[PID] == pid, GLOBAL_TID].to_numpy()
        if len(launching) and not np.isin(step_tids, launching).any():
            borrowed.update({int(tid): int(step_tids[0]) for tid in launching})
    return borrowed


def lent_threads(calls: pd.DataFrame, borrowed: dict[int, int]) -> pd.DataFrame:
    """The calls with each borrowed thread's id replaced by its step thread's."""
    if not borrowed or calls.empty:
        return calls
    tids = calls[GLOBAL_TID].to_numpy()
    lent = np.isin(tids, list(borrowed))
    if not lent.any():
        return calls
    mapped = pd.Series(tids[lent]).map(borrowed).to_numpy(dtype=np.int64)
    new_tids = tids.copy()
    new_tids[lent] = mapped
    return calls.assign(**{GLOBAL_TID: new_tids})
