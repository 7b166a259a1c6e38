"""The diff's notes: what the comparison chose (which processes, which kind of step) as a code
and its numbers, and each code's sentence.

diff/build.py finds the facts; diff_sides writes the sentences into the Diff, so that text,
Markdown and the JSON carry the same ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from trace_gaps.analysis.kinds import kind_label


class DiffNoteCode(StrEnum):
    """What a diff note says."""

    SAME_KIND = "same_kind"  # steps come in kinds: the first kind compared on both sides
    KINDS_DIFFER = "kinds_differ"  # the sides' first kinds differ
    BY_PID = "by_pid"  # the same pids on both sides: compared process by process
    RANK_BY_RANK = "rank_by_rank"  # as many processes, other pids: in the reports' order
    PROCESSES_DIFFER = "processes_differ"  # the lowest pid of each side compared
    STEP_RANGES_DIFFER = "step_ranges_differ"  # the sides' step ranges are not the same
    SIDE_NOTE = "side_note"  # an integrity note of one side's report


@dataclass(frozen=True, slots=True)
class DiffNote:
    """A diff note as the comparison finds it: its code and the values its sentence is
    written from (kinds, pids, "pid (export)" names, step range names, a side's note)."""

    code: DiffNoteCode
    values: dict[str, str | list[str]] = field(default_factory=dict)


def _text(values: dict[str, str | list[str]], key: str) -> str:
    value = values[key]
    if not isinstance(value, str):
        raise TypeError(f"diff note value {key!r} is {value!r}, not a str")
    return value


def _items(values: dict[str, str | list[str]], key: str) -> list[str]:
    value = values[key]
    if not isinstance(value, list):
        raise TypeError(f"diff note value {key!r} is {value!r}, not a list")
    return value


def _same_kind(v: dict[str, str | list[str]]) -> str:
    return (
        f"Steps come in kinds: compared are the {kind_label(_text(v, 'kind'))} steps of each "
        "side; pass --kind to compare another kind."
    )


def _kinds_differ(v: dict[str, str | list[str]]) -> str:
    return (
        f"The sides' first kinds differ (before: {kind_label(_text(v, 'before'))}, after: "
        f"{kind_label(_text(v, 'after'))}): pass --kind to compare one kind on both sides."
    )


def _rank_by_rank(v: dict[str, str | list[str]]) -> str:
    shown = "; ".join(
        f"{b} → {a}" for b, a in zip(_items(v, "before"), _items(v, "after"), strict=True)
    )
    return f"Compared rank by rank, in the order of the exports and pids of each side: {shown}."


def _processes_differ(v: dict[str, str | list[str]]) -> str:
    return (
        f"The processes differ (before: {', '.join(_items(v, 'before'))}; after: "
        f"{', '.join(_items(v, 'after'))}): compared the lowest pid of each, "
        f"{_text(v, 'compared_before')} with {_text(v, 'compared_after')}. Choose with "
        "--process-before/--process-after."
    )


def _step_ranges_differ(v: dict[str, str | list[str]]) -> str:
    shown = ", ".join(name or "whole process" for name in _items(v, "names"))
    return f"The two sides use different step ranges ({shown}): compare with --step NAME."


_WORDS: dict[DiffNoteCode, Callable[[dict[str, str | list[str]]], str]] = {
    DiffNoteCode.SAME_KIND: _same_kind,
    DiffNoteCode.KINDS_DIFFER: _kinds_differ,
    DiffNoteCode.BY_PID: lambda v: (
        f"Compared process by process: pids {', '.join(_items(v, 'pids'))} on both sides."
    ),
    DiffNoteCode.RANK_BY_RANK: _rank_by_rank,
    DiffNoteCode.PROCESSES_DIFFER: _processes_differ,
    DiffNoteCode.STEP_RANGES_DIFFER: _step_ranges_differ,
    DiffNoteCode.SIDE_NOTE: lambda v: f"{_text(v, 'side')}: {_text(v, 'text')}",
}


def write_diff_note(note: DiffNote) -> str:
    """The note's sentence."""
    return _WORDS[note.code](note.values)
