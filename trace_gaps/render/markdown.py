"""Markdown: GitHub-flavoured, ready to paste into an issue; tables stay tables for any name."""

from trace_gaps.notes import unreliable_lines
from trace_gaps.records import Report
from trace_gaps.render.kernels import kernel_table
from trace_gaps.render.tables import (
    RIGHT,
    Table,
    candidate_table,
    cross_process_table,
    describe_export,
    describe_steps,
    evidence_lines,
    gpu_metrics_table,
    graph_lines,
    kinds_table,
    ledger_table,
    long_gap_table,
    process_title,
    replay_lines,
    stage_table,
    what_if_table,
)

_ESCAPES = str.maketrans(
    {
        "\\": "\\\\",
        "|": "\\|",
        "`": "\\`",
        "*": "\\*",
        "_": "\\_",
        "<": "&lt;",
        ">": "&gt;",
        "[": "\\[",
        "]": "\\]",
        "\n": " ",
        "\r": " ",
        "\t": " ",
    }
)


def escape_markdown(text: str) -> str:
    """Escape text for a Markdown table cell or line: no markup, no broken rows."""
    return text.translate(_ESCAPES)


def render_table(table: Table) -> list[str]:
    """A GitHub table with numbers right-aligned."""
    if not table.rows:
        return []
    lines = [
        "| " + " | ".join(escape_markdown(c) for c in table.columns) + " |",
        "|" + "|".join("---:" if a == RIGHT else "---" for a in table.align) + "|",
    ]
    lines += ["| " + " | ".join(escape_markdown(cell) for cell in row) + " |" for row in table.rows]
    return [f"**{escape_markdown(table.title)}**", "", *lines, ""]


def render_markdown(report: Report, *, export_argument: str | None = None) -> str:
    """Render the Report as a Markdown document; export_argument: how the command that
    draws a gap's step names the export (evidence_lines)."""
    out = ["# trace-gaps report", ""]
    out += [escape_markdown(line) + "  " for line in describe_export(report)] + [""]
    out += [f"**{escape_markdown(line)}**  " for line in unreliable_lines(report.unreliable)]
    out += [""] if report.unreliable else []
    out += render_table(kinds_table(report))
    for process in report.processes:
        out += [f"## {escape_markdown(process_title(process))}", ""]
        out += [f"**{escape_markdown(process.headline)}**", ""]
        out += [escape_markdown(line) + "  " for line in describe_steps(process)] + [""]
        if process.candidates:
            out += ["### Verdict", ""]
            out += [f"{c.rank}. {escape_markdown(c.verdict)}" for c in process.candidates[:3]] + [
                ""
            ]
        out += render_table(what_if_table(process))
        out += render_table(candidate_table(process))
        out += [escape_markdown(line) for line in replay_lines(process)] + (
            [""] if replay_lines(process) else []
        )
        out += render_table(ledger_table(process))
        out += render_table(stage_table(process))
        out += render_table(gpu_metrics_table(process))
        out += render_table(long_gap_table(process))
        out += render_table(kernel_table(process))
        graphs = graph_lines(process)
        if graphs:
            out += (
                ["**CUDA graphs**", ""] + [f"- {escape_markdown(line)}" for line in graphs] + [""]
            )
        sections = evidence_lines(
            process,
            # Several exports: a process's own export and clock are not this one's.
            export=None if report.other_exports else report.export,
            several_processes=len(report.processes) > 1,
            export_argument=export_argument,
        )
        if sections:
            out += ["### Evidence", ""]
            for heading, lines in sections:
                out += [f"**{escape_markdown(heading)}**", ""]
                out += [f"- {escape_markdown(line)}" for line in lines] + [""]
    out += render_table(cross_process_table(report))
    if report.notes:
        out += (
            ["## Integrity notes", ""]
            + [f"- {escape_markdown(note.text)}" for note in report.notes]
            + [""]
        )
    return "\n".join(out).rstrip() + "\n"
