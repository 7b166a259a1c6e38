"""Markdown: the outline GitHub-flavoured, ready to paste into an issue; tables stay tables
for any name."""

from trace_gaps.records.report import Report
from trace_gaps.report.outline import Block, Heading, Items, Level, Lines, Medium, Tone, outline
from trace_gaps.report.tables import RIGHT, Table

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
    for section in outline(report, Medium.DOCUMENT, export_argument=export_argument):
        for block in section.blocks:
            out += render_block(block)
    return "\n".join(out).rstrip() + "\n"


_HEADINGS = {Level.PART: "## {}", Level.SECTION: "### {}", Level.LABEL: "**{}**"}
# Facts and warnings keep their own lines (a hard break, two spaces); a remark is a paragraph.
_LINES = {Tone.ANSWER: "**{}**", Tone.FACTS: "{}  ", Tone.WARNING: "**{}**  ", Tone.REMARK: "{}"}


def render_block(block: Block) -> list[str]:
    """One block, and the blank line that ends it."""
    if isinstance(block, Table):
        return render_table(block)
    if isinstance(block, Heading):
        return [_HEADINGS[block.level].format(escape_markdown(block.text)), ""]
    if isinstance(block, Lines):
        return [_LINES[block.tone].format(escape_markdown(line)) for line in block.lines] + [""]
    return [*render_items(block), ""]


def render_items(items: Items) -> list[str]:
    """ "- item", or "1. item" where the list is ordered."""
    if items.marks is None:
        return [f"- {escape_markdown(item)}" for item in items.items]
    return [
        f"{mark} {escape_markdown(item)}" if mark else escape_markdown(item)
        for item, mark in zip(items.items, items.marks, strict=True)
    ]
