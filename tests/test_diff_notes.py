"""The diff's notes in words (diff/notes.py): one sentence per code."""

from __future__ import annotations

import pytest

from trace_gaps.diff.notes import DiffNote, DiffNoteCode, write_diff_note

EXAMPLES = [
    (
        DiffNote(DiffNoteCode.SAME_KIND, {"kind": "DECODE"}),
        (
            "Steps come in kinds: compared are the DECODE steps of each side; pass --kind to "
            "compare another kind."
        ),
    ),
    (
        DiffNote(DiffNoteCode.KINDS_DIFFER, {"before": "DECODE", "after": "PREFILL"}),
        (
            "The sides' first kinds differ (before: DECODE, after: PREFILL): pass --kind to "
            "compare one kind on both sides."
        ),
    ),
    (
        DiffNote(DiffNoteCode.BY_PID, {"pids": ["100", "200"]}),
        ("Compared process by process: pids 100, 200 on both sides."),
    ),
    (
        DiffNote(DiffNoteCode.RANK_BY_RANK, {"before": ["1 (a.sqlite)", "2"], "after": ["3", "4"]}),
        (
            "Compared rank by rank, in the order of the exports and pids of each side: "
            "1 (a.sqlite) → 3; 2 → 4."
        ),
    ),
    (
        DiffNote(
            DiffNoteCode.PROCESSES_DIFFER,
            {"before": ["1", "2"], "after": ["3"], "compared_before": "1", "compared_after": "3"},
        ),
        (
            "The processes differ (before: 1, 2; after: 3): compared the lowest pid of each, "
            "1 with 3. Choose with --process-before/--process-after."
        ),
    ),
    (
        DiffNote(DiffNoteCode.STEP_RANGES_DIFFER, {"names": ["", "decode_step"]}),
        (
            "The two sides use different step ranges (whole process, decode_step): compare with "
            "--step NAME."
        ),
    ),
    (
        DiffNote(DiffNoteCode.SIDE_NOTE, {"side": "after", "text": "No NVTX table."}),
        ("after: No NVTX table."),
    ),
]


def test_every_code_has_an_example() -> None:
    assert {note.code for note, _ in EXAMPLES} == set(DiffNoteCode)


@pytest.mark.parametrize(("note", "words"), EXAMPLES)
def test_each_diff_note_has_its_sentence(note: DiffNote, words: str) -> None:
    assert write_diff_note(note) == words
