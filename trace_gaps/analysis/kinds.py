"""Step kinds: prefill, decode, mixed ... steps of one thread analysed apart, never averaged.

A step's kind is the phase word of its name or of the first range inside it that has one
(steps.step_kinds). Where the analysed steps come in two kinds or more, each kind is
analysed on its own (pipeline.analyse_kinds), decode first: it is what this tool is for.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from trace_gaps.analysis.steps import IS_WARMUP, STEP_KIND
from trace_gaps.errors import StepNotFoundError
from trace_gaps.model import END_NS, GLOBAL_TID, PID, START_NS

FIRST_KIND = "DECODE"
NO_KIND = ""  # steps with no phase word: a kind of their own where others have one
NO_KIND_LABEL = "(no phase word)"

STEPS = "steps"  # analysed steps of the kind on the thread
SKIPPED = "skipped"  # its warm-up steps
WALL_NS = "wall_ns"  # summed wall time of its analysed steps
MEAN_NS = "mean_ns"
SHARE_PCT = "share_pct"  # of the thread's analysed step time, all kinds
KIND_COLUMNS = [PID, GLOBAL_TID, STEP_KIND, STEPS, SKIPPED, WALL_NS, MEAN_NS, SHARE_PCT]


def kind_label(kind: str) -> str:
    """A kind as the report names it."""
    return kind or NO_KIND_LABEL


def kind_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Per (process, thread, kind): analysed and skipped steps, wall time, share of the
    thread's analysed time."""
    if steps.empty:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in KIND_COLUMNS})
    analysed = ~steps[IS_WARMUP].to_numpy()
    wall = (steps[END_NS] - steps[START_NS]).to_numpy()
    frame = pd.DataFrame(
        {
            PID: steps[PID].to_numpy(),
            GLOBAL_TID: steps[GLOBAL_TID].to_numpy(),
            STEP_KIND: steps[STEP_KIND].to_numpy(),
            STEPS: analysed.astype(np.int64),
            SKIPPED: (~analysed).astype(np.int64),
            WALL_NS: np.where(analysed, wall, 0),
        }
    )
    table = frame.groupby([PID, GLOBAL_TID, STEP_KIND], sort=True).sum().reset_index()
    table[MEAN_NS] = table[WALL_NS] // table[STEPS].clip(lower=1)
    thread_wall = table.groupby(GLOBAL_TID)[WALL_NS].transform("sum")
    table[SHARE_PCT] = (100 * table[WALL_NS] / thread_wall.clip(lower=1)).round(1)
    return table[KIND_COLUMNS]


def ordered_kinds(table: pd.DataFrame) -> tuple[str, ...]:
    """The kinds with analysed steps: decode first, then the most frequent."""
    counts = table.groupby(STEP_KIND)[STEPS].sum()
    counts = counts[counts > 0]
    ordered = sorted(counts.index, key=lambda k: (k != FIRST_KIND, -int(counts[k]), str(k)))
    return tuple(str(k) for k in ordered)


def of_one_kind(
    steps: pd.DataFrame, table: pd.DataFrame, kind: str | None, path: Path
) -> tuple[pd.DataFrame, str | None]:
    """The steps of the kind asked for (--kind), else of the first kind where they come in
    several, else all of them; and the kind chosen (None: steps are not split by kind)."""
    kinds = ordered_kinds(table)
    if kind is None:
        if len(kinds) < 2:
            return steps, None
        kind = kinds[0]
    else:
        wanted = "" if kind.strip().lower() in ("", "none", NO_KIND_LABEL) else kind.upper()
        if wanted not in kinds:
            present = ", ".join(kind_label(k) for k in kinds) or "none"
            raise StepNotFoundError(
                f"has no analysed steps of kind {kind!r}; kinds present: {present} "
                "(a kind is the phase word in a step's name or in a range inside it)",
                path=path,
            )
        kind = wanted
    return steps[steps[STEP_KIND].to_numpy() == kind], kind
