"""The words of the notes on several exports analysed together: their clocks aligned, an
export analysed apart, and collectives whose peers' exports are missing (the numbers come
from run/multi.py and analysis/ranks.py; report/notes.py lists every code's words)."""

from __future__ import annotations

from trace_gaps.report.note_numbers import Numbers, float_of, int_of, items_of
from trace_gaps.units import format_duration


def exports_aligned(n: Numbers) -> str:
    """EXPORTS_ALIGNED: the exports on one clock, each one's offset and what is left."""
    offsets = ", ".join(
        f"{file} {_ms(offset)} ms"
        for file, offset in zip(items_of(n, "files"), items_of(n, "offsets_ns"), strict=False)
    )
    text = f"{len(items_of(n, 'files'))} exports on one clock ({n['method']}): {offsets}"
    if "residual_p50_ns" in n:
        text += (
            f"; residual end mismatch of shared collectives p50 "
            f"{int_of(n, 'residual_p50_ns') / 1e3:.1f} µs, p99 {int_of(n, 'residual_p99_ns') / 1e3:.1f} µs "
            f"over {n['shared_instances']} instances"
        )
    if "drift_ns_per_s" in n:
        text += f"; remaining drift {float_of(n, 'drift_ns_per_s') / 1e3:.2f} µs/s (not corrected)"
    return text + "."


def exports_apart(n: Numbers) -> str:
    """EXPORTS_APART: an export not of the first one's run, and why not."""
    reason = str(n["reason"])
    if reason == "no_collectives":
        why = f"no collective kernel in {n['without']}, so no shared collective aligns the clocks"
    elif reason == "no_shared_family":
        why = (
            f"no shared collective: {n['first']} runs {', '.join(map(str, items_of(n, 'families')))}, "
            f"{n['file']} {', '.join(map(str, items_of(n, 'other_families')))}"
        )
    elif reason == "counts":
        why = (
            f"the collectives disagree: {n['count']} {n['family']} instances in {n['first']}, "
            f"{n['other_count']} in {n['file']}"
        )
    else:
        why = (
            f"the collectives disagree: once aligned, the ends of their {n['shared_instances']} "
            f"shared instances differ by p50 {format_duration(int_of(n, 'residual_p50_ns'))} "
            f"(one run's agree within {format_duration(int_of(n, 'tolerance_ns'))})"
        )
    return (
        f"{n['file']} is not of {n['first']}'s run ({why}): analysed apart, on its own clock, "
        "its collectives matched among its own processes only."
    )


def collectives_unsplit(n: Numbers) -> str:
    """COLLECTIVES_UNSPLIT: one rank's export alone, its collectives' wait unknown."""
    names = ", ".join(map(str, items_of(n, "names")[:2]))
    add = f" (trace-gaps analyze '{n['exports_to_add']}')" if n["exports_to_add"] else ""
    bound = int_of(n, "wait_lower_bound_ns_per_step")
    waiting = (
        f"at least {format_duration(bound)}/step of it is waiting"
        if bound >= 0
        else "how much of it is waiting is unknown"
    )
    text = (
        f"Process {n['process']}: its {float_of(n, 'collectives_per_step'):g} collectives per step "
        f"({names}) have no participant in this analysis: the other ranks' exports are "
        f"missing; pass them with this one{add}. {format_duration(int_of(n, 'collective_ns_per_step'))}"
        f"/step of its GPU busy time is these collective kernels, whose wait for the other "
        f"ranks and transfer one export cannot split ({waiting}). Levers the missing ranks "
        "decide are not priced: ontime (the wait is unknown), GPU work faster (gpuN) on a "
        "stage whose busy time is mostly collectives (their time is mostly waiting)"
    )
    if int_of(n, "peers_decide_levers"):
        return text + (
            " and every other lever of this process, as it waits a tenth of its step or more: "
            "made faster, it arrives earlier and waits longer unless the other ranks change "
            "too, so its candidates are ranked by the time they explain (--what-if still "
            "replays this export alone, its collectives as long as measured)."
        )
    return text + (
        "; its other levers are priced with each collective as long as measured, as if the "
        "other ranks gained as much."
    )


def _ms(offset_ns: int | str) -> str:
    return f"{int(offset_ns) / 1e6:+.3f}"
