"""`--steps A:B`: the analysis restricted to a range of step indices, as a Python slice.

A step's index is its position on its thread, from 0, warm-up included: the index that
`plot timeline --step-index`, `plot --steps` and the JSON's `step_index` use. The range
is intersected with the warm-up rule (or --skip): a warm-up step inside it stays skipped,
and a step outside it is skipped with the reason SkipReason.OUTSIDE_STEPS (`outside --steps A:B`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from trace_gaps.analysis.steps import IS_WARMUP, SKIP_REASON, STEP_INDEX
from trace_gaps.errors import UsageError
from trace_gaps.records.report import SkipReason

_RANGE = re.compile(r"\s*(\d*)\s*:\s*(\d*)\s*")


@dataclass(frozen=True, slots=True)
class StepRange:
    """Step indices first <= index < stop (stop None: to the thread's last step)."""

    first: int = 0
    stop: int | None = None

    @property
    def label(self) -> str:
        """As the user wrote it, normalised: "3:6", "3:", "0:6"."""
        return f"{self.first}:{'' if self.stop is None else self.stop}"

    def holds(self, indices: np.ndarray) -> np.ndarray:
        """Per step index, whether the range holds it."""
        inside: np.ndarray = indices >= self.first
        return inside if self.stop is None else inside & (indices < self.stop)


def parse_step_range(text: str) -> StepRange:
    """`A:B`, `A:` or `:B` (non-negative integers, B excluded) as a StepRange; a UsageError
    (exit 2) for anything else."""
    found = _RANGE.fullmatch(text)
    first, stop = (found.group(1), found.group(2)) if found else ("", "")
    if found is None or not (first or stop) or (first and stop and int(stop) <= int(first)):
        raise UsageError(
            f"--steps {text!r} is not a range A:B of step indices with A < B (B excluded, "
            "either may be left out): --steps 3:6 analyses steps 3, 4 and 5, --steps 10: "
            "every step from 10 on."
        )
    return StepRange(int(first) if first else 0, int(stop) if stop else None)


def restrict_steps(steps: pd.DataFrame, step_range: StepRange) -> pd.DataFrame:
    """The steps with those outside the range marked skipped (IS_WARMUP), reason
    SkipReason.OUTSIDE_STEPS; a UsageError when no analysed step is left in it."""
    outside = ~step_range.holds(steps[STEP_INDEX].to_numpy())
    analysed = ~steps[IS_WARMUP].to_numpy()
    if analysed.any() and not (analysed & ~outside).any():
        indices = steps.loc[analysed, STEP_INDEX]
        raise UsageError(
            f"--steps {step_range.label} holds no analysed step: the analysed steps have "
            f"indices {int(indices.min())} to {int(indices.max())} (warm-up steps before "
            "them are skipped; --skip 0 analyses them too)."
        )
    newly = outside & analysed
    return steps.assign(
        **{
            IS_WARMUP: ~analysed | newly,
            SKIP_REASON: np.where(
                newly, SkipReason.OUTSIDE_STEPS.value, steps[SKIP_REASON].to_numpy()
            ),
        }
    )
