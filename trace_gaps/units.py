"""Time units: everything inside is integer nanoseconds; other units exist only at the edges."""

from collections.abc import Sequence
from typing import TypeAlias

Ns: TypeAlias = int

NS_PER_US = 1_000
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000


def us_to_ns(us: float) -> Ns:
    """Convert a user-given microsecond value to integer nanoseconds."""
    return round(us * NS_PER_US)


# (unit, ns in one, decimals), smallest first: the units durations are written in.
_UNITS = (("ns", 1, 0), ("µs", NS_PER_US, 1), ("ms", NS_PER_MS, 2), ("s", NS_PER_S, 2))


def _unit(magnitude: float) -> tuple[str, int, int]:
    """The largest unit not above the magnitude (ns for anything under 1 µs)."""
    return next(unit for unit in reversed(_UNITS) if magnitude >= unit[1] or unit[1] == 1)


def format_duration(ns: float) -> str:
    """Format a duration for people: 850 ns, 12.3 µs, 4.40 ms, 1.25 s."""
    name, size, decimals = _unit(abs(ns))
    return f"{ns / size:.{decimals}f} {name}"


def format_durations(column: Sequence[float]) -> list[str]:
    """Format a table column of durations in one unit, the one format_duration gives its
    smallest value (2.31 ms and 718.36 ms; 1.25 s beside them reads 1250.00 ms), so a
    column never switches units from line to line."""
    if not column:
        return []
    name, size, decimals = _unit(min(abs(ns) for ns in column))
    return [f"{ns / size:.{decimals}f} {name}" for ns in column]


def format_ms(ns: float) -> str:
    """Format a duration in milliseconds with two decimals (table cells)."""
    return f"{ns / NS_PER_MS:.2f}"


def format_rate(per_step: float, what: str) -> str:
    """A count per step in words that never print a rare event as "0.0 per step":
    "2.9 code loads per step", and under 0.05 per step "1 code load every 70 steps"
    (what is the plural; a trailing "s" is dropped for one)."""
    if per_step <= 0:
        return f"0 {what} per step"
    if per_step >= 0.05:
        return f"{per_step:.1f} {what} per step"
    one = what[:-1] if what.endswith("s") else what
    return f"1 {one} every {round(1 / per_step)} steps"


def format_count(per_step: float) -> str:
    """A count per step as the verdicts and the candidate table both print it: three
    significant digits, whole numbers from 100 (282, 17.3, 1.56, 0.0143)."""
    return f"{per_step:.0f}" if abs(per_step) >= 100 else f"{per_step:.3g}"
