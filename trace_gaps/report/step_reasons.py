"""How the steps were found and why some were skipped, in words: the step range's StepChoice
and each SkipReason code (analysis/step_choice.py, steps.py and step_range.py give the codes
and numbers)."""

from __future__ import annotations

from trace_gaps.analysis.step_choice import CYCLE_SUFFIX, MIN_REPEATS
from trace_gaps.analysis.steps import WARMUP_LENGTH_FACTOR
from trace_gaps.records.report import SkipReason, StepChoice, StepFound


def describe_step_choice(choice: StepChoice, name: str | None) -> str:
    """'found: the most frequent NVTX range (19 instances) that repeats, ...' for the step
    range `name` (None: no step range), without a closing full stop but for NONE's."""
    names = f" of {choice.names} names" if choice.names > 1 else ""
    if choice.code is StepFound.GIVEN:
        return f"given with --step ({choice.instances} instances{names})"
    if choice.code is StepFound.MOST_FREQUENT:
        family = " family" if choice.names > 1 else ""
        return (
            f"found: the most frequent NVTX range{family} ({choice.instances} instances{names}) "
            "that repeats, is not nested in another repeating range and contains other ranges"
        )
    if choice.code is StepFound.CYCLE:
        start = (name or "").removesuffix(CYCLE_SUFFIX)
        others = ", ".join(repr(other) for other in choice.also_repeating)
        return (
            f"found: no range encloses an iteration, so a step is the cycle from one "
            f"{start!r} range to the next on its thread ({choice.instances} instances; the "
            f"sequence also repeats {others}); time in the cycle outside every range is its "
            "own stage"
        )
    return (
        f"no NVTX range repeats at least {MIN_REPEATS} times around other ranges, and no "
        "sequence of sibling ranges repeats: each process is analysed as one step spanning "
        "its GPU work. Pass --step NAME to choose a range."
    )


def describe_skip_reason(code: str, index_range: str | None) -> str:
    """'loads CUDA modules', 'outside --steps 3:6': why steps were skipped; index_range is the
    --steps A:B the steps were restricted to."""
    words = {
        SkipReason.ANALYSED: "",
        SkipReason.GIVEN_SKIP: "--skip",
        SkipReason.LOADS_MODULES: "loads CUDA modules",
        SkipReason.LONGER_THAN_MEDIAN: f"longer than {WARMUP_LENGTH_FACTOR}x the median",
        SkipReason.OUTSIDE_STEPS: f"outside --steps {index_range}",
    }
    return words[SkipReason(code)]
