"""A diff's verdicts in words: the step-time change with its noise, the few bucket changes
that explain it, a stage's change of execution mode, and the same over repeated runs or the
ranks of a run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trace_gaps.units import format_duration
from trace_gaps.vocabulary import Presence

if TYPE_CHECKING:
    from trace_gaps.diff.changes import BucketChange, RunChange, StageChange, WallChange
    from trace_gaps.diff.repeats import RunSpread


# Rows of the bucket table the diff's verdict names, at most.
VERDICT_CHANGES = 3


def signed_ms(ns: float) -> str:
    """ "−4.10 ms" / "+0.25 ms": a signed change with a real minus sign."""
    return ("−" if ns < 0 else "+") + format_duration(abs(ns))


def signed_pct(pct: float) -> str:
    """ "−38.0 %"."""
    return ("−" if pct < 0 else "+") + f"{abs(pct):.1f} %"


def describe_mode_change(change: StageChange) -> str | None:
    """ "verify_forward: eager 354 launches/step → graph 1", or None when nothing much moved.

    Much: the execution mode changed, or the launches per step changed by at least half.
    """
    if change.before is None or change.after is None:
        return None
    sides = [change.before, change.after]
    launches = [s.eager_launches_per_step + s.graph_launches_per_step for s in sides]
    moved = abs(launches[1] - launches[0]) >= max(1.0, launches[0] / 2)
    if sides[0].execution == sides[1].execution and not moved:
        return None
    return (
        f"{change.stage}: {sides[0].execution} {launches[0]:g} launches/step → "
        f"{sides[1].execution} {launches[1]:g}"
    )


def describe_change(
    what: str,
    change: WallChange | RunSpread,
    *,
    confidence_pct: int,
    no_interval: str = "fewer than 2 steps on a side, no noise estimate",
    interval_from: str = "",
) -> str:
    """'<what> +1.20 ms/step (+3.4 %, 95 % CI +0.10 ms to +2.00 ms<interval_from>)', or
    '(+3.4 %; <no_interval>)' where there is no interval."""
    head = f"{what} {signed_ms(change.change_ns)}/step"
    pct = signed_pct(change.change_pct) if change.change_pct is not None else "n/a %"
    if change.ci_ns is None:
        return head + f" ({pct}; {no_interval})"
    low, high = signed_ms(change.ci_ns.low_ns), signed_ms(change.ci_ns.high_ns)
    return head + f" ({pct}, {confidence_pct} % CI {low} to {high}{interval_from})"


def write_runs_verdict(runs: RunSpread, *, confidence_pct: int) -> str:
    """One line: the step time over repeated captures, with the run-to-run noise."""
    shown = [
        ", ".join(format_duration(ns) for ns in side)
        for side in (runs.before_run_ns, runs.after_run_ns)
    ]
    head = describe_change(
        "Step time over the runs",
        runs,
        confidence_pct=confidence_pct,
        no_interval="one run a side, no run-to-run noise estimate",
        interval_from=" from the run-to-run spread",
    )
    head += f"; runs before {shown[0]}, after {shown[1]}"
    if runs.is_beyond_noise is False:
        head += ": no change beyond the run-to-run noise"
    return head


def write_diff_verdict(
    wall: WallChange,
    buckets: list[BucketChange],
    stages: list[StageChange],
    *,
    confidence_pct: int,
) -> str:
    """One line: the step-time change and its noise, then the few changes that explain it."""
    head = describe_change("Step time", wall, confidence_pct=confidence_pct)
    if wall.ci_ns is None:
        named = buckets[:VERDICT_CHANGES]
    else:
        named = [b for b in buckets if b.is_beyond_noise][:VERDICT_CHANGES]
    if wall.is_beyond_noise is False:
        head += ": no change beyond noise"
        if named:
            head += "; within it"
    if not named:
        return head
    modes = {c.stage: describe_mode_change(c) for c in stages}
    parts = []
    for bucket in named:
        part = f"{bucket.stage} {bucket.bucket} {signed_ms(bucket.change_ns_per_step)}/step"
        if bucket.presence != Presence.BOTH:
            part += f" ({bucket.presence})"
        parts.append(part)
    mentioned = dict.fromkeys(b.stage for b in named)
    extra = [modes[s] for s in mentioned if modes.get(s)]
    return head + ": " + ", ".join(parts) + "".join(f"; {m}" for m in extra if m)


def write_run_verdict(run: RunChange, *, confidence_pct: int) -> str:
    """One line for several ranks compared: the run's step time (its slowest rank's) on each
    side, and its change with the noise of those ranks' steps."""
    wall = run.wall
    head = describe_change("Run step time (its slowest rank)", wall, confidence_pct=confidence_pct)
    if wall.is_beyond_noise is False:
        head += ", no change beyond noise"
    sides = [
        f"{label} process {side.pid} in {side.file} ({format_duration(side.wall.mean_ns)}/step)"
        for label, side in (("before", run.before), ("after", run.after))
    ]
    return f"{head}: slowest {sides[0]}, {sides[1]}"
