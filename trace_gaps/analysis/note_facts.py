"""The facts of an integrity note (records.NoteFacts) and the shapes of its numbers.

analysis/integrity.py lists the notes; report/notes.py writes each code's sentence.
"""

from __future__ import annotations

from trace_gaps.records.notes import Figures, NoteCode, NoteFacts, NoteNumber, Severity

Numbers = dict[str, NoteNumber]


def note_of(
    code: NoteCode, severity: Severity, figures: list[Figures], **numbers: NoteNumber
) -> NoteFacts:
    """The facts of a note: its code, severity, the figures it bears on, and its numbers."""
    return NoteFacts(code, severity, tuple(figures), numbers)


def counted(damaged: Numbers, **totals: NoteNumber) -> Numbers | None:
    """The numbers of a note on damaged rows, where any of the damaged counts is not 0
    (None: no note); the totals, the rows of their tables, come after them."""
    return {**damaged, **totals} if any(damaged.values()) else None


def present(is_present: bool) -> Numbers | None:
    """The numbers of a note that has none: {} where it applies, else None (no note)."""
    return {} if is_present else None
